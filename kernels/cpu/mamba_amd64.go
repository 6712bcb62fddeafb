//go:build amd64

package cpu

// Assembly for the Mamba-2 kernels (mamba_amd64.s: AVX2, mamba512_amd64.s:
// AVX-512). Each runs the leading multiple of 8 (16) columns; the wrappers
// bound-check every access the assembly makes and finish in Go.

// axpyRowsAVX: out[c] = β·out[c] + Σ_{j<m} a[j·as]·r[j·rs+c] for c < l
// (a multiple of 8), m >= 1, β == 0 overwriting out.
//
//go:noescape
func axpyRowsAVX(out, a, r *float32, l, as, rs, m int, beta float32)

// axpyRowsAVX512 is axpyRowsAVX for l a multiple of 16.
//
//go:noescape
func axpyRowsAVX512(out, a, r *float32, l, as, rs, m int, beta float32)

// axpyRows4AVX is axpyRowsAVX for four output rows os floats apart, row k
// with coefficients a[k·ak + j·as] and factor beta[k] (keep != 0; keep == 0
// overwrites the rows), l a multiple of 8.
//
//go:noescape
func axpyRows4AVX(out *float32, os, l int, beta *[4]float32, a *float32, ak, as int, r *float32, rs, m, keep int)

// axpyRows4AVX512 is axpyRows4AVX for l a multiple of 16.
//
//go:noescape
func axpyRows4AVX512(out *float32, os, l int, beta *[4]float32, a *float32, ak, as int, r *float32, rs, m, keep int)

// ssmStepAVX: for c < l (a multiple of 8) and s < n (>= 1), rows hs floats
// apart: h[s][c] = dA·h[s][c] + b[s]·xdt[c]; y[c] = Σ_s cv[s]·h[s][c].
//
//go:noescape
func ssmStepAVX(h, xdt, b, cv, y *float32, l, n, hs int, dA float32)

// ssmStepAVX512 is ssmStepAVX for l a multiple of 16.
//
//go:noescape
func ssmStepAVX512(h, xdt, b, cv, y *float32, l, n, hs int, dA float32)

// conv4RowsAVX convolves nb blocks of eight consecutive channels over n rows
// stride floats apart with a 4-tap kernel, row by row: out = bias[j] +
// Σ_k wt[j][k]·u_k, u = win[j]'s three vectors then x; win[j] holds the last
// three inputs on return. out may be x.
//
//go:noescape
func conv4RowsAVX(out, x *float32, stride, n, nb int, wt *[4][8]float32, bias *[8]float32, win *[3][8]float32)

// axpyRows sets out[c] = β·out[c] + Σ_{j<m} a[j·as]·r[j·rs+c] for
// c < len(out); β == 0 overwrites out.
func axpyRows(out []float32, beta float32, a []float32, as int, r []float32, rs, m int) {
	l := len(out)
	l8 := l &^ 7
	if !useSIMD || l8 == 0 || m <= 0 {
		axpyRowsGo(out, beta, a, as, r, rs, m)
		return
	}
	_ = a[(m-1)*as]
	_ = r[(m-1)*rs+l-1]
	done := 0
	if useAVX512 && l >= 16 {
		done = l &^ 15
		axpyRowsAVX512(&out[0], &a[0], &r[0], done, as, rs, m, beta)
	}
	if done < l8 {
		axpyRowsAVX(&out[done], &a[0], &r[done], l8-done, as, rs, m, beta)
		done = l8
	}
	if done < l {
		axpyRowsGo(out[done:], beta, a, as, r[done:], rs, m)
	}
}

// axpyRows4 is axpyRows for the four rows out[k·os : k·os+l]: row k gets
// β_k·out + Σ_j a[k·ak + j·as]·r[j·rs:], or only the sum when keep is false.
func axpyRows4(out []float32, os, l int, beta *[4]float32, keep bool, a []float32, ak, as int, r []float32, rs, m int) {
	l8 := l &^ 7
	if !useSIMD || l8 == 0 || m <= 0 {
		axpyRows4Go(out, os, l, beta, keep, a, ak, as, r, rs, m)
		return
	}
	_ = out[3*os+l-1]
	_ = a[3*ak+(m-1)*as]
	_ = r[(m-1)*rs+l-1]
	k := 0
	if keep {
		k = 1
	}
	done := 0
	if useAVX512 && l >= 16 {
		done = l &^ 15
		axpyRows4AVX512(&out[0], os, done, beta, &a[0], ak, as, &r[0], rs, m, k)
	}
	if done < l8 {
		axpyRows4AVX(&out[done], os, l8-done, beta, &a[0], ak, as, &r[done], rs, m, k)
		done = l8
	}
	if done < l {
		axpyRows4Go(out[done:], os, l-done, beta, keep, a, ak, as, r[done:], rs, m)
	}
}

// ssmStep advances one head's state h (len(b) rows hs floats apart) by one
// token over columns [0, len(y)), writing y; see ssmStepGo.
func ssmStep(h []float32, hs int, xdt, b, cv []float32, dA float32, y []float32) {
	l, n := len(y), len(b)
	l8 := l &^ 7
	if !useSIMD || l8 == 0 || n == 0 {
		ssmStepGo(h, hs, xdt, b, cv, dA, y)
		return
	}
	_ = h[(n-1)*hs+l-1]
	_ = xdt[l-1]
	_ = cv[n-1]
	done := 0
	if useAVX512 && l >= 16 {
		done = l &^ 15
		ssmStepAVX512(&h[0], &xdt[0], &b[0], &cv[0], &y[0], done, n, hs, dA)
	}
	if done < l8 {
		ssmStepAVX(&h[done], &xdt[done], &b[0], &cv[0], &y[done], l8-done, n, hs, dA)
		done = l8
	}
	if done < l {
		ssmStepGo(h[done:], hs, xdt[done:], b, cv, dA, y[done:])
	}
}

// conv4Vec convolves channels from c0 in blocks of eight while a block fits
// before c1 (at most convBlock channels) and returns the first channel it
// did not do. It walks the rows in order, each row's blocks contiguous, and
// keeps the blocks' windows in a small buffer: sweeping one block down all
// the rows instead strides ConvDim·4 bytes, a multiple of 4 KiB in the
// published shapes, so every row of a tile lands in the same L1 set and the
// sweep ran at a third of the speed. The convolution is a small part of a
// layer beside the projections (BenchmarkMambaLayerParts), so it has no
// AVX-512 variant.
func conv4Vec(s Mamba2, out, xbc, w, bias []float32, st ConvState, row0, n, c0, c1 int) int {
	if !useSIMD || n == 0 {
		return c0
	}
	C := s.ConvDim()
	nb := min((c1-c0)/8, convBlock/8)
	if nb == 0 {
		return c0
	}
	var (
		wt  [convBlock / 8][4][8]float32
		b8  [convBlock / 8][8]float32
		win [convBlock / 8][3][8]float32
	)
	for j := range nb {
		c := c0 + 8*j
		for l := range 8 {
			for k := range 4 {
				wt[j][k][l] = w[(c+l)*4+k]
			}
			if bias != nil {
				b8[j][l] = bias[c+l]
			}
			for k := range 3 {
				win[j][k][l] = st.load(k*C + c + l)
			}
		}
	}
	i0 := row0*C + c0
	last := (row0+n-1)*C + c0 + 8*nb - 1
	_, _ = xbc[last], out[last]
	conv4RowsAVX(&out[i0], &xbc[i0], C, n, nb, &wt[0], &b8[0], &win[0])
	for j := range nb {
		for k := range 3 {
			for l := range 8 {
				st.store(k*C+c0+8*j+l, win[j][k][l])
			}
		}
	}
	return c0 + 8*nb
}
