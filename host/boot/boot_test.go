package boot

import (
	"context"
	"github.com/kvhost/kvhost/host/plugin/builtin"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	_ "github.com/kvhost/kvhost/host/device/cpu"
	"github.com/kvhost/kvhost/host/ledger"
	"github.com/kvhost/kvhost/host/model/synth"
)

// writeModel generates a synth preset into a temp dir.
func writeModel(t testing.TB, size string) string {
	t.Helper()
	spec, err := synth.Preset(size, "f32")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), size+".gguf")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := synth.Write(f, spec, nil); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

func baseConfig(path string, mem int64) Config {
	return Config{Model: path, Device: "cpu", DeviceMemory: mem, Threads: 2, MaxRunning: 8, MaxQueue: 64, ChunkedPrefill: 256, PageSize: 16}
}

func TestBuildLedgerInvariants(t *testing.T) {
	path := writeModel(t, "tiny")
	for _, compat := range []bool{false, true} {
		cfg := baseConfig(path, 256<<20)
		cfg.SGLangCompat = compat
		if compat {
			cfg.MemFractionStatic = 0.8
		}
		s, err := Build(cfg, nil, os.Stdout)
		if err != nil {
			t.Fatal(err)
		}
		snap := s.Ledger.Snapshot()
		if err := ledger.Check(snap); err != nil {
			t.Fatal(err)
		}
		if snap.Outside() != 0 {
			t.Fatalf("outside %d", snap.Outside())
		}
		t.Logf("compat=%v tokens=%d headroom=%d sglang=%+v", compat, s.Budget.Tokens, s.Budget.HeadroomBytes, *s.Budget.SGLang)
		_ = ledger.WriteTable(os.Stdout, snap)
		s.Close(context.Background())
	}
}

// TestPluginsDirOverridesConfigurator: a .wasm dropped into the plugins
// folder replaces the built-in of the same name at model load — a broken one
// stops startup with a reason naming it, a good one sizes the pool.
func TestPluginsDirOverridesConfigurator(t *testing.T) {
	path := writeModel(t, "tiny")
	mha, err := fs.ReadFile(builtin.FS(), "mha.wasm")
	if err != nil {
		t.Fatalf("built-in mha.wasm missing (run make plugins): %v", err)
	}
	good := t.TempDir()
	if err := os.WriteFile(filepath.Join(good, "mha.wasm"), mha, 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := baseConfig(path, 192<<20)
	cfg.PluginsDir = good
	s, err := Build(cfg, nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if k := s.Budget.KVConfigurator; k == nil || k.Plugin != "mha" || k.CellBytes != s.Pools.Stats()[0].CellBytes {
		t.Fatalf("configurator record %+v", s.Budget.KVConfigurator)
	}
	s.Close(context.Background())

	bad := t.TempDir()
	if err := os.WriteFile(filepath.Join(bad, "mha.wasm"), []byte("\x00asm garbage"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg.PluginsDir = bad
	_, err = Build(cfg, nil, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "mha") {
		t.Fatalf("a broken mha.wasm override should stop startup naming it, got %v", err)
	}
}
