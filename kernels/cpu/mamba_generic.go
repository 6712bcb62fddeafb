package cpu

// Portable Mamba-2 inner kernels; mamba_amd64.go runs the leading multiple
// of 8 (or 16) columns in assembly and the rest here.

// axpyRowsGo sets out[c] = β·out[c] + Σ_{j<m} a[j·as]·r[j·rs+c] for
// c < len(out); β == 0 overwrites out (whatever it held, NaN included).
func axpyRowsGo(out []float32, beta float32, a []float32, as int, r []float32, rs, m int) {
	switch {
	case beta == 0:
		clear(out)
	case beta != 1:
		for c := range out {
			out[c] *= beta
		}
	}
	for j := range m {
		aj := a[j*as]
		row := r[j*rs : j*rs+len(out)]
		for c, v := range row {
			out[c] += aj * v
		}
	}
}

// axpyRows4Go is axpyRowsGo for the four rows out[k·os : k·os+l], row k
// with coefficients a[k·ak + j·as] and factor beta[k] when keep, else
// overwritten.
func axpyRows4Go(out []float32, os, l int, beta *[4]float32, keep bool, a []float32, ak, as int, r []float32, rs, m int) {
	for k := range 4 {
		b := float32(0)
		if keep {
			b = beta[k]
		}
		axpyRowsGo(out[k*os:k*os+l], b, a[k*ak:], as, r, rs, m)
	}
}

// ssmStepGo advances one head's state by one token over columns [0, len(y)):
// h[s][c] = dA·h[s][c] + b[s]·xdt[c] and y[c] = Σ_s cv[s]·h[s][c], for
// s < len(b), rows hs floats apart.
func ssmStepGo(h []float32, hs int, xdt, b, cv []float32, dA float32, y []float32) {
	l := len(y)
	xdt = xdt[:l]
	clear(y)
	for s, bs := range b {
		row := h[s*hs : s*hs+l]
		cs := cv[s]
		for c, v := range row {
			v = v*dA + bs*xdt[c]
			row[c] = v
			y[c] += cs * v
		}
	}
}
