//go:build amd64

package cpu

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
// it packed (0 when the assembly is not in use or the type has no packer).
func packSIMD(pk []float32, w Matrix, rb, r0, k0, kc int) int {
	n8 := kc &^ 7
	if !useSIMD || n8 == 0 {
		return 0
	}
	var eb int
	switch w.Type {
	case F32:
		eb = 4
	case F16, BF16:
		eb = 2
	default:
		return 0
	}
	_ = pk[n8*gemmNR-1]
	start := r0*rb + k0*eb
	_ = w.Data[start+(gemmNR-1)*rb+n8*eb-1]
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
