package builtin

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/kvhost/kvhost/host/plugin"
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

// TestDescribedMatchesTheModules: the embedded DESCRIBED.json
// (scripts/describe-builtins) is what Describe answers for the embedded
// configurators now, each tagged with its bytes' sha256: the registry seeds
// its records from it, so a first start interprets only the claimant.
func TestDescribedMatchesTheModules(t *testing.T) {
	embedded, _ := fs.Glob(FS(), "*.wasm")
	if len(embedded) == 0 {
		t.Skip("no built-in plugins built (make plugins), nothing described")
	}
	have, err := fs.ReadFile(FS(), plugin.DescribedFile)
	if err != nil {
		t.Fatalf("built-ins embedded without %s (make plugins writes it): %v", plugin.DescribedFile, err)
	}
	ctx := context.Background()
	rt, err := plugin.NewRuntime(ctx, plugin.Config{NoCache: true})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close(ctx)
	want, err := plugin.DescribeSet(ctx, rt, FS())
	if err != nil {
		t.Fatal(err)
	}
	var a, b map[string]plugin.Described
	if err := json.Unmarshal(have, &a); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(want, &b); err != nil {
		t.Fatal(err)
	}
	if len(a) == 0 || !reflect.DeepEqual(a, b) {
		t.Fatalf("%s is stale (run scripts/describe-builtins host/plugin/builtin/wasm):\nhave %s\nwant %s", plugin.DescribedFile, have, want)
	}
}
