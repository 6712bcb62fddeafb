//go:build amd64

package cpu

import "golang.org/x/sys/cpu"

// The AVX2 integer dot-product kernels (qdot_amd64.s): each sets out[r] =
// weight row r (of n, rb bytes apart) · the quantized activation row x of
// nb blocks, for n, nb ≥ 1.

//go:noescape
func dotRowsQ8_0AVX2(w *byte, rb, n int, x *byte, nb int, out *float32)

//go:noescape
func dotRowsQ4_0AVX2(w *byte, rb, n int, x *byte, nb int, out *float32)

//go:noescape
func dotRowsQ4_1AVX2(w *byte, rb, n int, x *byte, nb int, out *float32)

//go:noescape
func dotRowsQ5_0AVX2(w *byte, rb, n int, x *byte, nb int, out *float32)

//go:noescape
func dotRowsQ5_1AVX2(w *byte, rb, n int, x *byte, nb int, out *float32)

//go:noescape
func dotRowsIQ4NLAVX2(w *byte, rb, n int, x *byte, nb int, out *float32)

//go:noescape
func dotRowsMXFP4AVX2(w *byte, rb, n int, x *byte, nb int, out *float32)

//go:noescape
func dotRowsQ2KAVX2(w *byte, rb, n int, x *byte, nb int, out *float32)

//go:noescape
func dotRowsQ3KAVX2(w *byte, rb, n int, x *byte, nb int, out *float32)

//go:noescape
func dotRowsQ4KAVX2(w *byte, rb, n int, x *byte, nb int, out *float32)

//go:noescape
func dotRowsQ5KAVX2(w *byte, rb, n int, x *byte, nb int, out *float32)

//go:noescape
func dotRowsQ6KAVX2(w *byte, rb, n int, x *byte, nb int, out *float32)

//go:noescape
func dotRowsIQ4XSAVX2(w *byte, rb, n int, x *byte, nb int, out *float32)

//go:noescape
func quantQ8AVX2(x *float32, dst *q8Block, nb int)

//go:noescape
func quantQ8KAVX2(x *float32, dst *q8KBlock, nb int)

func quantQ8Vec(dst []q8Block, x []float32) bool {
	n := len(dst)
	if !useSIMD || n == 0 {
		return false
	}
	_ = x[32*n-1]
	quantQ8AVX2(&x[0], &dst[0], n)
	return true
}

func quantQ8KVec(dst []q8KBlock, x []float32) bool {
	n := len(dst)
	if !useSIMD || n == 0 {
		return false
	}
	_ = x[QKK*n-1]
	quantQ8KAVX2(&x[0], &dst[0], n)
	return true
}

//go:noescape
func dotRowsQ8_0AVX512(w *byte, rb, n int, x *byte, nb int, out *float32)

//go:noescape
func dotRowsMXFP4AVX512(w *byte, rb, n int, x *byte, nb int, out *float32)

//go:noescape
func dotRowsQ4KAVX512(w *byte, rb, n int, x *byte, nb int, out *float32)

//go:noescape
func dotRowsQ5KAVX512(w *byte, rb, n int, x *byte, nb int, out *float32)

//go:noescape
func dotRowsQ6KAVX512(w *byte, rb, n int, x *byte, nb int, out *float32)

// q512Available reports whether the AVX-512 quantized kernels can run:
// they use 512-bit byte/word ops (BW), 256-bit EVEX forms (VL) and
// VPDPBUSD (VNNI). useQ512 selects them; tests flip it to run the AVX2
// siblings on the same CPU. Both only apply with useSIMD.
var q512Available = simdAvailable && cpu.X86.HasAVX512F && cpu.X86.HasAVX512BW && cpu.X86.HasAVX512VL && cpu.X86.HasAVX512VNNI

var useQ512 = q512Available

//go:noescape
func dot4RowsQ8_0AVX2(w *byte, rb, n int, x *byte, xs, nb int, out *float32, os int)

//go:noescape
func dot4RowsQ4KAVX2(w *byte, rb, n int, x *byte, xs, nb int, out *float32, os int)

//go:noescape
func dot4RowsQ6KAVX2(w *byte, rb, n int, x *byte, xs, nb int, out *float32, os int)

//go:noescape
func dot4RowsQ5KAVX2(w *byte, rb, n int, x *byte, xs, nb int, out *float32, os int)

//go:noescape
func dot4RowsQ4_0AVX2(w *byte, rb, n int, x *byte, xs, nb int, out *float32, os int)

//go:noescape
func dot4RowsQ4_1AVX2(w *byte, rb, n int, x *byte, xs, nb int, out *float32, os int)

//go:noescape
func dot4RowsQ5_0AVX2(w *byte, rb, n int, x *byte, xs, nb int, out *float32, os int)

//go:noescape
func dot4RowsMXFP4AVX2(w *byte, rb, n int, x *byte, xs, nb int, out *float32, os int)

//go:noescape
func dot4RowsQ5_1AVX2(w *byte, rb, n int, x *byte, xs, nb int, out *float32, os int)

type dotRowsFunc func(w *byte, rb, n int, x *byte, nb int, out *float32)

type dot4RowsFunc func(w *byte, rb, n int, x *byte, xs, nb int, out *float32, os int)

// dot4RowsAVX2 holds the four-activation-row kernels (qdot4_amd64.s).
var dot4RowsAVX2 = [numDTypes]dot4RowsFunc{
	Q8_0: dot4RowsQ8_0AVX2, Q4_0: dot4RowsQ4_0AVX2, Q4_1: dot4RowsQ4_1AVX2, Q5_0: dot4RowsQ5_0AVX2,
	Q5_1: dot4RowsQ5_1AVX2, Q4_K: dot4RowsQ4KAVX2, Q5_K: dot4RowsQ5KAVX2, Q6_K: dot4RowsQ6KAVX2,
	MXFP4: dot4RowsMXFP4AVX2,
}

// vecDot4RowsSIMD dots n weight rows with four activation rows (xq, xq+xs,
// …; xs bytes apart, nb blocks each) into out[r + i·os] and reports whether
// a four-row kernel did it.
func vecDot4RowsSIMD(t DType, w []byte, rb, n int, xq []byte, xs, nb int, out []float32, os int) bool {
	f := dot4RowsAVX2[t]
	if !useSIMD || f == nil || n == 0 || nb == 0 {
		return false
	}
	checkTile(t, w, rb, n, xq, xs, nb, out, os, 4)
	f(&w[0], rb, n, &xq[0], xs, nb, &out[0], os)
	return true
}

// checkTile panics unless n weight rows (rb bytes apart), rows activation
// rows (xs bytes apart) of nb blocks and their outputs (os floats apart)
// lie inside w, xq and out: the assembly kernels trust their arguments.
func checkTile(t DType, w []byte, rb, n int, xq []byte, xs, nb int, out []float32, os, rows int) {
	if rb < nb*t.BlockBytes() || xs < nb*actBlockBytes(t) {
		panic("cpu: quantized row stride shorter than a row")
	}
	_ = w[(n-1)*rb+nb*t.BlockBytes()-1]
	_ = xq[(rows-1)*xs+nb*actBlockBytes(t)-1]
	_ = out[(rows-1)*os+n-1]
}

// dotRowsAVX512 holds the formats whose AVX-512 kernels beat their AVX2
// ones; the rest run AVX2 on every AVX2 CPU.
var dotRowsAVX512 = [numDTypes]dotRowsFunc{
	Q8_0: dotRowsQ8_0AVX512, Q4_K: dotRowsQ4KAVX512, Q5_K: dotRowsQ5KAVX512, Q6_K: dotRowsQ6KAVX512,
	MXFP4: dotRowsMXFP4AVX512,
}

// dotRowsAVX2 is the AVX2 kernel of each quantized dtype.
var dotRowsAVX2 = [numDTypes]dotRowsFunc{
	Q8_0: dotRowsQ8_0AVX2, Q4_0: dotRowsQ4_0AVX2, Q4_1: dotRowsQ4_1AVX2, Q5_0: dotRowsQ5_0AVX2,
	Q5_1: dotRowsQ5_1AVX2, IQ4_NL: dotRowsIQ4NLAVX2, Q2_K: dotRowsQ2KAVX2, Q3_K: dotRowsQ3KAVX2,
	Q4_K: dotRowsQ4KAVX2, Q5_K: dotRowsQ5KAVX2, Q6_K: dotRowsQ6KAVX2, IQ4_XS: dotRowsIQ4XSAVX2,
	MXFP4: dotRowsMXFP4AVX2,
}

// vecDotRowsSIMD runs the assembly kernel for t over n weight rows and
// reports whether it did (false without SIMD).
func vecDotRowsSIMD(t DType, w []byte, rb, n int, xq []byte, out []float32) bool {
	if !useSIMD || n == 0 || !t.Quantized() {
		return false
	}
	f := dotRowsAVX2[t]
	if g := dotRowsAVX512[t]; useQ512 && g != nil {
		f = g
	}
	nb := len(xq) / actBlockBytes(t)
	if f == nil || nb == 0 {
		return false
	}
	if rb < nb*t.BlockBytes() {
		panic("cpu: quantized row stride shorter than a row")
	}
	_ = w[(n-1)*rb+nb*t.BlockBytes()-1]
	_ = out[n-1]
	f(&w[0], rb, n, &xq[0], nb, &out[0])
	return true
}
