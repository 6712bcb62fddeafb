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
// Invariants: the handler serves only what is embedded (no file system
// access at run time, no path outside static/); every response has an
// explicit Content-Type and nosniff; /ui/api/* answers JSON, including its
// errors ({"error": {"message", "type"}}); a hook left nil answers 404 for
// its endpoint, and /ui/api/config tells the page which hooks are wired so
// it can hide what is missing instead of failing.
package web
