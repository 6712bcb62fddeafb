package cpu

import (
	"fmt"
	"testing"

	"github.com/kvhost/kvhost/internal/cputime"
)

// Benchmarks report GFLOP/s (2·m·rows·cols per call) and GB/s of weight bytes
// streamed; run with -benchtime=200ms on a shared machine.
func BenchmarkMatMul(b *testing.B) {
	benchMatMul(b, 60, []DType{F32, F16, BF16, Q8_0, MXFP4}, []matShape{{768, 2048}, {2048, 768}}, []int{1, 16})
}

type matShape struct{ rows, cols int }

// benchMatMul runs MatMul for every type, shape, batch m and thread count
// (1 and 2), reporting GFLOP/s, weight GB/s and GFLOP per CPU-second (the
// steadier figure on a shared machine: compare at t=1).
func benchMatMul(b *testing.B, seed uint64, types []DType, shapes []matShape, ms []int) {
	r := newRand(seed)
	for _, dt := range types {
		for _, s := range shapes {
			w := makeMatrix(b, r, dt, s.rows, s.cols)
			for _, m := range ms {
				for _, threads := range []int{1, 2} {
					b.Run(fmt.Sprintf("%v/%dx%d/m=%d/t=%d", dt, s.rows, s.cols, m, threads), func(b *testing.B) {
						p := NewPool(threads)
						defer p.Close()
						x := randVec(r, m*s.cols, 1)
						out := make([]float32, m*s.rows)
						b.ReportAllocs()
						b.ResetTimer()
						cpu0 := cputime.Process().Seconds()
						for b.Loop() {
							p.MatMul(out, x, m, w)
						}
						flop := 2 * float64(m*s.rows*s.cols)
						sec := b.Elapsed().Seconds() / float64(b.N)
						b.ReportMetric(flop/sec/1e9, "GFLOP/s")
						b.ReportMetric(float64(len(w.Data))/sec/1e9, "GB/s")
						b.ReportMetric(flop*float64(b.N)/(cputime.Process().Seconds()-cpu0)/1e9, "GFLOP/cpu-s")
					})
				}
			}
		}
	}
}

func BenchmarkRMSNorm(b *testing.B) {
	r := newRand(62)
	const dim = 4096
	x := randVec(r, dim, 1)
	w := randVec(r, dim, 1)
	out := make([]float32, dim)
	b.ReportAllocs()
	for b.Loop() {
		RMSNorm(out, x, w, 1, dim, 1e-5)
	}
	b.ReportMetric(float64(dim)/(b.Elapsed().Seconds()/float64(b.N))/1e9, "Gelem/s")
}

func BenchmarkSiLUMul(b *testing.B) {
	r := newRand(63)
	const n = 8192
	g, u := randVec(r, n, 4), randVec(r, n, 1)
	out := make([]float32, n)
	b.ReportAllocs()
	for b.Loop() {
		SiLUMul(out, g, u)
	}
	b.ReportMetric(float64(n)/(b.Elapsed().Seconds()/float64(b.N))/1e9, "Gelem/s")
}

// BenchmarkMatMulGEMM measures prefill-sized batches (m=128, and m=512, a
// whole prefill chunk) on the medium model's projection shapes, where MatMul
// is compute-bound.
func BenchmarkMatMulGEMM(b *testing.B) {
	r := newRand(64)
	for _, dt := range []DType{F32, F16} {
		for _, s := range []struct{ rows, cols int }{{768, 768}, {2048, 768}, {768, 2048}} {
			w := makeMatrix(b, r, dt, s.rows, s.cols)
			for _, mt := range []struct{ m, threads int }{{128, 1}, {128, 2}, {512, 1}} {
				m, threads := mt.m, mt.threads
				b.Run(fmt.Sprintf("%v/%dx%d/m=%d/t=%d", dt, s.rows, s.cols, m, threads), func(b *testing.B) {
					p := NewPool(threads)
					defer p.Close()
					x := randVec(r, m*s.cols, 1)
					out := make([]float32, m*s.rows)
					b.ReportAllocs()
					cpu0 := cputime.Process().Seconds()
					for b.Loop() {
						p.MatMul(out, x, m, w)
					}
					sec := b.Elapsed().Seconds() / float64(b.N)
					b.ReportMetric(2*float64(m*s.rows*s.cols)/sec/1e9, "GFLOP/s")
					// Per CPU-second, steadier than the wall clock on a
					// shared machine (compare it at t=1).
					b.ReportMetric(2*float64(m*s.rows*s.cols)*float64(b.N)/(cputime.Process().Seconds()-cpu0)/1e9, "GFLOP/cpu-s")
				})
			}
		}
	}
}
