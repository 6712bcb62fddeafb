// Package web is kvhost's dashboard: static files embedded in the binary
// and a few JSON endpoints under /ui/api/, all behind one http.Handler that
// the server mounts as Options.Web (GET on every path no API route claims).
//
// The page is plain ES modules with one vendored charting library
// (static/vendor/chart.umd.min.js, Chart.js, copied from npm by `make web`
// and committed, so a fresh checkout builds and runs without npm or any
// network). It reads the host's own routes: /v1/memory for the ledger,
// /v1/completions and /v1/chat/completions for the playground's two modes,
// /admin/samplers/{name} for plugin swaps, and /ui/api/* (served here) for
// what has no public route yet: the load snapshot, the plugin list, and the
// plan calculator (a plan that does not fit answers 422 with the budget's
// numbers and the setting to change).
//
// The layout holds from a phone (390 px) to a desktop: nothing reaches past
// the viewport and no label is clipped, in the DOM or on a chart, which the
// end-to-end tests measure at 1024 and 390 px. Generated text is shown as
// text (completion chunks split into tokens by text_offset), token pieces
// only in the hover tip.
//
// API key: with the host's --api-key, everything but the static shell
// (IsStatic: index.html and /ui/ files, which carry no host data) needs
// the key, /ui/api/* included. The page then shows only a prompt for it;
// the key typed in the API key field is sent as a bearer header on every
// request the page makes (never a cookie, so another site cannot make the
// browser use it; never a query string, so it is not logged) and kept in
// the tab's sessionStorage across reloads.
//
// Invariants: the handler serves only what is embedded (no file system
// access at run time, no path outside static/); every response has an
// explicit Content-Type and nosniff; /ui/api/* answers JSON, including its
// errors ({"error": {"message", "type"}}); a hook left nil answers 404 for
// its endpoint, and /ui/api/config tells the page which hooks are wired so
// it can hide what is missing instead of failing.
package web
