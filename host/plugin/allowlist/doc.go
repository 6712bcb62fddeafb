// Package allowlist pins WebAssembly plugins by the sha256 of their bytes
// (issue 7, "Plugin governance"): when an operator sets a list, only
// modules whose digest is listed may be compiled; everything else is
// refused with a *NotAllowedError naming the plugin and its digest, before
// a single byte of it is compiled or run.
//
// The list file (the --plugin-allowlist flag) has one entry per line:
//
//	# comment
//	<64 hex digits>               any plugin name may use these bytes
//	<64 hex digits>  <name>       only the plugin called <name> may
//
// Blank lines and everything after a '#' are ignored; hex is
// case-insensitive. A name pins the digest to that plugin name, so a
// trusted module cannot be uploaded under another policy's name. The same
// entry syntax is what sampling.Options.AllowSHA256 and
// plugin.RegistryOptions.AllowSHA256 take, so ReadFile's result is passed
// to both unchanged.
//
// Invariants:
//   - A nil or empty *List allows everything (no list configured); a list
//     file with no entries is an error, never an accidental allow-all.
//   - Built-in plugins are not this package's concern: the registries
//     exempt the bytes they embed and check everything else.
package allowlist
