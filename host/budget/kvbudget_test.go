package budget

import (
	"errors"
	"math"
	"strings"
	"testing"
)

// V3 inputs (§7).
const (
	v3P = 84711309312
	v3A = 68629815296
)

// refBudget is a direct float64 transcription of §3 for single-rank
// inputs without Mamba or multimodal reserve.
func refBudget(p, a int64, f float64) int64 {
	pg := float64(p) / (1 << 30)
	ag := float64(a) / (1 << 30)
	rest := ag - float64(pg*(1-f))
	return int64(rest * (1 << 30))
}

func TestKVBudgetVectors(t *testing.T) {
	tests := []struct {
		name                 string
		in                   KVBudgetInput
		pGiB, aGiB, slack, r float64
		budget               int64
	}{
		{"V3 Llama-3-8B f=0.85", KVBudgetInput{PBytes: v3P, ABytes: v3A, MemFractionStatic: 0.85},
			78.8935546875, 63.91649627685547, 11.834033203125001, 52.082463073730466, 55923118899},
		{"V3 default f=0.83", KVBudgetInput{PBytes: v3P, ABytes: v3A, MemFractionStatic: 0.83},
			78.8935546875, 63.91649627685547, 0, 0, 54228892712},
		{"V5 Qwen3-8B", KVBudgetInput{PBytes: v3P, ABytes: 68308867072, MemFractionStatic: 0.85},
			78.8935546875, 0, 0, 0, 55602170675},
		{"V6 DeepSeek-V3 8xH200", KVBudgetInput{PBytes: 147312000000, ABytes: 61300000000, MemFractionStatic: 0.886, WorldSize: 8},
			137.1949920654297, 57.09007263183594, 15.640229095458983, 41.44984353637695, 44506430603},
		{"V14 post-capture f=0.98", KVBudgetInput{PBytes: v3P, ABytes: v3A, MemFractionStatic: 0.98},
			78.8935546875, 63.91649627685547, 1.5778710937500013, 0, 66935589109},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := KVBudget(tc.in)
			if err != nil {
				t.Fatal(err)
			}
			if got.BudgetBytes != tc.budget {
				t.Errorf("BudgetBytes = %d, want %d", got.BudgetBytes, tc.budget)
			}
			check := func(name string, got, want float64) {
				if want != 0 && got != want {
					t.Errorf("%s = %v, want %v", name, got, want)
				}
			}
			check("PGiB", got.PGiB, tc.pGiB)
			check("AGiB", got.AGiB, tc.aGiB)
			check("SlackGiB", got.SlackGiB, tc.slack)
			check("RestGiB", got.RestGiB, tc.r)
			if tc.in.WorldSize <= 1 {
				if ref := refBudget(tc.in.PBytes, tc.in.ABytes, tc.in.MemFractionStatic); ref != got.BudgetBytes {
					t.Errorf("reference budget %d != %d", ref, got.BudgetBytes)
				}
			}
		})
	}
	// V6 without the float32 step differs: the reduction matters.
	in := KVBudgetInput{PBytes: 147312000000, ABytes: 61300000000, MemFractionStatic: 0.886, WorldSize: 1}
	got, _ := KVBudget(in)
	if got.BudgetBytes == 44506430603 {
		t.Error("single-rank V6 equals the float32 result; the float32 pass-through is not exercised")
	}
}

func TestKVBudgetReserves(t *testing.T) {
	base := KVBudgetInput{PBytes: v3P, ABytes: v3A, MemFractionStatic: 0.85}
	mm := base
	mm.MMReserveMiB = 1024 + 512
	got, err := KVBudget(mm)
	if err != nil {
		t.Fatal(err)
	}
	pg, ag := float64(v3P)/GiB, float64(v3A)/GiB
	if want := int64((ag - pg*(1-0.85) - 1.5) * GiB); got.BudgetBytes != want || got.MMReserveGiB != 1.5 {
		t.Errorf("mm reserve budget = %d (%v), want %d", got.BudgetBytes, got.MMReserveGiB, want)
	}
	hm := base
	hm.HybridMambaPostCapture, hm.PreCaptureReserveMiB = true, 13824
	got, _ = KVBudget(hm)
	if got.SlackGiB != 13.5 {
		t.Errorf("hybrid Mamba slack = %v, want max(11.83, 13.5) = 13.5", got.SlackGiB)
	}
	hm.PreCaptureReserveMiB = 1024
	got, _ = KVBudget(hm)
	if got.SlackGiB != 11.834033203125001 {
		t.Errorf("hybrid Mamba slack = %v, want the P·(1−f) slack", got.SlackGiB)
	}
}

// TestKVBudgetV13 checks the error path: P = 78 GiB, A = 8 GiB, f = 0.85.
func TestKVBudgetV13(t *testing.T) {
	_, err := KVBudget(KVBudgetInput{PBytes: 78 * GiB, ABytes: 8 * GiB, MemFractionStatic: 0.85})
	var ime *InsufficientMemoryError
	if !errors.As(err, &ime) {
		t.Fatalf("err = %v, want *InsufficientMemoryError", err)
	}
	if ime.Phase != "kv-budget" || ime.Knob != "mem_fraction_static" {
		t.Errorf("phase %q knob %q", ime.Phase, ime.Knob)
	}
	if ime.Suggest != "0.898" || ime.SuggestValue != 0.898 {
		t.Errorf("suggest %q %v, want 0.898", ime.Suggest, ime.SuggestValue)
	}
	if got := strings.TrimSpace(strings.Split(strings.SplitAfter(err.Error(), "minimum ")[1], ")")[0]); got != "0.8974" {
		t.Errorf("minimum printed %q, want 0.8974", got)
	}
	if want := 1 - 8.0/78; ime.Minimum != want {
		t.Errorf("Minimum = %v, want %v", ime.Minimum, want)
	}
	// rest = 8 − 78·0.15 = −3.7 GiB: need 11.7 GiB, have 8 GiB.
	if ime.HaveBytes != 8*GiB {
		t.Errorf("HaveBytes = %d", ime.HaveBytes)
	}
	if short := float64(ime.NeedBytes-ime.HaveBytes) / GiB; math.Abs(short-3.7) > 1e-9 {
		t.Errorf("shortfall = %v GiB, want 3.7", short)
	}
	for _, want := range []string{"kv-budget", "mem_fraction_static", "0.898", "0.8974", "3.700 GiB"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	// The recommendation works: rest becomes positive.
	if _, err := KVBudget(KVBudgetInput{PBytes: 78 * GiB, ABytes: 8 * GiB, MemFractionStatic: ime.SuggestValue}); err != nil {
		t.Errorf("suggested f still fails: %v", err)
	}
	// No f below 1 can work when A = 0.
	_, err = KVBudget(KVBudgetInput{PBytes: 78 * GiB, ABytes: 0, MemFractionStatic: 0.9})
	if !errors.As(err, &ime) || !strings.Contains(err.Error(), "no mem_fraction_static below 1") {
		t.Errorf("A=0 error = %v", err)
	}
}

func TestKVBudgetValidate(t *testing.T) {
	ok := KVBudgetInput{PBytes: v3P, ABytes: v3A, MemFractionStatic: 0.85}
	tests := []struct {
		mut   func(*KVBudgetInput)
		field string
	}{
		{func(in *KVBudgetInput) { in.PBytes = 0 }, "KVBudgetInput.PBytes"},
		{func(in *KVBudgetInput) { in.ABytes = -1 }, "KVBudgetInput.ABytes"},
		{func(in *KVBudgetInput) { in.MemFractionStatic = 0 }, "KVBudgetInput.MemFractionStatic"},
		{func(in *KVBudgetInput) { in.MemFractionStatic = 1.01 }, "KVBudgetInput.MemFractionStatic"},
		{func(in *KVBudgetInput) { in.MemFractionStatic = math.NaN() }, "KVBudgetInput.MemFractionStatic"},
		{func(in *KVBudgetInput) { in.WorldSize = -1 }, "KVBudgetInput.WorldSize"},
		{func(in *KVBudgetInput) { in.MMReserveMiB = -1 }, "KVBudgetInput.MMReserveMiB"},
		{func(in *KVBudgetInput) { in.PreCaptureReserveMiB = math.Inf(1) }, "KVBudgetInput.PreCaptureReserveMiB"},
		{func(in *KVBudgetInput) { in.Mamba = &MambaInput{} }, "MambaInput.PerReqBytes"},
	}
	for _, tc := range tests {
		in := ok
		tc.mut(&in)
		_, err := KVBudget(in)
		if !errors.Is(err, ErrInvalidInput) || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("KVBudget error = %v, want ErrInvalidInput naming %s", err, tc.field)
		}
	}
}
