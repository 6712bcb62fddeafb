package plan

import (
	"errors"
	"testing"

	"github.com/kvhost/kvhost/host/budget"
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

func TestGrowInsufficient(t *testing.T) {
	b := Budget{TotalBytes: 64 << 20, FreeAfterCapture: 10 << 20, PrefixMappedBytes: 4 << 20, HeadroomBytes: 8 << 20, UpperBoundTokens: 1 << 20,
		Layout: Layout{Buffers: 4, RowBytes: 256, PageSize: 16, Granularity: 2 << 20}}
	err := Grow(&b, 2048) // 2048 tokens need 4 × 2 MiB + 8 MiB headroom = 16 MiB, 14 MiB there
	var ime *budget.InsufficientMemoryError
	if !errors.As(err, &ime) || ime.NeedBytes-ime.HaveBytes != 2<<20 || ime.Knob != "--device-memory" || ime.Suggest != "66MiB" {
		t.Fatalf("got %v (%+v)", err, ime)
	}
	b.FreeAfterCapture = 12 << 20
	if err := Grow(&b, 2048); err != nil || b.Tokens != 8192 || b.KVMappedBytes != 8<<20 {
		t.Fatalf("tokens %d mapped %d err %v", b.Tokens, b.KVMappedBytes, err)
	}
}

func TestLayoutMaxTokens(t *testing.T) {
	l := Layout{Buffers: 2, RowBytes: 1000, PageSize: 16, Granularity: 4096}
	for _, tt := range []struct {
		avail int64
		limit int
		want  int
	}{{0, 0, 0}, {8192, 0, 0}, {2 * 16384, 0, 16}, {2 * 1 << 20, 0, 1040}, {2 * 1 << 20, 100, 96}} {
		got := l.MaxTokens(tt.avail, tt.limit)
		if got != tt.want || l.Mapped(got) > tt.avail || (got > 0 && got%16 != 0) {
			t.Errorf("MaxTokens(%d, %d) = %d (mapped %d), want %d", tt.avail, tt.limit, got, l.Mapped(got), tt.want)
		}
		// One more page must not fit (unless capped).
		if tt.limit == 0 && l.Mapped(got+16) <= tt.avail {
			t.Errorf("MaxTokens(%d) = %d is not the largest", tt.avail, got)
		}
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
