// Package builtin embeds the built-in plugins of every kind that make
// plugins writes to wasm/ — the KV configurators (<kind>.wasm,
// scripts/build-plugins.sh) and the sampling policies (<name>.wasm,
// scripts/build-samplers.sh) — so a bare kvhost binary configures KV pools
// and serves standard, greedy, typical, mirostat, dry, xtc and top-n-sigma
// without a plugins folder. One flat set, read by plugin.NewRegistryWith
// like a plugins folder; the host tells the kinds apart by their exports.
//
// Invariant: the wasm directory always holds a committed README.md, so the
// embed pattern matches even on a fresh checkout where no plugin was built;
// FS then simply lists no .wasm files.
package builtin

import (
	"embed"
	"io/fs"
)

//go:embed wasm
var files embed.FS

// FS returns the built-in plugins as a file system whose root holds the
// .wasm files (plus a README.md).
func FS() fs.FS {
	sub, err := fs.Sub(files, "wasm")
	if err != nil {
		panic(err) // "wasm" is a valid, embedded path
	}
	return sub
}
