package budget

import (
	"slices"
	"testing"
)

func TestLedgerV15(t *testing.T) {
	free := []int64{85060000000, 84711309312, 68629815296, 12520000000, 12115249664, 11650000000, 11240000000}
	d, err := PhaseDeltas(free)
	if err != nil {
		t.Fatal(err)
	}
	want := []int64{348690688, 16081494016, 56109815296, 404750336, 465249664, 410000000}
	if !slices.Equal(d, want) {
		t.Errorf("Δ = %v, want %v", d, want)
	}
	var sum int64
	for _, x := range d {
		sum += x
	}
	if sum != 73820000000 || sum != free[0]-free[len(free)-1] {
		t.Errorf("ΣΔ = %d, want 73 820 000 000", sum)
	}
	if err := CheckLedger(free[0], free[len(free)-1], d); err != nil {
		t.Error(err)
	}
	if err := CheckLedger(free[0], free[len(free)-1], d[1:]); err == nil {
		t.Error("unbalanced ledger accepted")
	}
	if _, err := PhaseDeltas(free[:1]); err == nil {
		t.Error("one reading accepted")
	}
	// V3's load-weight delta: 16 060 522 496 B weights + 20 MiB.
	if d[1] != 16060522496+20*MiB {
		t.Errorf("weights Δ = %d", d[1])
	}
}
