package builtin

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestFSMatchesDirectory checks the embedded set is exactly the .wasm files
// on disk when the test binary was built, byte for byte.
func TestFSMatchesDirectory(t *testing.T) {
	if _, err := fs.Stat(FS(), "README.md"); err != nil {
		t.Fatalf("README.md not embedded: %v", err)
	}
	embedded, err := fs.Glob(FS(), "*.wasm")
	if err != nil {
		t.Fatal(err)
	}
	onDisk, err := filepath.Glob(filepath.Join("wasm", "*.wasm"))
	if err != nil {
		t.Fatal(err)
	}
	for i := range onDisk {
		onDisk[i] = filepath.Base(onDisk[i])
	}
	slices.Sort(onDisk)
	if !slices.Equal(embedded, onDisk) {
		t.Fatalf("embedded %v, on disk %v", embedded, onDisk)
	}
	for _, name := range embedded {
		a, _ := fs.ReadFile(FS(), name)
		b, _ := os.ReadFile(filepath.Join("wasm", name))
		if !bytes.Equal(a, b) {
			t.Errorf("%s differs from the file on disk (rebuild the test binary)", name)
		}
	}
}
