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

// BenchmarkMatMulMXFP4 measures MXFP4 (gpt-oss's expert weights) on the
// medium gpt-oss expert shapes (gate/up 2048×768, down 768×2048) at m=16
// and m=128, the rows an expert sees in a 256-token prefill chunk with 4
// of 8 experts per token.
func BenchmarkMatMulMXFP4(b *testing.B) {
	benchMatMul(b, 67, []DType{MXFP4}, []matShape{{2048, 768}, {768, 2048}}, []int{16, 128})
}
