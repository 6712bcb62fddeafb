//go:build amd64

package cpu

import "golang.org/x/sys/cpu"

// avx512Available reports whether the 12×16 AVX-512 GEMM microkernel can run
// (x/sys/cpu also checks that the OS saves the zmm state); useAVX512 selects
// it and tests flip it. It is only used together with useSIMD.
var avx512Available = simdAvailable && cpu.X86.HasAVX512F

var useAVX512 = avx512Available

//go:noescape
func gemm6x16AVX(xp *[gemmMR]*float32, b *float32, kc int, c *float32, ldc int, acc int)

//go:noescape
func pack16F32AVX(dst *float32, src *byte, stride, n8 int)

//go:noescape
func pack16F16AVX(dst *float32, src *byte, stride, n8 int)

//go:noescape
func pack16BF16AVX(dst *float32, src *byte, stride, n8 int)

// gemmTileSIMD runs the assembly microkernel for the full 6×16 tile whose
// top-left output is out[c]; x rows start at x[xo[i]] and hold at least kc
// floats. It reports false when the assembly is not in use.
func gemmTileSIMD(out []float32, c, ldc int, x []float32, xo *[gemmMR]int, pk []float32, kc int, acc bool) bool {
	if !useSIMD {
		return false
	}
	_ = out[c+(gemmMR-1)*ldc+gemmNR-1]
	_ = pk[kc*gemmNR-1]
	var xp [gemmMR]*float32
	for i, o := range xo {
		_ = x[o+kc-1]
		xp[i] = &x[o]
	}
	a := 0
	if acc {
		a = 1
	}
	gemm6x16AVX(&xp, &pk[0], kc, &out[c], ldc, a)
	return true
}

// packSIMD packs the leading multiple of 8 of kc columns (from k0) of the 16
// weight rows from r0 with the assembly packers and returns how many columns
// it packed (0 when the assembly is not in use).
func packSIMD(pk []float32, w Matrix, rb, r0, k0, kc int) int {
	n8 := kc &^ 7
	if !useSIMD || n8 == 0 {
		return 0
	}
	_ = pk[n8*gemmNR-1]
	var start, end int // byte range of row r0's part
	switch w.Type {
	case F32:
		start, end = r0*rb+4*k0, r0*rb+4*(k0+n8)
	case F16, BF16:
		start, end = r0*rb+2*k0, r0*rb+2*(k0+n8)
	}
	_ = w.Data[end+(gemmNR-1)*rb-1]
	src := &w.Data[start]
	switch w.Type {
	case F32:
		pack16F32AVX(&pk[0], src, rb, n8)
	case F16:
		pack16F16AVX(&pk[0], src, rb, n8)
	case BF16:
		pack16BF16AVX(&pk[0], src, rb, n8)
	}
	return n8
}

//go:noescape
func gemm12x16AVX512(x *float32, xs int, b *float32, kc int, c *float32, ldc int, acc int)

// gemmTile12SIMD runs the AVX-512 microkernel for the full 12×16 tile whose
// top-left output is out[c], x rows at x[xo+i*xs] (at least kc floats each).
// It reports false when that kernel is not in use.
func gemmTile12SIMD(out []float32, c, ldc int, x []float32, xo, xs int, pk []float32, kc int, acc bool) bool {
	if !useSIMD || !useAVX512 {
		return false
	}
	_ = out[c+(2*gemmMR-1)*ldc+gemmNR-1]
	_ = pk[kc*gemmNR-1]
	_ = x[xo+(2*gemmMR-1)*xs+kc-1]
	a := 0
	if acc {
		a = 1
	}
	gemm12x16AVX512(&x[xo], xs, &pk[0], kc, &out[c], ldc, a)
	return true
}

//go:noescape
func gemm16x16AVX512(x *float32, xs int, b *float32, kc int, c *float32, ldc int, acc int)

// gemmTile16SIMD is gemmTile12SIMD for the full 16×16 tile.
func gemmTile16SIMD(out []float32, c, ldc int, x []float32, xo, xs int, pk []float32, kc int, acc bool) bool {
	if !useSIMD || !useAVX512 {
		return false
	}
	_ = out[c+(gemm16MR-1)*ldc+gemmNR-1]
	_ = pk[kc*gemmNR-1]
	_ = x[xo+(gemm16MR-1)*xs+kc-1]
	a := 0
	if acc {
		a = 1
	}
	gemm16x16AVX512(&x[xo], xs, &pk[0], kc, &out[c], ldc, a)
	return true
}
