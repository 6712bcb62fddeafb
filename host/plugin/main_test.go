package plugin

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvhost/kvhost/host/plugin/wasmtest"
)

// wasmDir holds every plugin the tests load: the five configurators as
// <kind>.wasm and the hostile ones as hostile-<name>.wasm. TestMain builds
// them when missing or older than any Go source they depend on, so go test
// works on a fresh checkout without make plugins.
const wasmDir = "testdata/wasm"

var (
	configuratorNames = []string{"mha", "mla", "swa", "mamba", "fp4"}
	hostile           = []string{"loop", "membomb", "panic", "badabi", "abi1", "noexport", "liar"}
)

// testRT is the runtime shared by tests (file cache under the default
// directory, so compiles are paid once per machine, not per run);
// samplerRT has a 16-row batch and a small step budget.
var testRT, samplerRT *Runtime

func TestMain(m *testing.M) {
	if err := buildTestPlugins(); err != nil {
		fmt.Fprintln(os.Stderr, "building test plugins:", err)
		os.Exit(1)
	}
	if err := wasmtest.Ensure(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	var err error
	testRT, err = NewRuntime(context.Background(), Config{CallTimeout: 20 * time.Second})
	if err == nil {
		samplerRT, err = NewRuntime(context.Background(), Config{MaxBatch: 16, FuelBase: 1 << 16})
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	_ = testRT.Close(context.Background())
	_ = samplerRT.Close(context.Background())
	os.Exit(code)
}

// repoRoot is the repository root (the directory holding go.mod).
func repoRoot() (string, error) { return wasmtest.Root() }

// newestSource returns the newest modification time of the .go files the
// plugins are built from.
func newestSource(root string) (time.Time, error) {
	var newest time.Time
	for _, dir := range []string{"sdk", "configurators", "plugins/hostile", "go.mod"} {
		err := filepath.WalkDir(filepath.Join(root, dir), func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if !d.IsDir() && (strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "go.mod")) {
				info, err := d.Info()
				if err != nil {
					return err
				}
				if info.ModTime().After(newest) {
					newest = info.ModTime()
				}
			}
			return nil
		})
		if err != nil {
			return time.Time{}, err
		}
	}
	return newest, nil
}

func buildTestPlugins() error {
	root, err := repoRoot()
	if err != nil {
		return err
	}
	newest, err := newestSource(root)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(wasmDir, 0o755); err != nil {
		return err
	}
	type target struct{ out, pkg string }
	var targets []target
	for _, k := range configuratorNames {
		targets = append(targets, target{k + ".wasm", "./configurators/" + k})
	}
	for _, h := range hostile {
		targets = append(targets, target{"hostile-" + h + ".wasm", "./plugins/hostile/" + h})
	}
	goBin := filepath.Join(os.Getenv("GOROOT"), "bin", "go")
	if _, err := os.Stat(goBin); os.Getenv("GOROOT") == "" || err != nil {
		goBin = "go"
	}
	abs, err := filepath.Abs(wasmDir)
	if err != nil {
		return err
	}
	for _, t := range targets {
		out := filepath.Join(abs, t.out)
		if info, err := os.Stat(out); err == nil && info.ModTime().After(newest) {
			continue
		}
		cmd := exec.Command(goBin, "build", "-trimpath", "-buildmode=c-shared", "-o", out, t.pkg)
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm", "GOFLAGS=")
		if msg, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("go build %s: %v\n%s", t.pkg, err, msg)
		}
	}
	return nil
}

func readWasm(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(wasmDir, name+".wasm"))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

var (
	loadedMu sync.Mutex
	loaded   = map[string]*Plugin{}
)

// load returns the shared, handshaken plugin (compiled once per test run).
func load(t testing.TB, name string) *Plugin {
	t.Helper()
	loadedMu.Lock()
	defer loadedMu.Unlock()
	if p, ok := loaded[name]; ok {
		return p
	}
	p, err := testRT.Load(context.Background(), name, readWasm(t, name))
	if err != nil {
		t.Fatalf("load %s: %v", name, err)
	}
	loaded[name] = p
	return p
}
