//go:build amd64

package cpu

//go:noescape
func gemmT16AVX512(w *float32, ws int, xt *float32, kc int, tile *float32, acc int)

//go:noescape
func gemmT16StageAVX512(w *float32, ws int, xt *float32, kc int, tile *float32, acc int, src *byte, ss int, dst *float32, n16, rows, kind int, pf *byte, pfs int)

//go:noescape
func stage16F32AVX512(dst *float32, src *byte, ss, n16 int)

//go:noescape
func stage16F16AVX512(dst *float32, src *byte, ss, n16 int)

//go:noescape
func stage16BF16AVX512(dst *float32, src *byte, ss, n16 int)

//go:noescape
func gemmTStoreAVX512(tile *float32, out *float32, ldc, m, nr int)

// gemmTStore writes the transposed tile to out: out[i*ldc+c+r] = tile[r*16+i]
// for i < m, r < nr.
func gemmTStore(tile *[gemmTMR * gemmNR]float32, out []float32, c, ldc, m, nr int) {
	_ = out[c+(m-1)*ldc+nr-1]
	gemmTStoreAVX512(&tile[0], &out[c], ldc, m, nr)
}

// gemmTOn reports whether the small-batch GEMM kernel is in use.
func gemmTOn() bool { return useSIMD && useAVX512 }

// gemmTKernel runs gemmT16AVX512 on sixteen weight rows w[r*ws:], the
// k-major x block xt and kc columns; acc adds to tile instead of overwriting.
func gemmTKernel(w []float32, ws int, xt []float32, kc int, tile *[gemmTMR * gemmNR]float32, acc bool) {
	_ = w[(gemmNR-1)*ws+kc-1]
	_ = xt[kc*gemmTMR-1]
	a := 0
	if acc {
		a = 1
	}
	gemmT16AVX512(&w[0], ws, &xt[0], kc, &tile[0], a)
}

// stageSIMD stages the leading multiple of 16 of kc columns from k0 of the
// sixteen weight rows from r0 into stage (row stride gemmTStride) and returns
// how many columns it staged.
func stageSIMD(stage []float32, w Matrix, rb, r0, k0, kc int) int {
	n16 := kc / 16
	if n16 == 0 {
		return 0
	}
	_ = stage[(gemmNR-1)*gemmTStride+16*n16-1]
	es := 2
	if w.Type == F32 {
		es = 4
	}
	start := r0*rb + es*k0
	_ = w.Data[start+(gemmNR-1)*rb+es*16*n16-1]
	src := &w.Data[start]
	switch w.Type {
	case F32:
		stage16F32AVX512(&stage[0], src, rb, n16)
	case F16:
		stage16F16AVX512(&stage[0], src, rb, n16)
	case BF16:
		stage16BF16AVX512(&stage[0], src, rb, n16)
	default:
		return 0
	}
	return 16 * n16
}

// gemmTKernelStage is gemmTKernel for kc a multiple of 16 that also stages
// nr (at most sixteen) weight rows from r0 of m, kn columns (a multiple of
// 16) from k0, into next as stageSIMD does, and prefetches the same columns
// of the tile staged after those rows: the rows at pf, pfs bytes apart (the
// staged rows again when pf is empty). m is f32, f16 or bf16
// (gemmTTask.piped).
func gemmTKernelStage(w []float32, ws int, xt []float32, kc int, tile *[gemmTMR * gemmNR]float32, acc bool,
	next []float32, m Matrix, rb, r0, nr, k0, kn int, pf []byte, pfs int) {
	kind, es := 0, rowBytesOf(m.Type)
	switch m.Type {
	case F32:
	case F16:
		kind = 1
	case BF16:
		kind = 2
	default:
		panic("cpu: gemmTKernelStage: no stager for " + m.Type.String())
	}
	if kc%16 != 0 || kn%16 != 0 || kc == 0 || kn == 0 || nr < 1 || nr > gemmNR {
		panic("cpu: gemmTKernelStage: column counts not multiples of 16, or rows out of 1..16")
	}
	_ = w[(gemmNR-1)*ws+kc-1]
	_ = xt[kc*gemmTMR-1]
	_ = next[(gemmNR-1)*gemmTStride+kn-1]
	start := r0*rb + es*k0
	_ = m.Data[start+(nr-1)*rb+es*kn-1]
	a := 0
	if acc {
		a = 1
	}
	// Prefetches never fault: only the first address must be in bounds.
	if len(pf) == 0 {
		pf, pfs = m.Data[start:], rb
	}
	gemmT16StageAVX512(&w[0], ws, &xt[0], kc, &tile[0], a, &m.Data[start], rb, &next[0], kn/16, nr, kind, &pf[0], pfs)
}
