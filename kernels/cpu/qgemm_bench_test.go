package cpu

import "testing"

// BenchmarkMatMulQuant measures the quantized MatMul at batch-decode (m=16)
// and prefill (m=128) sizes on the medium model's projection shapes, for
// the formats a Q4_K_M file holds (Q5_0 where a row is no multiple of 256)
// and Q8_0. Figures per CPU-second are
// steadier than the wall clock on a shared machine (compare them at t=1).
func BenchmarkMatMulQuant(b *testing.B) {
	benchMatMul(b, 65, []DType{Q8_0, Q5_0, Q4_K, Q6_K}, []matShape{{768, 768}, {2048, 768}, {768, 2048}}, []int{16, 128})
}
