package budget

import (
	"errors"
	"math"
	"strings"
	"testing"
)

// Qwen3-Next-80B-A3B GDN shape (§7).
func qwenNextState(tp int) MambaLayerState { return GDNState(16, 128, 32, 128, 4, tp) }

func TestMambaV8(t *testing.T) {
	s := qwenNextState(4)
	if s.Conv[0] != 2048 || s.Conv[1] != 3 || s.Temporal[0] != 8 || s.Temporal[1] != 128 || s.Temporal[2] != 128 {
		t.Fatalf("TP4 shapes conv %v temporal %v", s.Conv, s.Temporal)
	}
	if got := s.Bytes(); got != 12288+524288 {
		t.Errorf("layer bytes = %d, want 536 576", got)
	}
	per := MambaPerRequest(36, s)
	if per != 19316736 {
		t.Errorf("per_req TP4 = %d, want 19 316 736", per)
	}
	if got := MambaPerRequest(36, qwenNextState(1)); got != 77266944 {
		t.Errorf("per_req TP1 = %d, want 77 266 944", got)
	}

	res, err := MambaSplit(30.0, MambaInput{PerReqBytes: per})
	if err != nil {
		t.Fatal(err)
	}
	if res.BudgetGiB != 14.210526315789474 || res.Slots != 788 || res.StateBytes != 15240904704 || res.RestGiB != 15.805801391601562 {
		t.Errorf("split = %+v", res)
	}
	// Reference: direct transcription of §3.
	mb := 30.0 * 0.9 / 1.9
	k := int(math.Floor((mb*(1<<30) - float64(per)) / float64(per)))
	if k != res.Slots {
		t.Errorf("reference K %d != %d", k, res.Slots)
	}
	tokens := Tokens(int64(res.RestGiB*GiB), 12288, 1, 0) // V8 KV cell, as the mamba configurator declares it
	if tokens != 1381132 {
		t.Errorf("T = %d, want 1 381 132", tokens)
	}
	r := MaxRunningRequests(tokens, 262144, 0, 1)
	for _, tc := range []struct {
		ratio, want int
	}{
		{MambaRatio(true, false, false, true, false), 262},
		{MambaRatio(true, false, true, true, false), 157},
	} {
		if got := min(r, res.Slots/tc.ratio); got != tc.want {
			t.Errorf("ratio %d: R = %d, want %d", tc.ratio, got, tc.want)
		}
	}

	// The same through KVBudget: f = 1 and A = 30 GiB make rest exactly 30.
	kv, err := KVBudget(KVBudgetInput{PBytes: 80 * GiB, ABytes: 30 * GiB, MemFractionStatic: 1, Mamba: &MambaInput{PerReqBytes: per}})
	if err != nil {
		t.Fatal(err)
	}
	if kv.Mamba == nil || kv.Mamba.Slots != 788 || kv.BudgetBytes != 16971350016 {
		t.Errorf("KVBudget with Mamba = %+v (mamba %+v)", kv, kv.Mamba)
	}
}

func TestMambaRatio(t *testing.T) {
	tests := []struct {
		radix, skip, extra, overlap, lazy bool
		want                              int
	}{
		{false, false, true, true, false, 1},
		{true, false, false, false, false, 3},
		{true, true, false, false, false, 2},
		{true, false, true, true, false, 5},
		{true, false, true, false, false, 4},
		{true, false, true, true, true, 4},
		{true, true, true, true, false, 4},
	}
	for _, tc := range tests {
		if got := MambaRatio(tc.radix, tc.skip, tc.extra, tc.overlap, tc.lazy); got != tc.want {
			t.Errorf("MambaRatio(%v) = %d, want %d", tc, got, tc.want)
		}
	}
}

func TestMamba2State(t *testing.T) {
	// Mamba2 with I = 8192, 8 groups, state 128, 128 heads of 64, kernel 4, TP2.
	s := Mamba2State(8192, 8, 128, 128, 64, 4, 2)
	conv := (8192 + 2*8*128) / 2 * 3 * 2
	temporal := 64 * 64 * 128 * 4
	if got := s.Bytes(); got != int64(conv+temporal) {
		t.Errorf("Mamba2 bytes = %d, want %d", got, conv+temporal)
	}
}

func TestMambaSplitVariants(t *testing.T) {
	per := int64(19316736)
	// Speculative decoding: K = (B − per(1+D))//(per(1+D/ratio)).
	in := MambaInput{PerReqBytes: per, DraftTokens: 3, Ratio: 3, MaxRunningRequests: 100}
	res, err := MambaSplit(30, in)
	if err != nil {
		t.Fatal(err)
	}
	b := 30 * 0.9 / 1.9 * (1 << 30)
	k := int(math.Floor((b - float64(per)*4) / (float64(per) * 2)))
	if res.Slots != k {
		t.Errorf("spec K = %d, want %d", res.Slots, k)
	}
	inter := per * int64(min(100, k/3)+1) * 3
	if res.IntermediateBytes != inter {
		t.Errorf("intermediate = %d, want %d", res.IntermediateBytes, inter)
	}
	if want := 30 - float64(int64(k+1)*per)/GiB - float64(inter)/GiB; res.RestGiB != want {
		t.Errorf("rest = %v, want %v", res.RestGiB, want)
	}
	// Explicit slots skip the ratio split.
	res, err = MambaSplit(30, MambaInput{PerReqBytes: per, ExplicitSlots: 100})
	if err != nil || res.Slots != 100 || res.StateBytes != 101*per || res.BudgetGiB != 0 {
		t.Errorf("explicit = %+v, %v", res, err)
	}
	// Custom ratio m = 1: half the rest.
	res, _ = MambaSplit(30, MambaInput{PerReqBytes: per, FullMemoryRatio: 1})
	if res.BudgetGiB != 15 {
		t.Errorf("m=1 budget = %v, want 15", res.BudgetGiB)
	}
}

func TestMambaSplitErrors(t *testing.T) {
	per := int64(1 << 30)
	_, err := MambaSplit(2, MambaInput{PerReqBytes: per})
	var ime *InsufficientMemoryError
	// 2 GiB (slot + padding) needed out of a 2 GiB rest: m/(1+m) ≥ 1 is
	// impossible, so no knob is suggested.
	if !errors.As(err, &ime) || ime.Phase != "mamba-state" || ime.Knob != "" || ime.NeedBytes != 2*per {
		t.Fatalf("err = %v", err)
	}
	_, err = MambaSplit(1.5, MambaInput{PerReqBytes: per / 2})
	if !errors.As(err, &ime) || ime.Knob != "mamba_full_memory_ratio" {
		t.Fatalf("err = %v", err)
	}
	// need 1 GiB of 1.5 GiB: x = 2/3, m ≥ 2. With m = 2 exactly K is
	// int((1 GiB − 0.5 GiB)//0.5 GiB) = 1.
	if math.Abs(ime.Minimum-2) > 1e-12 || ime.SuggestValue != 2 || ime.Suggest != "2.000" {
		t.Errorf("minimum m = %v, want ≈2", ime.Minimum)
	}
	if res, err := MambaSplit(1.5, MambaInput{PerReqBytes: per / 2, FullMemoryRatio: ime.SuggestValue}); err != nil || res.Slots != 1 {
		t.Errorf("suggested ratio gives %+v, %v", res, err)
	}
	_, err = MambaSplit(-1, MambaInput{PerReqBytes: per})
	if !errors.As(err, &ime) || ime.Knob != "" {
		t.Errorf("negative rest: %v", err)
	}
	for _, tc := range []struct {
		in    MambaInput
		field string
	}{
		{MambaInput{PerReqBytes: 0}, "PerReqBytes"},
		{MambaInput{PerReqBytes: 1, FullMemoryRatio: -1}, "FullMemoryRatio"},
		{MambaInput{PerReqBytes: 1, ExplicitSlots: -1}, "ExplicitSlots"},
		{MambaInput{PerReqBytes: 1, DraftTokens: -1}, "DraftTokens"},
		{MambaInput{PerReqBytes: 1, Ratio: -1}, "Ratio"},
		{MambaInput{PerReqBytes: 1, MaxRunningRequests: -1}, "MaxRunningRequests"},
	} {
		_, err := MambaSplit(30, tc.in)
		if !errors.Is(err, ErrInvalidInput) || !strings.Contains(err.Error(), "MambaInput."+tc.field) {
			t.Errorf("err = %v, want one naming %s", err, tc.field)
		}
	}
}

func TestKVBudgetMambaErrors(t *testing.T) {
	var ime *InsufficientMemoryError
	// Explicit slots larger than the rest: the KV rest goes negative.
	_, err := KVBudget(KVBudgetInput{PBytes: 80 * GiB, ABytes: 30 * GiB, MemFractionStatic: 1,
		Mamba: &MambaInput{PerReqBytes: GiB, ExplicitSlots: 40}})
	if !errors.As(err, &ime) || ime.Phase != "kv-budget" {
		t.Errorf("explicit slots over rest: %v", err)
	}
	// Per-request state larger than the Mamba share.
	_, err = KVBudget(KVBudgetInput{PBytes: 80 * GiB, ABytes: 30 * GiB, MemFractionStatic: 1,
		Mamba: &MambaInput{PerReqBytes: 20 * GiB}})
	if !errors.As(err, &ime) || ime.Phase != "mamba-state" || ime.Knob != "" {
		t.Errorf("state over rest: %v", err)
	}
	if msg := err.Error(); !strings.Contains(msg, "mamba-state ran out of memory") || strings.Contains(msg, "set ") {
		t.Errorf("knob-less message %q", msg)
	}
}
