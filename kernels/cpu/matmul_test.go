package cpu

import (
	"fmt"
	"math"
	"sync"
	"testing"
)

func refMatMul(x []float32, m int, w Matrix) (want, mag []float64) {
	rb, _ := w.Type.RowBytes(w.Cols)
	want = make([]float64, m*w.Rows)
	mag = make([]float64, m*w.Rows)
	for r := range w.Rows {
		wr := refDecode(w.Type, w.Data[r*rb:], w.Cols)
		for i := range m {
			var s, a float64
			for k, v := range wr {
				p := float64(x[i*w.Cols+k]) * v
				s += p
				a += math.Abs(p)
			}
			want[i*w.Rows+r] = s
			mag[i*w.Rows+r] = a
		}
	}
	return want, mag
}

// matMulRef is the reference for MatMul at this m and each output's
// tolerance: the float reference within 2e-6 of the magnitude for plain
// types, quantMatMulRef for quantized ones.
func matMulRef(x []float32, m int, w Matrix) (want, tol []float64) {
	if w.Type.Quantized() {
		return quantMatMulRef(w.Type, x, m, w)
	}
	want, mag := refMatMul(x, m, w)
	tol = make([]float64, len(mag))
	for i, a := range mag {
		tol[i] = 2e-6*a + 1e-7
	}
	return want, tol
}

func TestMatMul(t *testing.T) {
	type shape struct{ rows, cols int }
	// Dense shapes cover every step of the four-row kernels: 32, 16 and 8
	// columns and the scalar tail (24, 40, 48, 56 columns, 100, 257).
	dense := []shape{{1, 1}, {5, 7}, {37, 13}, {3, 33}, {9, 100}, {17, 257}, {6, 64},
		{7, 24}, {9, 40}, {6, 56}, {5, 48}}
	quant := []shape{{1, 32}, {5, 96}, {37, 160}, {4, 64}}
	pools := []struct {
		name string
		p    *Pool
	}{{"nil", nil}, {"pool2", NewPool(2)}, {"pool3", NewPool(3)}}
	defer func() {
		for _, p := range pools {
			p.p.Close()
		}
	}()
	gemmImpls(t, func(t *testing.T) {
		r := newRand(10)
		for _, dt := range []DType{F32, F16, BF16, Q8_0} {
			shapes := dense
			if dt == Q8_0 {
				shapes = quant
			}
			for _, s := range shapes {
				w := makeMatrix(t, r, dt, s.rows, s.cols)
				for _, m := range []int{1, 3, 5, 16} {
					x := randVec(r, m*s.cols, 2)
					want, tols := matMulRef(x, m, w)
					for _, pl := range pools {
						out := make([]float32, m*s.rows+1)
						out[len(out)-1] = 42 // past the end: must stay untouched
						pl.p.MatMul(out, x, m, w)
						for i, g := range out[:m*s.rows] {
							if tol := tols[i]; !near(g, want[i], tol) {
								t.Fatalf("%v %dx%d m=%d %s: out[%d] = %v, want %v (tol %g)", dt, s.rows, s.cols, m, pl.name, i, g, want[i], tol)
							}
						}
						if out[len(out)-1] != 42 {
							t.Fatalf("%v %dx%d m=%d %s wrote past the output", dt, s.rows, s.cols, m, pl.name)
						}
					}
				}
			}
		}
	})
}

// TestDotKernelsLong covers the unrolled assembly loops and tails on long rows
// with large magnitudes, for the 1-row, 4-x-row and 4-weight-row kernels (5
// weight rows: one group of four and a leftover row at m = 1), on the Go,
// AVX2 and AVX-512 paths.
func TestDotKernelsLong(t *testing.T) {
	gemmImpls(t, func(t *testing.T) {
		r := newRand(11)
		const rows = 5
		for _, dt := range append([]DType{F32, F16, BF16}, quantTypes...) {
			for _, cols := range []int{2048, 4096 + 64 + 3, 4096 + 256, 4096 + 24 + 5} {
				if cols%dt.BlockSize() != 0 {
					continue
				}
				w := makeMatrix(t, r, dt, rows, cols)
				x := randVec(r, 4*cols, 100)
				want, tol := matMulRef(x, 4, w)
				out := make([]float32, 4*rows)
				(*Pool)(nil).MatMul(out, x, 4, w)
				out1 := make([]float32, rows)
				(*Pool)(nil).MatMul(out1, x[2*cols:], 1, w)
				for i := range out {
					if !near(out[i], want[i], tol[i]) {
						t.Fatalf("%v cols=%d: out[%d] = %v, want %v", dt, cols, i, out[i], want[i])
					}
				}
				for j := range out1 {
					if !near(out1[j], want[2*rows+j], tol[2*rows+j]) {
						t.Fatalf("%v cols=%d m=1: out[%d] = %v, want %v", dt, cols, j, out1[j], want[2*rows+j])
					}
				}
			}
		}
	})
}

func TestMatMulPanicsOnBadShapes(t *testing.T) {
	w := Matrix{Type: F32, Rows: 2, Cols: 3, Data: make([]byte, 24)}
	for name, f := range map[string]func(){
		"short out": func() { (*Pool)(nil).MatMul(make([]float32, 3), make([]float32, 6), 2, w) },
		"short x":   func() { (*Pool)(nil).MatMul(make([]float32, 4), make([]float32, 5), 2, w) },
		"bad matrix": func() {
			(*Pool)(nil).MatMul(make([]float32, 4), make([]float32, 6), 2, Matrix{Type: F32, Rows: 2, Cols: 3})
		},
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: no panic", name)
				}
			}()
			f()
		}()
	}
}

func TestPoolConcurrentCallsAndClose(t *testing.T) {
	p := NewPool(2)
	if p.Threads() != 2 || (*Pool)(nil).Threads() != 1 || NewPool(0).Threads() != 1 {
		t.Fatalf("threads: %d %d", p.Threads(), (*Pool)(nil).Threads())
	}
	r := newRand(12)
	w := makeMatrix(t, r, F16, 50, 40)
	x := randVec(r, 3*40, 1)
	want, mag := refMatMul(x, 3, w)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out := make([]float32, 3*50)
			for range 20 {
				p.MatMul(out, x, 3, w)
				for i := range out {
					if !near(out[i], want[i], 2e-6*mag[i]) {
						errs <- fmt.Errorf("goroutine %d: out[%d] = %v, want %v", g, i, out[i], want[i])
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	p.Close()
	p.Close()
	out := make([]float32, 3*50)
	p.MatMul(out, x, 3, w) // a closed pool still computes, inline
	for i := range out {
		if !near(out[i], want[i], 2e-6*mag[i]) {
			t.Fatalf("after close: out[%d] = %v, want %v", i, out[i], want[i])
		}
	}
}

// TestMatVecRowsAgreeAcrossRanges: at m < 4 a weight row's result does not
// depend on the range of rows it is computed in — a work chunk's (which
// the thread count decides), or the same rows in a matrix of another
// height (four rows or more): rows4 serves every row of such a matrix,
// the last fewer-than-four of a range too, bit for bit. The AVX-512 f32
// kernel sums in another order than the one-row dot, so a tail served by
// the dot would differ in its last bits.
func TestMatVecRowsAgreeAcrossRanges(t *testing.T) {
	gemmImpls(t, func(t *testing.T) {
		r := newRand(91)
		for _, dt := range []DType{F32, F16, BF16} {
			const rows, cols = 13, 100
			w := makeMatrix(t, r, dt, rows, cols)
			rb := mustRowBytes(t, w)
			for m := 1; m < 4; m++ {
				x := randVec(r, m*cols, 1)
				whole := make([]float32, m*rows)
				matmulRows(whole, x, m, w, rb, 0, rows)
				for _, cut := range []int{1, 5, 6, 7, 11} {
					split := make([]float32, m*rows)
					matmulRows(split, x, m, w, rb, 0, cut)
					matmulRows(split, x, m, w, rb, cut, rows)
					sub := Matrix{Type: dt, Rows: rows - cut, Cols: cols, Data: w.Data[cut*rb:]}
					part := make([]float32, m*sub.Rows)
					matmulRows(part, x, m, sub, rb, 0, sub.Rows)
					for i := range m {
						for j := range rows {
							if math.Float32bits(split[i*rows+j]) != math.Float32bits(whole[i*rows+j]) {
								t.Fatalf("%v m=%d: row %d is %v computed in [0,%d)+[%d,%d), %v in one range", dt, m, j, split[i*rows+j], cut, cut, rows, whole[i*rows+j])
							}
							if j >= cut && sub.Rows >= 4 && math.Float32bits(part[i*sub.Rows+j-cut]) != math.Float32bits(whole[i*rows+j]) {
								t.Fatalf("%v m=%d: row %d is %v in a matrix from row %d, %v in the whole", dt, m, j, part[i*sub.Rows+j-cut], cut, whole[i*rows+j])
							}
						}
					}
				}
			}
		}
	})
}
