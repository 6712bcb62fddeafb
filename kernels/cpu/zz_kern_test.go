package cpu

import "testing"

func BenchmarkZZKernel(b *testing.B) {
	r := newRand(1)
	x := randVec(r, 6*256, 1)
	pk := randVec(r, 16*256, 1)
	out := make([]float32, 6*16)
	xo := [6]int{0, 256, 512, 768, 1024, 1280}
	for b.Loop() {
		gemmTileSIMD(out, 0, 16, x, &xo, pk, 256, true)
	}
	sec := b.Elapsed().Seconds() / float64(b.N)
	b.ReportMetric(2*6*16*256/sec/1e9, "GFLOP/s")
}

func TestZZAB(t *testing.T) {
	r := newRand(2)
	for _, dt := range []DType{F32, F16} {
		for _, s := range []struct{ rows, cols int }{{768, 768}, {2048, 768}, {768, 2048}} {
			w := makeMatrix(t, r, dt, s.rows, s.cols)
			for _, m := range []int{8, 12, 16, 24} {
				x := randVec(r, m*s.cols, 1)
				out := make([]float32, m*s.rows)
				best := [2]float64{1e9, 1e9}
				for rep := 0; rep < 8; rep++ {
					for v, mm := range []int{1 << 30, 1} {
						gemmMinMOverride = mm
						res := testing.Benchmark(func(b *testing.B) {
							for b.Loop() {
								(*Pool)(nil).MatMul(out, x, m, w)
							}
						})
						best[v] = min(best[v], float64(res.NsPerOp()))
					}
				}
				gemmMinMOverride = 0
				f := 2 * float64(m*s.rows*s.cols)
				t.Logf("%v %dx%d m=%d old %.1f new %.1f GFLOP/s", dt, s.rows, s.cols, m, f/best[0], f/best[1])
			}
		}
	}
}

func BenchmarkZZKernel512(b *testing.B) {
	r := newRand(1)
	x := randVec(r, 12*256, 1)
	pk := randVec(r, 16*256, 1)
	out := make([]float32, 12*16)
	for b.Loop() {
		gemm12x16AVX512(&x[0], 256, &pk[0], 256, &out[0], 16, 1)
	}
	sec := b.Elapsed().Seconds() / float64(b.N)
	b.ReportMetric(2*12*16*256/sec/1e9, "GFLOP/s")
}
