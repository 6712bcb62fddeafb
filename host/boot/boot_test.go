package boot

import (
	"context"
	"os"
	"path/filepath"
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
