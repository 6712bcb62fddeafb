//go:build amd64

package cpu

// The AVX-512 eight-activation-row kernels (qgemm512_amd64.s): the
// quantized GEMM's inner tile for m ≥ 8 on CPUs with AVX-512 VNNI. Each
// sets out[r + i·os] = weight row r (of n, rb bytes apart) · activation
// row i (x + i·xs bytes, nb blocks) for i < 8.

//go:noescape
func dot8RowsQ4KAVX512(w *byte, rb, n int, x *byte, xs, nb int, out *float32, os int)

//go:noescape
func dot8RowsQ8_0AVX512(w *byte, rb, n int, x *byte, xs, nb int, out *float32, os int)

//go:noescape
func dot8RowsQ5_0AVX512(w *byte, rb, n int, x *byte, xs, nb int, out *float32, os int)

//go:noescape
func dot8RowsQ6KAVX512(w *byte, rb, n int, x *byte, xs, nb int, out *float32, os int)

//go:noescape
func dot8RowsMXFP4AVX512(w *byte, rb, n int, x *byte, xs, nb int, out *float32, os int)

// dot8RowsAVX512 holds the formats with an eight-row kernel; the others
// take four rows at a time (dot4RowsAVX2).
var dot8RowsAVX512 = [numDTypes]dot4RowsFunc{
	Q8_0: dot8RowsQ8_0AVX512, Q5_0: dot8RowsQ5_0AVX512, Q4_K: dot8RowsQ4KAVX512, Q6_K: dot8RowsQ6KAVX512,
	MXFP4: dot8RowsMXFP4AVX512,
}

// dot8RowPairs marks the kernels that take weight rows in pairs (n even);
// an odd last row runs through the four-row kernels.
var dot8RowPairs = [numDTypes]bool{Q8_0: true, Q5_0: true, MXFP4: true}

// vecDot8RowsSIMD dots n weight rows with eight activation rows (xq,
// xq+xs, …; nb blocks each) into out[r + i·os] and reports whether an
// eight-row kernel did it (AVX-512 VNNI only: useQ512).
func vecDot8RowsSIMD(t DType, w []byte, rb, n int, xq []byte, xs, nb int, out []float32, os int) bool {
	f := dot8RowsAVX512[t]
	if !useSIMD || !useQ512 || f == nil || n == 0 || nb == 0 {
		return false
	}
	checkTile(t, w, rb, n, xq, xs, nb, out, os, 8)
	if dot8RowPairs[t] && n%2 == 1 {
		n--
		last := w[n*rb:]
		if !vecDot4RowsSIMD(t, last, rb, 1, xq, xs, nb, out[n:], os) ||
			!vecDot4RowsSIMD(t, last, rb, 1, xq[4*xs:], xs, nb, out[n+4*os:], os) {
			panic("cpu: no four-row kernel for " + t.String())
		}
		if n == 0 {
			return true
		}
	}
	f(&w[0], rb, n, &xq[0], xs, nb, &out[0], os)
	return true
}
