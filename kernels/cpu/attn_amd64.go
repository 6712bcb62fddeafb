//go:build amd64

package cpu

import "unsafe"

//go:noescape
func attnTile1AVX(x *float32, b *float32, ldb, kc int, c *float32, acc int)

//go:noescape
func attnTile4AVX(x *float32, xs int, b *float32, ldb, kc int, c *float32, ldc int, acc int)

//go:noescape
func attnTile12AVX512(x *float32, xs int, b *float32, ldb, kc int, c *float32, ldc int, acc int)

//go:noescape
func prefetchRowsAsm(p *byte, rb, rows, n int)

// prefetchRows asks for the cache lines of rows rows of n bytes, rb bytes
// apart from w[0] (prefetches past w are harmless and never fault).
func prefetchRows(w []byte, rb, rows, n int) {
	if rows > 0 && n > 0 && len(w) > 0 {
		prefetchRowsAsm(&w[0], rb, rows, n)
	}
}

//go:noescape
func axpy4F16AVX(y *float32, x *byte, xs int, a *[4]float32, n int)

//go:noescape
func axpy4BF16AVX(y *float32, x *byte, xs int, a *[4]float32, n int)

// axpy4Rows adds a[j] times row j to y for four rows of dt (F32, F16 or
// BF16) stored rb bytes apart from w[0], reading them in place. It reports
// false, doing nothing, without SIMD or for a length not a multiple of 8.
func axpy4Rows(dt DType, y []float32, a *[4]float32, w []byte, rb int) bool {
	n := len(y)
	if !useSIMD || n == 0 || n&7 != 0 {
		return false
	}
	switch dt {
	case F32:
		_ = w[3*rb+4*n-1]
		axpy4AVX(&y[0], (*float32)(unsafe.Pointer(&w[0])), rb/4, a, n)
	case F16:
		_ = w[3*rb+2*n-1]
		axpy4F16AVX(&y[0], &w[0], rb, a, n)
	case BF16:
		_ = w[3*rb+2*n-1]
		axpy4BF16AVX(&y[0], &w[0], rb, a, n)
	default:
		return false
	}
	return true
}

// attnTile sets (acc: adds to) c[i*ldc+j] the sum over k < kc of
// x[i*xs+k]·b[k*ldb+j], for i < m and j < 16: twelve rows at a time with
// AVX-512, then four, then one with AVX2, else the portable kernel.
func attnTile(c []float32, ldc int, x []float32, xs, m int, b []float32, ldb, kc int, acc bool) {
	if !useSIMD || m == 0 || kc == 0 {
		attnTileGo(c, ldc, x, xs, m, b, ldb, kc, acc)
		return
	}
	_ = c[(m-1)*ldc+15]
	_ = x[(m-1)*xs+kc-1]
	_ = b[(kc-1)*ldb+15]
	a := 0
	if acc {
		a = 1
	}
	i := 0
	if useAVX512 {
		for ; i+12 <= m; i += 12 {
			attnTile12AVX512(&x[i*xs], xs, &b[0], ldb, kc, &c[i*ldc], ldc, a)
		}
	}
	for ; i+4 <= m; i += 4 {
		attnTile4AVX(&x[i*xs], xs, &b[0], ldb, kc, &c[i*ldc], ldc, a)
	}
	for ; i < m; i++ {
		attnTile1AVX(&x[i*xs], &b[0], ldb, kc, &c[i*ldc], a)
	}
}

// transpose16 sets dst[k*16+j] = src[j*d+k] for j < 16, k < d: sixteen
// key rows into a k-major panel, with the GEMM's packing kernel.
func transpose16(dst, src []float32, d int) {
	_ = dst[16*d-1]
	_ = src[16*d-1]
	n8 := 0
	if useSIMD && d >= 8 {
		n8 = d &^ 7
		pack16F32AVX(&dst[0], (*byte)(unsafe.Pointer(&src[0])), 4*d, n8)
	}
	transpose16Go(dst, src, d, n8)
}

//go:noescape
func dots16F32AVX512(w *byte, rb int, q *float32, nc int, out *[16]float32)

//go:noescape
func dots16F16AVX512(w *byte, rb int, q *float32, nc int, out *[16]float32)

//go:noescape
func dots16BF16AVX512(w *byte, rb int, q *float32, nc int, out *[16]float32)

//go:noescape
func axpy64F32AVX512(y *float32, v *byte, rb int, p *float32, n int)

//go:noescape
func axpy64F16AVX512(y *float32, v *byte, rb int, p *float32, n int)

//go:noescape
func axpy64BF16AVX512(y *float32, v *byte, rb int, p *float32, n int)

// dots16Rows sets out[i] to row i · q for the leading multiple of sixteen of
// len(out) rows of dt (F32, F16 or BF16) rb bytes apart from w[0], sixteen
// rows per call of the AVX-512 kernel (attnrun512_amd64.s), and reports how
// many rows it did: 0 without AVX-512 or for len(q) not a multiple of 16.
func dots16Rows(dt DType, w []byte, rb int, q, out []float32) int {
	d, n, eb := len(q), len(out)&^15, rowBytesOf(dt)
	if !useSIMD || !useAVX512 || n == 0 || d == 0 || d%16 != 0 || eb == 0 {
		return 0
	}
	if rb < eb*d {
		panic("cpu: dots16Rows row stride shorter than a row")
	}
	_ = w[(n-1)*rb+eb*d-1]
	for i := 0; i < n; i += 16 {
		o := (*[16]float32)(out[i : i+16])
		switch dt {
		case F32:
			dots16F32AVX512(&w[i*rb], rb, &q[0], d/16, o)
		case F16:
			dots16F16AVX512(&w[i*rb], rb, &q[0], d/16, o)
		default:
			dots16BF16AVX512(&w[i*rb], rb, &q[0], d/16, o)
		}
	}
	return n
}

// axpy64Rows adds Σ_i p[i]·row_i to the leading multiple of 64 columns of y,
// for len(p) rows of dt (F32, F16 or BF16) rb bytes apart from w[0], one
// call of the AVX-512 kernel per 64-column strip (the strip stays in
// registers over all the rows), and reports how many columns it did: 0
// without AVX-512.
func axpy64Rows(dt DType, y, p []float32, w []byte, rb int) int {
	nc, n, eb := len(y)&^63, len(p), rowBytesOf(dt)
	if !useSIMD || !useAVX512 || nc == 0 || n == 0 || eb == 0 {
		return 0
	}
	if rb < eb*nc {
		panic("cpu: axpy64Rows row stride shorter than a row")
	}
	_ = w[(n-1)*rb+eb*nc-1]
	for c := 0; c < nc; c += 64 {
		switch dt {
		case F32:
			axpy64F32AVX512(&y[c], &w[eb*c], rb, &p[0], n)
		case F16:
			axpy64F16AVX512(&y[c], &w[eb*c], rb, &p[0], n)
		default:
			axpy64BF16AVX512(&y[c], &w[eb*c], rb, &p[0], n)
		}
	}
	return nc
}
