package plan

import (
	"testing"
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
		r, err := Plan(Input{Config: c, Device: "H100-80GB", PageSize: tt.page, MemFractionStatic: tt.f, SGLangCompat: true})
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
