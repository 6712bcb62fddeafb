//go:build amd64

package cpu

import (
	"unsafe"

	"golang.org/x/sys/cpu"
)

// simdAvailable reports whether the AVX2+FMA+F16C assembly kernels can run on
// this CPU. useSIMD selects them; tests flip it to exercise both paths.
var simdAvailable = cpu.X86.HasAVX2 && cpu.X86.HasFMA && cpu.X86.HasF16C

var useSIMD = simdAvailable

// The assembly kernels handle n a multiple of 8 (Q8: whole blocks); the Go
// wrappers below run the tail through the portable kernels. The dot4 kernels
// overwrite *out.

//go:noescape
func dotF32AVX(a, b *float32, n int) float32

//go:noescape
func dot4F32AVX(w, x *float32, xs, n int, out *[4]float32)

//go:noescape
func dotF16AVX(w *byte, x *float32, n int) float32

//go:noescape
func dot4F16AVX(w *byte, x *float32, xs, n int, out *[4]float32)

//go:noescape
func dotBF16AVX(w *byte, x *float32, n int) float32

//go:noescape
func dot4BF16AVX(w *byte, x *float32, xs, n int, out *[4]float32)

//go:noescape
func axpyAVX(y, x *float32, a float32, n int)

// siluMulAVX: out = gate·up/(1+exp(-gate)) for n (a multiple of 8) values.
//
//go:noescape
func siluMulAVX(out, gate, up *float32, n int)

// expSubSumAVX: x[i] = exp(x[i]-mx) for n (a multiple of 8) values; their sum.
//
//go:noescape
func expSubSumAVX(x *float32, mx float32, n int) float64

// siluMulVec runs siluMulAVX over the leading multiple of 8 of out and
// returns how many values it did (0 without SIMD).
func siluMulVec(out, gate, up []float32) int {
	n8 := len(out) &^ 7
	if !useSIMD || n8 == 0 {
		return 0
	}
	_, _ = gate[n8-1], up[n8-1]
	siluMulAVX(&out[0], &gate[0], &up[0], n8)
	return n8
}

// expSubSumVec runs expSubSumAVX over the leading multiple of 8 of x and
// returns how many values it did and their sum (0, 0 without SIMD).
func expSubSumVec(x []float32, mx float32) (int, float64) {
	n8 := len(x) &^ 7
	if !useSIMD || n8 == 0 {
		return 0, 0
	}
	return n8, expSubSumAVX(&x[0], mx, n8)
}

//go:noescape
func axpy4AVX(y, x *float32, xs int, a *[4]float32, n int)

// dot4Strided sets out[j] = q·k[j·stride : j·stride+len(q)] for j < 4 (four
// consecutive cache rows of one KV head) and reports whether it could: it
// needs SIMD and len(q) a positive multiple of 8, as head dims are.
func dot4Strided(k []float32, stride int, q []float32, out *[4]float32) bool {
	n := len(q)
	if !useSIMD || n == 0 || n&7 != 0 {
		return false
	}
	_ = k[3*stride+n-1]
	rows4F32AVX((*byte)(unsafe.Pointer(&k[0])), 4*stride, &q[0], n, out)
	return true
}

// axpy4Strided adds a[j]·x[j·stride : j·stride+len(y)] to y for j < 4, with
// dot4Strided's conditions.
func axpy4Strided(y []float32, a *[4]float32, x []float32, stride int) bool {
	n := len(y)
	if !useSIMD || n == 0 || n&7 != 0 {
		return false
	}
	_ = x[3*stride+n-1]
	axpy4AVX(&y[0], &x[0], stride, a, n)
	return true
}

//go:noescape
func f32ToF16AVX(dst *byte, src *float32, n int)

// f32ToF16Vec converts the leading multiple of 8 of src into dst (2 bytes
// each) and returns how many it converted (0 without SIMD).
func f32ToF16Vec(dst []byte, src []float32) int {
	n8 := len(src) &^ 7
	if !useSIMD || n8 == 0 {
		return 0
	}
	_ = dst[2*n8-1]
	f32ToF16AVX(&dst[0], &src[0], n8)
	return n8
}

//go:noescape
func rows4F32AVX(w *byte, rb int, x *float32, n int, out *[4]float32)

// rows4F32AVX512 is rows4F32AVX with zmm registers (rows4_512_amd64.s),
// selected by useAVX512.
//
//go:noescape
func rows4F32AVX512(w *byte, rb int, x *float32, n int, out *[4]float32)

//go:noescape
func rows4F16AVX(w *byte, rb int, x *float32, n int, out *[4]float32)

//go:noescape
func rows4BF16AVX(w *byte, rb int, x *float32, n int, out *[4]float32)

// rows4 computes the dot products of four consecutive weight rows of type t
// (row stride rb bytes, starting at w) with x into out, loading each x
// vector once for the four rows. It reports false, doing nothing, where no
// such kernel exists (Q8_0, no SIMD, rows shorter than 8).
func rows4(t DType, w []byte, rb int, x []float32, out *[4]float32) bool {
	n := len(x)
	n8 := n &^ 7
	if !useSIMD || n8 == 0 {
		return false
	}
	var eb int
	switch t {
	case F32:
		eb = 4
	case F16, BF16:
		eb = 2
	default:
		return false
	}
	if rb < eb*n {
		panic("cpu: rows4 row stride shorter than a row")
	}
	_ = w[3*rb+eb*n-1]
	switch t {
	case F32:
		if useAVX512 {
			rows4F32AVX512(&w[0], rb, &x[0], n8, out)
		} else {
			rows4F32AVX(&w[0], rb, &x[0], n8, out)
		}
	case F16:
		rows4F16AVX(&w[0], rb, &x[0], n8, out)
	default:
		rows4BF16AVX(&w[0], rb, &x[0], n8, out)
	}
	if n8 < n {
		for k := range 4 {
			row := w[k*rb+eb*n8 : k*rb+eb*n]
			switch t {
			case F32:
				out[k] += dotF32Go(bytesF32(row), x[n8:])
			case F16:
				out[k] += dotF16Go(row, x[n8:])
			default:
				out[k] += dotBF16Go(row, x[n8:])
			}
		}
	}
	return true
}

func dotF32(a, b []float32) float32 {
	n := len(a)
	b = b[:n]
	n8 := n &^ 7
	if !useSIMD || n8 == 0 {
		return dotF32Go(a, b)
	}
	s := dotF32AVX(&a[0], &b[0], n8)
	if n8 < n {
		s += dotF32Go(a[n8:], b[n8:])
	}
	return s
}

func dot4F32(w, x []float32, xs int, out *[4]float32) {
	n := len(w)
	*out = [4]float32{}
	if n == 0 {
		return
	}
	_ = x[3*xs+n-1]
	n8 := n &^ 7
	if useSIMD && n8 > 0 {
		dot4F32AVX(&w[0], &x[0], xs, n8, out)
	} else {
		n8 = 0
	}
	if n8 < n {
		dot4F32Go(w[n8:], x[n8:], xs, out)
	}
}

func dotF16(w []byte, x []float32) float32 {
	n := len(x)
	w = w[:2*n]
	n8 := n &^ 7
	if !useSIMD || n8 == 0 {
		return dotF16Go(w, x)
	}
	s := dotF16AVX(&w[0], &x[0], n8)
	if n8 < n {
		s += dotF16Go(w[2*n8:], x[n8:])
	}
	return s
}

func dot4F16(w []byte, x []float32, xs int, out *[4]float32) {
	n := len(w) / 2
	*out = [4]float32{}
	if n == 0 {
		return
	}
	_ = x[3*xs+n-1]
	n8 := n &^ 7
	if useSIMD && n8 > 0 {
		dot4F16AVX(&w[0], &x[0], xs, n8, out)
	} else {
		n8 = 0
	}
	if n8 < n {
		dot4F16Go(w[2*n8:], x[n8:], xs, out)
	}
}

func dotBF16(w []byte, x []float32) float32 {
	n := len(x)
	w = w[:2*n]
	n8 := n &^ 7
	if !useSIMD || n8 == 0 {
		return dotBF16Go(w, x)
	}
	s := dotBF16AVX(&w[0], &x[0], n8)
	if n8 < n {
		s += dotBF16Go(w[2*n8:], x[n8:])
	}
	return s
}

func dot4BF16(w []byte, x []float32, xs int, out *[4]float32) {
	n := len(w) / 2
	*out = [4]float32{}
	if n == 0 {
		return
	}
	_ = x[3*xs+n-1]
	n8 := n &^ 7
	if useSIMD && n8 > 0 {
		dot4BF16AVX(&w[0], &x[0], xs, n8, out)
	} else {
		n8 = 0
	}
	if n8 < n {
		dot4BF16Go(w[2*n8:], x[n8:], xs, out)
	}
}

// axpy: y += a*x.
func axpy(y []float32, a float32, x []float32) {
	n := len(y)
	x = x[:n]
	n8 := n &^ 7
	if !useSIMD || n8 == 0 {
		axpyGo(y, a, x)
		return
	}
	axpyAVX(&y[0], &x[0], a, n8)
	if n8 < n {
		axpyGo(y[n8:], a, x[n8:])
	}
}

//go:noescape
func mm3x4F32AVX(w *float32, ws int, x *float32, xs, n int, out *[12]float32)

//go:noescape
func mm3x4F16AVX(w *byte, ws int, x *float32, xs, n int, out *[12]float32)

// mm3x4 computes out[r*4+i] = dot(weight row r, x row i) for three weight rows
// (f32 or f16, the given row stride in elements) and four x rows, the m > 1
// register-tiled kernel. It reports false when the tiled assembly is not in
// use, so the caller falls back to dot4.
func mm3x4(t DType, w []byte, ws int, x []float32, xs, n int, out *[12]float32) bool {
	if !useSIMD || n < 8 || (t != F32 && t != F16) {
		return false
	}
	n8 := n &^ 7
	eb := 4
	if t == F16 {
		eb = 2
	}
	_ = w[(2*ws+n)*eb-1]
	_ = x[3*xs+n-1]
	if t == F32 {
		mm3x4F32AVX((*float32)(unsafe.Pointer(&w[0])), ws, &x[0], xs, n8, out)
	} else {
		mm3x4F16AVX(&w[0], ws, &x[0], xs, n8, out)
	}
	if n8 < n {
		var o [4]float32
		for r := range 3 {
			wr := w[(r*ws+n8)*eb : (r*ws+n)*eb]
			o = [4]float32{}
			if t == F32 {
				dot4F32Go(bytesF32(wr), x[n8:], xs, &o)
			} else {
				dot4F16Go(wr, x[n8:], xs, &o)
			}
			for i := range 4 {
				out[r*4+i] += o[i]
			}
		}
	}
	return true
}
