package cpu

import (
	"fmt"
	"math"
	"testing"
)

// TestAttnRunKernels checks the AVX-512 page-run kernels of in-place decode
// attention (dots16Rows: sixteen key rows scored per call, the sums reduced
// by a transposing shuffle tree; axpy64Rows: value rows summed into a
// 64-column strip held in registers, even and odd rows in two chains)
// against the float64 reference of the rows they read, for each row dtype,
// head widths of one to sixteen 16-column chunks, row strides wider than
// the row, and row counts that leave a remainder (the kernels report what
// they did; the AVX2 and Go code does the rest).
func TestAttnRunKernels(t *testing.T) {
	if !useSIMD || !avx512Available {
		t.Skip("the page-run kernels need AVX-512: attention reads in place with rows4 and axpy4Rows here (TestDecodeAttention)")
	}
	r := newRand(77)
	for _, dt := range []DType{F32, F16, BF16} {
		for _, d := range []int{16, 64, 80, 128, 256} {
			for _, n := range []int{1, 2, 15, 16, 17, 33} {
				t.Run(fmt.Sprintf("%v/d=%d/n=%d", dt, d, n), func(t *testing.T) {
					w := makeMatrix(t, r, dt, n, d+24) // rows wider than d: a stride as in a cache of several heads
					rb := mustRowBytes(t, w)
					rows := make([][]float64, n)
					for i := range rows {
						rows[i] = refDecode(dt, w.Data[i*rb:], d)
					}
					q := randVec(r, d, 1)
					out := make([]float32, n+1)
					out[n] = 42
					done := dots16Rows(dt, w.Data, rb, q, out[:n])
					if want := n &^ 15; done != want {
						t.Fatalf("dots16Rows did %d rows, want %d", done, want)
					}
					for i := range done {
						var s, a float64
						for k, v := range rows[i] {
							s += v * float64(q[k])
							a += math.Abs(v * float64(q[k]))
						}
						if !near(out[i], s, 1e-6*a+1e-7) {
							t.Fatalf("dots16Rows row %d = %v, want %v", i, out[i], s)
						}
					}
					if out[n] != 42 {
						t.Fatal("dots16Rows wrote past its rows")
					}

					p := randVec(r, n, 1)
					y := randVec(r, d+1, 1)
					y0 := append([]float32(nil), y...)
					cols := axpy64Rows(dt, y[:d], p, w.Data, rb)
					if want := d &^ 63; cols != want {
						t.Fatalf("axpy64Rows did %d columns, want %d", cols, want)
					}
					for k := range d + 1 {
						s, a := float64(y0[k]), math.Abs(float64(y0[k]))
						if k < cols {
							for i, row := range rows {
								s += float64(p[i]) * row[k]
								a += math.Abs(float64(p[i]) * row[k])
							}
						}
						if !near(y[k], s, 1e-6*a+1e-7) {
							t.Fatalf("axpy64Rows column %d = %v, want %v", k, y[k], s)
						}
					}
				})
			}
		}
	}
}
