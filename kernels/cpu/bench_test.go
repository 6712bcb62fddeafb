package cpu

import (
	"fmt"
	"math"
	"runtime"
	"testing"

	"golang.org/x/sys/unix"
)

// Benchmarks report GFLOP/s (2·m·rows·cols per call) and GB/s of weight bytes
// streamed; run with -benchtime=200ms on a shared machine.
func BenchmarkMatMul(b *testing.B) {
	r := newRand(60)
	for _, dt := range []DType{F32, F16} {
		for _, s := range []struct{ rows, cols int }{{768, 2048}, {2048, 768}} {
			w := makeMatrix(b, r, dt, s.rows, s.cols)
			for _, m := range []int{1, 16} {
				for _, threads := range []int{1, 2} {
					b.Run(fmt.Sprintf("%v/%dx%d/m=%d/t=%d", dt, s.rows, s.cols, m, threads), func(b *testing.B) {
						p := NewPool(threads)
						defer p.Close()
						x := randVec(r, m*s.cols, 1)
						out := make([]float32, m*s.rows)
						b.ReportAllocs()
						b.ResetTimer()
						for b.Loop() {
							p.MatMul(out, x, m, w)
						}
						sec := b.Elapsed().Seconds() / float64(b.N)
						b.ReportMetric(2*float64(m*s.rows*s.cols)/sec/1e9, "GFLOP/s")
						b.ReportMetric(float64(len(w.Data))/sec/1e9, "GB/s")
					})
				}
			}
		}
	}
}

// threadCPU is the calling thread's CPU time in seconds (the benchmark
// goroutine is locked to its thread for the benchmark's duration).
func threadCPU(b *testing.B) float64 {
	runtime.LockOSThread()
	b.Cleanup(runtime.UnlockOSThread)
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		b.Fatal(err)
	}
	return float64(ts.Nano()) / 1e9
}

func BenchmarkAttentionDecode(b *testing.B) {
	r := newRand(61)
	const seq, nHeads, kvHeads, hd, ps = 512, 12, 4, 64, 16
	kv := PagedKV{K: randVec(r, seq*kvHeads*hd, 1), V: randVec(r, seq*kvHeads*hd, 1), PageSize: ps, KVHeads: kvHeads, HeadDim: hd}
	pt := make([]int32, seq/ps)
	for i := range pt {
		pt[i] = int32(len(pt) - 1 - i)
	}
	q := randVec(r, nHeads*hd, 1)
	out := make([]float32, len(q))
	for _, threads := range []int{1, 2} {
		b.Run(fmt.Sprintf("seq=%d/t=%d", seq, threads), func(b *testing.B) {
			p := NewPool(threads)
			defer p.Close()
			scratch := make([]float32, AttentionScratch(p, 1, seq-1))
			b.ReportAllocs()
			for b.Loop() {
				p.Attention(out, q, 1, nHeads, kv, pt, seq-1, float32(1/math.Sqrt(hd)), scratch)
			}
			sec := b.Elapsed().Seconds() / float64(b.N)
			b.ReportMetric(float64(2*seq*kvHeads*hd*4)/sec/1e9, "GB/s")
		})
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

// BenchmarkMatMulGEMM measures prefill-sized batches (m=128) on the medium
// model's projection shapes, where MatMul is compute-bound.
func BenchmarkMatMulGEMM(b *testing.B) {
	r := newRand(64)
	const m = 128
	for _, dt := range []DType{F32, F16} {
		for _, s := range []struct{ rows, cols int }{{768, 768}, {2048, 768}, {768, 2048}} {
			w := makeMatrix(b, r, dt, s.rows, s.cols)
			for _, threads := range []int{1, 2} {
				b.Run(fmt.Sprintf("%v/%dx%d/m=%d/t=%d", dt, s.rows, s.cols, m, threads), func(b *testing.B) {
					p := NewPool(threads)
					defer p.Close()
					x := randVec(r, m*s.cols, 1)
					out := make([]float32, m*s.rows)
					b.ReportAllocs()
					for b.Loop() {
						p.MatMul(out, x, m, w)
					}
					sec := b.Elapsed().Seconds() / float64(b.N)
					b.ReportMetric(2*float64(m*s.rows*s.cols)/sec/1e9, "GFLOP/s")
				})
			}
		}
	}
}

// BenchmarkMatMulQuant: the quantized kernels on the medium model's
// projection shapes, decode (m = 1), batch decode (16) and prefill (128),
// weights quantized from Gaussian values as gen-model writes them, on the
// AVX2 kernels and, where the CPU has them, the AVX-512 ones.
func BenchmarkMatMulQuant(b *testing.B) {
	r := newRand(65)
	isas := []string{"avx2"}
	if q512Available {
		isas = append(isas, "avx512")
	}
	saved := useQ512
	defer func() { useQ512 = saved }()
	for _, dt := range quantTypes {
		for _, s := range []struct{ rows, cols int }{{2048, 768}, {768, 2048}} {
			w := makeMatrix(b, r, dt, s.rows, s.cols)
			for _, m := range []int{1, 16, 128} {
				for _, threads := range []int{1, 2} {
					for _, isa := range isas {
						b.Run(fmt.Sprintf("%v/%dx%d/m=%d/t=%d/%s", dt, s.rows, s.cols, m, threads, isa), func(b *testing.B) {
							useQ512 = isa == "avx512"
							p := NewPool(threads)
							defer p.Close()
							x := randVec(r, m*s.cols, 1)
							out := make([]float32, m*s.rows)
							b.ReportAllocs()
							cpu0 := threadCPU(b)
							for b.Loop() {
								p.MatMul(out, x, m, w)
							}
							sec := b.Elapsed().Seconds() / float64(b.N)
							b.ReportMetric(2*float64(m*s.rows*s.cols)/sec/1e9, "GFLOP/s")
							b.ReportMetric(float64(len(w.Data))/sec/1e9, "GB/s")
							if threads == 1 {
								// On a shared machine the calling thread's CPU time is
								// steadier than wall time (a descheduled thread uses none).
								b.ReportMetric(float64(m*s.rows*s.cols)/(threadCPU(b)-cpu0)*float64(b.N)/1e9, "Gelem/cpu-s")
							}
						})
					}
				}
			}
		}
	}
}

// BenchmarkQuantizeAct: quantizing one activation row (medium's hidden
// size) for the legacy and the K-quant formats.
func BenchmarkQuantizeAct(b *testing.B) {
	r := newRand(66)
	const cols = 2048
	x := randVec(r, cols, 3)
	for _, t := range []DType{Q8_0, Q4_K} {
		b.Run(t.String(), func(b *testing.B) {
			dst := make([]byte, actRowBytes(t, cols))
			for b.Loop() {
				quantizeAct(t, dst, x, 1, cols)
			}
			b.ReportMetric(float64(cols)/(b.Elapsed().Seconds()/float64(b.N))/1e9, "Gelem/s")
		})
	}
}
