package builtin

import (
	"crypto/sha256"
	"encoding/hex"
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

// TestSumsMatchTheBytes: the embedded SHA256SUMS (scripts/sum-builtins.sh)
// lists every embedded .wasm with the sha256 of its bytes and nothing
// else: the registry keys built-ins' records by these sums without reading
// the modules, so a stale list must not reach a binary.
func TestSumsMatchTheBytes(t *testing.T) {
	embedded, err := fs.Glob(FS(), "*.wasm")
	if err != nil {
		t.Fatal(err)
	}
	b, err := fs.ReadFile(FS(), "SHA256SUMS")
	if len(embedded) == 0 {
		t.Skip("no built-in plugins built (make plugins), nothing to sum")
	}
	if err != nil {
		t.Fatalf("built-ins embedded without SHA256SUMS (make plugins writes it): %v", err)
	}
	listed := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.Fields(line)
		if len(f) != 2 {
			t.Fatalf("SHA256SUMS line %q", line)
		}
		listed[strings.TrimPrefix(f[1], "*")] = f[0]
	}
	for _, name := range embedded {
		data, err := fs.ReadFile(FS(), name)
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(data)
		if got := hex.EncodeToString(sum[:]); listed[name] != got {
			t.Errorf("%s: SHA256SUMS lists %q, its bytes hash to %s (run scripts/sum-builtins.sh)", name, listed[name], got)
		}
		delete(listed, name)
	}
	for name := range listed {
		t.Errorf("SHA256SUMS lists %s, which is not embedded", name)
	}
}
