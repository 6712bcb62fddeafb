package budget

import (
	"errors"
	"strings"
	"testing"
)

// TestMoEPeakV2Lite works the routed-experts instant of DeepSeek-V2-Lite
// (64 experts of 1408, top 6, 2 shared, H 2048) at an 8192-token chunk in
// f32 by hand: n = 49 152 routed rows; [rows,H] ×2 134 217 728 + grouping
// (65 + 3n) × 4 = 590 084 + gathered [n,H] 402 653 184 + gate and up [n,I]
// 553 648 128 = 1 091 109 124 B, above the shared experts' instant
// (722 010 372) and the routing one (136 708 096).
func TestMoEPeakV2Lite(t *testing.T) {
	in := MoEPeakInput{Rows: 8192, Experts: 64, TopK: 6, Hidden: 2048, Inter: 1408, Shared: 2816, ElemBytes: 4, IndexBytes: 4}
	ts, peak, err := MoEPeak(in)
	if err != nil {
		t.Fatal(err)
	}
	if peak != 1091109124 || len(ts) != 9 || ts[len(ts)-1].Name != "expert up [n,I]" {
		t.Fatalf("peak %d over %d tensors %v", peak, len(ts), ts)
	}
	// Without experts' width the shared instant wins; a router of very
	// many narrow experts makes the logits the widest.
	in.Inter = 1
	if _, p, _ := MoEPeak(in); p != 722010372 {
		t.Fatalf("narrow experts: %d", p)
	}
	wide := MoEPeakInput{Rows: 4, Experts: 4096, TopK: 1, Hidden: 8, Inter: 8, ElemBytes: 4, IndexBytes: 4}
	if ts, p, _ := MoEPeak(wide); p != 4*8*4*2+4*4096*4+4*4+4*4 || !strings.Contains(ts[2].Name, "router logits") {
		t.Fatalf("wide router: %d %v", p, ts)
	}
}

func TestMoEPeakValidate(t *testing.T) {
	ok := MoEPeakInput{Rows: 1, Experts: 8, TopK: 2, Hidden: 8, Inter: 8, ElemBytes: 4, IndexBytes: 4}
	for _, tt := range []struct {
		field string
		mod   func(*MoEPeakInput)
	}{
		{"Rows", func(in *MoEPeakInput) { in.Rows = 0 }},
		{"Experts", func(in *MoEPeakInput) { in.Experts = 0 }},
		{"TopK", func(in *MoEPeakInput) { in.TopK = 9 }},
		{"Hidden", func(in *MoEPeakInput) { in.Hidden = 0 }},
		{"Inter", func(in *MoEPeakInput) { in.Inter = 0 }},
		{"Shared", func(in *MoEPeakInput) { in.Shared = -1 }},
		{"ElemBytes", func(in *MoEPeakInput) { in.ElemBytes = 0 }},
		{"IndexBytes", func(in *MoEPeakInput) { in.IndexBytes = 0 }},
	} {
		in := ok
		tt.mod(&in)
		_, _, err := MoEPeak(in)
		if !errors.Is(err, ErrInvalidInput) || !strings.Contains(err.Error(), "MoEPeakInput."+tt.field) {
			t.Errorf("%s: %v", tt.field, err)
		}
	}
}
