package boot

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvhost/kvhost/host/budget"
	_ "github.com/kvhost/kvhost/host/device/cpu"
	"github.com/kvhost/kvhost/host/ledger"
	"github.com/kvhost/kvhost/host/model/synth"
	"github.com/kvhost/kvhost/host/plan"
	"github.com/kvhost/kvhost/host/plugin/builtin"
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

// TestCompatRefusesPoolTooSmall (issue 12 item 10): under --sglang-compat a
// pool that cannot hold one request at the model's context is refused at
// startup, as the default policy does, saying how much memory it would need
// and which knob gives it; plan says the same, and following the advice
// gives a server that starts.
func TestCompatRefusesPoolTooSmall(t *testing.T) {
	path := writeModel(t, "tiny") // context 2048, cell 512 B/token in f32: one request needs 1 MiB
	name, c, ts, err := plan.LoadModel(path)
	if err != nil {
		t.Fatal(err)
	}
	planOf := func(cfg Config) (plan.Report, error) {
		return plan.Plan(plan.Input{Name: name, Config: c, Weights: ts, Device: "cpu", DeviceBytes: cfg.DeviceMemory, Threads: cfg.Threads,
			ChunkedPrefill: cfg.ChunkedPrefill, MaxRunning: cfg.MaxRunning, PageSize: cfg.PageSize, MaxTotalTokens: cfg.MaxTotalTokens,
			MemFractionStatic: cfg.MemFractionStatic, SGLangCompat: true, KVDType: cfg.KVCacheDType})
	}
	base := baseConfig(path, 192<<20)
	base.SGLangCompat, base.MemFractionStatic, base.KVCacheDType = true, 0.7, "fp32"
	ok, err := planOf(base)
	if err != nil {
		t.Fatal(err)
	}
	// An f whose budget A − P·(1−f) is half a request's KV.
	tight := 1 - float64(ok.Budget.ABytes-(512<<10))/float64(ok.Budget.PBytes)
	for _, tc := range []struct {
		name string
		edit func(*Config)
		knob string
		want []string
	}{
		{"a 16-token pool", func(c *Config) { c.MaxTotalTokens = 16 }, "--max-total-tokens",
			[]string{"pool kv holds 16 tokens, one request at the 2048-token context needs 2048", "needs 1048576 bytes", "set --max-total-tokens to 2048"}},
		{"half a request of budget", func(c *Config) { c.MemFractionStatic = tight }, "--mem-fraction-static",
			[]string{"pool kv holds 1024 tokens, one request at the 2048-token context needs 2048", "needs 1048576 bytes", "set --mem-fraction-static to 0."}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := base
			tc.edit(&cfg)
			_, err := Build(cfg, nil, io.Discard)
			var ime *budget.InsufficientMemoryError
			if err == nil || !errors.As(err, &ime) || ime.Phase != "kv-pool" || ime.Knob != tc.knob {
				t.Fatalf("err = %v, want an *InsufficientMemoryError for the kv pool naming %s", err, tc.knob)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
			if _, perr := planOf(cfg); perr == nil || perr.Error() != err.Error() {
				t.Fatalf("plan says %v\nserve says %v", perr, err)
			}
			if tc.knob == "--mem-fraction-static" {
				cfg.MemFractionStatic = ime.SuggestValue
			} else {
				cfg.MaxTotalTokens = int(ime.SuggestValue)
			}
			s, err := Build(cfg, nil, io.Discard)
			if err != nil {
				t.Fatalf("following the advice (%s %s): %v", ime.Knob, ime.Suggest, err)
			}
			if s.Budget.Tokens < 2048 {
				t.Fatalf("following the advice: %d tokens", s.Budget.Tokens)
			}
			s.Close(context.Background())
		})
	}
}
