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
// they did; the AVX2 and Go code does the rest). Without AVX-512 (and with
// it switched off) they must report nothing done and leave out and y as
// they were.
func TestAttnRunKernels(t *testing.T) {
	saved := useAVX512
	defer func() { useAVX512 = saved }()
	on := []bool{false}
	if useSIMD && avx512Available {
		on = append(on, true)
	}
	for _, avx512 := range on {
		useAVX512 = avx512
		t.Run(fmt.Sprintf("avx512=%v", avx512), func(t *testing.T) { testAttnRunKernels(t, avx512) })
	}
}

func testAttnRunKernels(t *testing.T, avx512 bool) {
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
					for i := range out {
						out[i] = 42
					}
					done := dots16Rows(dt, w.Data, rb, q, out[:n])
					if want := n &^ 15; !avx512 && done != 0 || avx512 && done != want {
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
					for i, v := range out[done:] {
						if v != 42 {
							t.Fatalf("dots16Rows wrote row %d, past the %d it did", done+i, done)
						}
					}

					p := randVec(r, n, 1)
					y := randVec(r, d+1, 1)
					y0 := append([]float32(nil), y...)
					cols := axpy64Rows(dt, y[:d], p, w.Data, rb)
					if want := d &^ 63; !avx512 && cols != 0 || avx512 && cols != want {
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
