package cpu

import (
	"fmt"
	"math"
	"testing"
)

// TestGemmTPipe checks the small-batch GEMM's pipelined schedule (gemm16.go
// pipeTiles: each kernel call stages the next chunk) against the float64
// reference and bit for bit against the plain staged schedule, on shapes
// that reach each of its edges: a next chunk that is the same tile's, the
// next tile's or the next work item's, chunks shorter than the next one (a
// 16-column tail converts one row inside the FMA loop and fifteen after
// it), single-chunk rows, work items of several tiles with a partial last
// tile (only its rows staged), and f32 rows of a 4 KiB stride (staged, not
// read in place). TestMatMuls runs pipelines on from one weight into
// another. Without AVX-512 the packed GEMM serves these m and both
// schedules are that one; the float64 comparison still runs.
func TestGemmTPipe(t *testing.T) {
	forceGEMM(t)
	saved := gemmTPipe
	defer func() { gemmTPipe = saved }()
	r := newRand(90)
	pool, one := NewPool(3), NewPool(1)
	defer pool.Close()
	defer one.Close()
	type shape struct{ rows, cols int }
	for _, dt := range []DType{F32, F16, BF16} {
		shapes := []shape{{16, 16}, {47, 48}, {33, 272}, {16, 768}, {51*gemmNR + 5, 64}, {35, 528}}
		if dt == F32 {
			shapes = []shape{{35, 1024}, {16, 2048}, {51*gemmNR + 5, 1024}}
		}
		for _, s := range shapes {
			w := makeMatrix(t, r, dt, s.rows, s.cols)
			gemmTPipe = true
			var probe gemmTTask
			probe.init(nil, nil, 1, w, mustRowBytes(t, w), 1)
			if !probe.piped {
				t.Fatalf("%v %dx%d: the pipelined schedule is not chosen", dt, s.rows, s.cols)
			}
			for _, m := range []int{1, 5, 16} {
				t.Run(fmt.Sprintf("%v/%dx%d/m=%d", dt, s.rows, s.cols, m), func(t *testing.T) {
					x := randVec(r, m*s.cols, 2)
					want, mag := refMatMul(x, m, w)
					for _, p := range []*Pool{one, pool} {
						gemmTPipe = false
						plain := make([]float32, m*s.rows)
						p.MatMul(plain, x, m, w)
						gemmTPipe = true
						out := make([]float32, m*s.rows+1)
						out[len(out)-1] = 42
						p.MatMul(out, x, m, w)
						for i, g := range out[:m*s.rows] {
							if math.Float32bits(g) != math.Float32bits(plain[i]) {
								t.Fatalf("threads=%d: out[%d] = %v pipelined, %v staged", p.Threads(), i, g, plain[i])
							}
							if tol := 2e-6*mag[i] + 1e-7; !near(g, want[i], tol) {
								t.Fatalf("threads=%d: out[%d] = %v, want %v (tol %g)", p.Threads(), i, g, want[i], tol)
							}
						}
						if out[len(out)-1] != 42 {
							t.Fatalf("threads=%d wrote past the output", p.Threads())
						}
					}
				})
			}
		}
	}
}

func mustRowBytes(t *testing.T, w Matrix) int {
	t.Helper()
	rb, err := w.Type.RowBytes(w.Cols)
	if err != nil {
		t.Fatal(err)
	}
	return rb
}
