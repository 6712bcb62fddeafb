package builtin

import (
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// TestFSMatchesDirectory checks the embedded set is exactly the .wasm files
// present when the test binary was built (plus the README).
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
	sort.Strings(onDisk)
	if strings.Join(embedded, ",") != strings.Join(onDisk, ",") {
		t.Fatalf("embedded %v, on disk %v", embedded, onDisk)
	}
	for _, name := range embedded {
		a, _ := fs.ReadFile(FS(), name)
		b, _ := os.ReadFile(filepath.Join("wasm", name))
		if string(a) != string(b) {
			t.Errorf("%s: embedded copy differs from disk (rebuild the test binary)", name)
		}
	}
}
