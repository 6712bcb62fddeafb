package device

import (
	"testing"

	kcpu "github.com/kvhost/kvhost/kernels/cpu"
)

// TestDTypeNumbering: the device dtypes are the kernels' dtypes, number
// for number (weights cross the seam by conversion).
func TestDTypeNumbering(t *testing.T) {
	for d, k := range map[DType]kcpu.DType{
		F32: kcpu.F32, F16: kcpu.F16, BF16: kcpu.BF16, Q8_0: kcpu.Q8_0, Q4_0: kcpu.Q4_0, Q4_1: kcpu.Q4_1,
		Q5_0: kcpu.Q5_0, Q5_1: kcpu.Q5_1, Q2_K: kcpu.Q2_K, Q3_K: kcpu.Q3_K, Q4_K: kcpu.Q4_K, Q5_K: kcpu.Q5_K,
		Q6_K: kcpu.Q6_K, IQ4_NL: kcpu.IQ4_NL, IQ4_XS: kcpu.IQ4_XS, MXFP4: kcpu.MXFP4,
	} {
		if uint8(d) != uint8(k) || d.String() != k.String() {
			t.Errorf("device %v (%d) is kernels %v (%d)", d, d, k, k)
		}
	}
	if len(kcpu.DTypes()) != int(MXFP4)+1 {
		t.Errorf("kernels have %d dtypes, the device %d", len(kcpu.DTypes()), MXFP4+1)
	}
}
