package cpu

import (
	"fmt"
	"testing"
)

// BenchmarkMatMulQuant measures the quantized MatMul at batch-decode (m=16)
// and prefill (m=128) sizes on the medium model's projection shapes, for
// the formats a Q4_K_M file holds (Q5_0 where a row is no multiple of 256)
// and Q8_0. Figures per CPU-second are
// steadier than the wall clock on a shared machine (compare them at t=1).
func BenchmarkMatMulQuant(b *testing.B) {
	r := newRand(65)
	for _, dt := range []DType{Q8_0, Q5_0, Q4_K, Q6_K} {
		for _, s := range []struct{ rows, cols int }{{768, 768}, {2048, 768}, {768, 2048}} {
			w := makeMatrix(b, r, dt, s.rows, s.cols)
			for _, m := range []int{16, 128} {
				for _, threads := range []int{1, 2} {
					b.Run(fmt.Sprintf("%v/%dx%d/m=%d/t=%d", dt, s.rows, s.cols, m, threads), func(b *testing.B) {
						p := NewPool(threads)
						defer p.Close()
						x := randVec(r, m*s.cols, 1)
						out := make([]float32, m*s.rows)
						b.ReportAllocs()
						cpu0 := processCPU()
						for b.Loop() {
							p.MatMul(out, x, m, w)
						}
						flop := 2 * float64(m*s.rows*s.cols)
						b.ReportMetric(flop/(b.Elapsed().Seconds()/float64(b.N))/1e9, "GFLOP/s")
						b.ReportMetric(flop*float64(b.N)/(processCPU()-cpu0)/1e9, "GFLOP/cpu-s")
					})
				}
			}
		}
	}
}
