package plan

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvhost/kvhost/host/budget"
	"github.com/kvhost/kvhost/host/model"
)

// TestLlama3H100 reproduces spec §7 V3 with --sglang-compat and shows
// kvhost's own figure beside it.
func TestLlama3H100(t *testing.T) {
	_, c, ts, err := LoadModel("testdata/llama-3-8b.config.json")
	if err != nil {
		t.Fatal(err)
	}
	if c.Params() != 8030261248 || len(ts) == 0 {
		t.Fatalf("params %d", c.Params())
	}
	tests := []struct {
		f          float64
		page       int
		wantTokens int
		wantBudget int64
	}{
		{0.85, 1, 426659, 55923118899},
		{0, 1, 413733, 54228892712},
		{0.85, 64, 426624, 55923118899},
	}
	for _, tt := range tests {
		r, err := Plan(Input{Config: c, Device: "H100-80GB", PageSize: tt.page, MemFractionStatic: tt.f, SGLangCompat: true, GraphMaxBS: -1})
		if err != nil {
			t.Fatal(err)
		}
		b := r.Budget
		if b.PBytes != 84711309312 || b.ABytes != 68629815296 {
			t.Fatalf("P %d A %d, want V3's inputs", b.PBytes, b.ABytes)
		}
		if b.Tokens != tt.wantTokens || b.KVBudgetBytes != tt.wantBudget {
			t.Errorf("f=%v page %d: tokens %d budget %d, want %d %d", tt.f, tt.page, b.Tokens, b.KVBudgetBytes, tt.wantTokens, tt.wantBudget)
		}
		if r.KVHost == nil || r.KVHost.Tokens <= 0 {
			t.Fatal("no kvhost figure beside the compat one")
		}
		t.Logf("f=%v page %d: SGLang %d tokens, kvhost %d tokens (headroom %d B), largest peak %q", tt.f, tt.page, b.Tokens, r.KVHost.Tokens, r.KVHost.HeadroomBytes, r.Largest)
	}
}

// testKV is the built-in mha configurator's layout of a 2-layer model of
// one KV head of 32: 4 buffers of 128 B/token in f32.
func testKV(t *testing.T, page int) KVConfig {
	t.Helper()
	reg, err := DefaultConfigurators()
	if err != nil {
		t.Fatal(err)
	}
	c := model.Config{Arch: "llama", Hidden: 64, Layers: 2, Heads: 2, KVHeads: 1, HeadDim: 32, Intermediate: 128, Vocab: 100, ContextLen: 2048, RMSEps: 1e-5}
	kc, err := ConfigureKV(context.Background(), reg, KVRequest{Config: c, KVDType: "fp32", PageSize: page})
	if err != nil {
		t.Fatal(err)
	}
	if kc.CellBytes != 512 || kc.Layout.Buffers() != 4 {
		t.Fatalf("cell %d, %d buffers", kc.CellBytes, kc.Layout.Buffers())
	}
	return kc
}

func TestGrowInsufficient(t *testing.T) {
	kc := testKV(t, 16)
	b := Budget{TotalBytes: 64 << 20, FreeAfterCapture: 10 << 20, PrefixMappedBytes: 4 << 20, HeadroomBytes: 8 << 20, UpperBoundUnits: []int{1 << 20},
		Granularity: 2 << 20, PageSize: 16}
	err := Grow(context.Background(), kc, &b, 2048) // 2048 tokens need 4 × 2 MiB + 8 MiB headroom = 16 MiB, 14 MiB there
	var ime *budget.InsufficientMemoryError
	if !errors.As(err, &ime) || ime.NeedBytes-ime.HaveBytes != 2<<20 || ime.Knob != "--device-memory" || ime.Suggest != "66MiB" {
		t.Fatalf("got %v (%+v)", err, ime)
	}
	b.FreeAfterCapture = 12 << 20
	if err := Grow(context.Background(), kc, &b, 2048); err != nil || b.Tokens != 16384 || b.KVMappedBytes != 8<<20 {
		t.Fatalf("tokens %d mapped %d err %v", b.Tokens, b.KVMappedBytes, err)
	}
	// A plugin that sized the reservation smaller than the pool is refused.
	b.UpperBoundUnits = []int{4096}
	if err := Grow(context.Background(), kc, &b, 2048); err == nil || !strings.Contains(err.Error(), "must not shrink") {
		t.Fatalf("over the reservation: %v", err)
	}
}

// TestFitUnits: the configurator's units shrunk until every buffer's
// granular mapping fits, and no more (one more page would not fit).
func TestFitUnits(t *testing.T) {
	kc := testKV(t, 16)
	l := kc.Layout
	for _, tt := range []struct {
		avail     int64
		gran      int64
		cap, want int
	}{
		{4 * 4096, 4096, 0, 32}, {2 << 20, 4096, 0, 4096}, {2<<20 + 3*4096, 4096, 0, 4096},
		{2 << 20, 4096, 100, 96}, {16 << 20, 2 << 20, 0, 32768}, {12 << 20, 2 << 20, 0, 16384},
	} {
		got, err := FitUnits(context.Background(), kc, tt.avail, tt.gran, tt.cap, 0, 0)
		if err != nil || got[0] != tt.want || l.Mapped(got, tt.gran) > tt.avail || got[0]%16 != 0 {
			t.Errorf("FitUnits(%d, gran %d, cap %d) = %v (mapped %d), %v; want %d", tt.avail, tt.gran, tt.cap, got, l.Mapped(got, tt.gran), err, tt.want)
			continue
		}
		if tt.cap == 0 && l.Mapped([]int{got[0] + 16}, tt.gran) <= tt.avail {
			t.Errorf("FitUnits(%d) = %d is not the largest", tt.avail, got[0])
		}
	}
	if _, err := FitUnits(context.Background(), kc, 8192, 4096, 0, 0, 0); err == nil {
		t.Error("8 KiB held a page of 4 buffers × 4 KiB")
	}
}

// TestDefaultTokenCap: the CPU default holds every sequence the scheduler
// can run at the full context.
func TestDefaultTokenCap(t *testing.T) {
	// 32 running + 63 more choices of one request, 512-token context in
	// pages of 16, plus the graphs' padding page.
	if got := DefaultTokenCap(32, 64, 512, 16); got != 95*512+16 {
		t.Fatalf("%d", got)
	}
	// A context that is not a page multiple rounds up per sequence.
	if got := DefaultTokenCap(4, 1, 100, 16); got != 4*112+16 {
		t.Fatalf("%d", got)
	}
	b := Budget{MaxRunning: 8, MaxChoices: 64, ContextLen: 256, PageSize: 16}
	b.Caps(true, 0)
	if b.TokenCap != DefaultTokenCap(8, 64, 256, 16) || b.RequestCap != 71 || !strings.Contains(b.TokenCapReason, "what the scheduler can use") {
		t.Fatalf("%+v", b)
	}
	b = Budget{MaxRunning: 8, MaxChoices: 64, ContextLen: 256, PageSize: 16}
	if b.Caps(true, 0.9); b.TokenCap != 0 { // a memory fraction asks for what it leaves
		t.Fatalf("fraction: %+v", b)
	}
	if b.Caps(false, 0); b.TokenCap != 0 { // GPUs: no default cap
		t.Fatalf("gpu: %+v", b)
	}
	b.MaxTotalTokens = 1 << 20
	if b.Caps(true, 0); b.TokenCap != 1<<20 || b.TokenCapReason != "--max-total-tokens" { // the user may ask for more
		t.Fatalf("user cap: %+v", b)
	}
}

func TestBundledModelsPlan(t *testing.T) {
	names := Bundled()
	if len(names) < 3 {
		t.Fatalf("bundled models %v", names)
	}
	for _, n := range names {
		c, ts, err := LoadBundled(n)
		if err != nil {
			t.Fatal(err)
		}
		r, err := Plan(Input{Name: n, Config: c, Weights: ts, Device: "H100-80GB", GraphMaxBS: -1})
		if err != nil {
			t.Fatalf("%s: %v", n, err)
		}
		if r.Budget.Tokens <= 0 {
			t.Fatalf("%s: no KV tokens", n)
		}
	}
	if _, _, err := LoadBundled("nope"); err == nil {
		t.Fatal("unknown bundled model loaded")
	}
}

// TestHFConfigVerbatim: the configurator receives a Hugging Face model's own
// config.json (from a directory or the file itself), byte for byte; a GGUF
// file has none (the host writes the equivalent).
func TestHFConfigVerbatim(t *testing.T) {
	raw, err := os.ReadFile("testdata/llama-3-8b.config.json")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "config.json"), raw, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"testdata/llama-3-8b.config.json", dir} {
		got, err := HFConfig(p)
		if err != nil || !bytes.Equal(got, raw) {
			t.Fatalf("%s: %d bytes, %v", p, len(got), err)
		}
	}
	gg := filepath.Join(dir, "m.gguf")
	if err := os.WriteFile(gg, []byte("GGUF"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := HFConfig(gg); got != nil || err != nil {
		t.Fatalf("gguf: %q %v", got, err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), []byte("{"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := HFConfig(dir); err == nil {
		t.Fatal("invalid config.json accepted")
	}
	// What the built-in mha declares from it through ConfigureKV.
	_, c, _, err := LoadModel("testdata/llama-3-8b.config.json")
	if err != nil {
		t.Fatal(err)
	}
	reg, err := DefaultConfigurators()
	if err != nil {
		t.Fatal(err)
	}
	kc, err := ConfigureKV(context.Background(), reg, KVRequest{Config: c, HFConfig: raw, KVDType: "bf16", PageSize: 1})
	if err != nil || kc.CellBytes != 131072 || kc.Plugin != "mha" {
		t.Fatalf("%+v %v", kc, err)
	}
}
