package cpu

import (
	"fmt"
	"testing"

	"github.com/kvhost/kvhost/internal/cputime"
)

// BenchmarkMatVecStream is decode's weight traffic without the rest of the
// forward: the medium preset's projections (hidden 768, FFN 2048, 12 layers:
// q, k, v, o, gate, up, down) and its 32000-row output head, one MatMul each
// in forward order, for m = 1 (batch-1 decode) and m = 16 (batch 16, through
// the GEMM and, for comparison, through the dot-product tiles). The set is
// far larger than any cache, so unlike BenchmarkMatMul (whose 3 MB matrix
// stays in L2/L3) this measures the kernels streaming from DRAM. GB/s counts
// weight bytes; GB/cpu-s divides them by the process's CPU time instead,
// steadier than the wall clock on a shared machine (compare it at t=1).
func BenchmarkMatVecStream(b *testing.B) {
	const hidden, ff, layers, vocab = 768, 2048, 12, 32000
	for _, dt := range []DType{F32, F16, Q8_0, Q4_K} {
		b.Run(dt.String(), func(b *testing.B) {
			ws, bytes := streamWeights(b, dt, hidden, ff, layers, vocab)
			r := newRand(66)
			for _, c := range []struct {
				m    int
				path string
				minM int // gemmMinMOverride
			}{{1, "", 0}, {16, "", 0}, {16, "/gemm", 1}, {16, "/tiles", 1 << 30}} {
				if c.path != "" && dt.Quantized() {
					continue
				}
				m := c.m
				x := randVec(r, m*ff, 1)
				out := make([]float32, m*vocab)
				for _, threads := range []int{1, 2} {
					b.Run(fmt.Sprintf("m=%d%s/t=%d", m, c.path, threads), func(b *testing.B) {
						saved := gemmMinMOverride
						gemmMinMOverride = c.minM
						defer func() { gemmMinMOverride = saved }()
						p := NewPool(threads)
						defer p.Close()
						b.ReportAllocs()
						cpu0 := cputime.Process().Seconds()
						for b.Loop() {
							for _, w := range ws {
								p.MatMul(out, x, m, w)
							}
						}
						sec := b.Elapsed().Seconds() / float64(b.N)
						b.ReportMetric(float64(bytes)/sec/1e9, "GB/s")
						b.ReportMetric(float64(bytes)*float64(b.N)/(cputime.Process().Seconds()-cpu0)/1e9, "GB/cpu-s")
						b.ReportMetric(sec*1e3/float64(m), "ms/token")
					})
				}
			}
		})
	}
}

// streamWeights builds the medium preset's matrices of type dt in forward
// order and their total bytes: one random matrix per shape, copied into
// every layer (the kernels' speed does not depend on the values).
func streamWeights(b *testing.B, dt DType, hidden, ff, layers, vocab int) ([]Matrix, int) {
	r := newRand(65)
	proto := map[[2]int]Matrix{}
	shape := func(rows, cols int) Matrix {
		s := [2]int{rows, cols}
		p, ok := proto[s]
		if !ok {
			p = makeMatrix(b, r, dt, rows, cols)
			proto[s] = p
		}
		return Matrix{Type: dt, Rows: rows, Cols: cols, Data: append([]byte(nil), p.Data...)}
	}
	var ws []Matrix
	for range layers {
		ws = append(ws, shape(hidden, hidden), shape(hidden, hidden), shape(hidden, hidden), shape(hidden, hidden),
			shape(ff, hidden), shape(ff, hidden), shape(hidden, ff))
	}
	ws = append(ws, shape(vocab, hidden))
	bytes := 0
	for _, w := range ws {
		bytes += len(w.Data)
	}
	return ws, bytes
}
