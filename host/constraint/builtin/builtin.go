// Package builtin embeds the built-in output-constraint plugins that
// scripts/build-plugins.sh (make plugins) writes to wasm/<name>.wasm, so
// a bare kvhost binary enforces structured output without a plugins
// folder.
//
// Invariant: wasm/ always holds a committed README.md, so the embed
// pattern matches on a fresh checkout where nothing was built; FS then
// lists no .wasm files.
package builtin

import (
	"embed"
	"io/fs"
)

//go:embed wasm
var files embed.FS

// FS returns the built-in constraint plugins: <name>.wasm files plus a
// README.md.
func FS() fs.FS {
	sub, err := fs.Sub(files, "wasm")
	if err != nil {
		panic(err) // "wasm" is embedded
	}
	return sub
}
