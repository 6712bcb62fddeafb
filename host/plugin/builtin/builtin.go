// Package builtin embeds the built-in configurator plugins that
// scripts/build-plugins.sh (make plugins) writes to wasm/<kind>.wasm, so a
// bare kvhost binary can configure KV pools without a plugins folder.
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
// <kind>.wasm files (plus a README.md).
func FS() fs.FS {
	sub, err := fs.Sub(files, "wasm")
	if err != nil {
		panic(err) // "wasm" is a valid, embedded path
	}
	return sub
}
