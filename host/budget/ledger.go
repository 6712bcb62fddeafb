package budget

import "fmt"

// PhaseDeltas turns local free-memory readings F0 … Fn taken at every phase
// boundary into Δi = F(i−1) − Fi (§1 "Ledger rule"), so that
// F0 = ΣΔ + F_end exactly. V15: Δ = 348 690 688, 16 081 494 016, ….
func PhaseDeltas(free []int64) ([]int64, error) {
	if len(free) < 2 {
		return nil, fmt.Errorf("budget: ledger needs at least 2 free-memory readings, got %d", len(free))
	}
	d := make([]int64, len(free)-1)
	for i := range d {
		d[i] = free[i] - free[i+1]
	}
	return d, nil
}

// CheckLedger verifies the §1 identity F0 = ΣΔ + F_end for deltas obtained
// elsewhere (e.g. parsed from logs), reporting the residual in bytes.
func CheckLedger(f0, fEnd int64, deltas []int64) error {
	var sum int64
	for _, d := range deltas {
		sum += d
	}
	if res := f0 - (sum + fEnd); res != 0 {
		return fmt.Errorf("budget: ledger does not balance: F0 %d − (ΣΔ %d + F_end %d) = %d bytes unaccounted", f0, sum, fEnd, res)
	}
	return nil
}
