package cpu

import (
	"math"
	"testing"
)

// TestDot8Rows holds the eight-activation-row kernels to the float64
// reference directly, with strides longer than a row (activation rows a
// block apart, outputs three floats apart) so a kernel that ignores xs or
// os fails, odd weight-row counts (Q8_0, Q5_0 and MXFP4 take rows in pairs
// and hand an odd last one to the four-row kernels), and one and several
// blocks per row (their odd last block runs on 256-bit vectors; MXFP4's
// two blocks per step have scale bytes of their own, so a kernel that
// swaps or shares them fails). Outputs outside the
// tile must stay untouched. MatMul's end-to-end paths are in
// TestMatMulQuant.
func TestDot8Rows(t *testing.T) {
	if !q512Available {
		t.Skip("no AVX-512 VNNI on this CPU: the eight-row kernels never run here")
	}
	saved := useQ512
	defer func() { useQ512 = saved }()
	useQ512 = true
	r := newRand(66)
	for _, typ := range []DType{Q8_0, Q5_0, Q4_K, Q6_K, MXFP4} {
		for _, nb := range []int{1, 3, 4} {
			cols := nb * typ.BlockSize()
			rb := nb * typ.BlockBytes()
			xrb := actRowBytes(typ, cols)
			xs := xrb + actBlockBytes(typ)
			for _, n := range []int{1, 2, 5, 8} {
				w := randomBlocks(r, typ, n*nb)
				x := randVec(r, 8*cols, 2)
				xq := make([]byte, 8*xs)
				xd := make([][]float64, 8)
				for i := range 8 {
					row := xq[i*xs : i*xs+xrb]
					quantizeAct(typ, row, x[i*cols:(i+1)*cols], 1, cols)
					xd[i] = dequantAct(typ, row, cols)
				}
				os := n + 3
				out := make([]float32, 8*os)
				for i := range out {
					out[i] = float32(math.NaN())
				}
				if !vecDot8RowsSIMD(typ, w, rb, n, xq, xs, nb, out, os) {
					t.Fatalf("%v: no eight-row kernel ran", typ)
				}
				for i := range 8 {
					for k := range os {
						got := out[i*os+k]
						if k >= n {
							if !math.IsNaN(float64(got)) {
								t.Fatalf("%v n=%d nb=%d: wrote out[%d] outside the tile", typ, n, nb, i*os+k)
							}
							continue
						}
						want, mag := refQuantDot(typ, w[k*rb:(k+1)*rb], xd[i])
						if tol := quantTol(nb, mag); !near(got, want, tol) {
							t.Fatalf("%v n=%d nb=%d: row %d · x %d = %v, want %v (tol %g)", typ, n, nb, k, i, got, want, tol)
						}
					}
				}
			}
		}
	}
	useQ512 = false
	if vecDot8RowsSIMD(Q4_K, make([]byte, 144), 144, 1, make([]byte, 8*q8KBlockBytes), q8KBlockBytes, 1, make([]float32, 8), 1) {
		t.Fatal("an eight-row kernel ran with AVX-512 switched off")
	}
}
