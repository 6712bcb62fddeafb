package cpu

import "fmt"

// matmulTask is one MatMul call split into chunks of weight rows. Each weight
// row is read once per call and reused from L1 for every block of four x rows.
type matmulTask struct {
	out, x []float32
	m      int
	w      Matrix
	rb     int // bytes per weight row
	chunk  int // weight rows per chunk
	ch     chunker
}

func (t *matmulTask) run(int) {
	for c := t.ch.take(); c >= 0; c = t.ch.take() {
		r0 := c * t.chunk
		matmulRows(t.out, t.x, t.m, t.w, t.rb, r0, min(r0+t.chunk, t.w.Rows))
	}
}

// MatMul computes out[i*w.Rows+r] = Σ_k x[i*w.Cols+k]·W[r][k] for i < m. out
// has at least m*w.Rows floats and x at least m*w.Cols. Weight rows are split
// over the pool; for small m > 1 each weight row is converted once and reused
// across four x rows at a time, and from m = gemmMinM the packed GEMM in
// gemm.go takes over (up to sixteen rows with AVX-512 and a Pool: the
// small-batch GEMM in gemm16.go). Panics on a malformed matrix or short slices.
func (p *Pool) MatMul(out, x []float32, m int, w Matrix) {
	w.mustValid()
	if m < 0 || len(out) < m*w.Rows || len(x) < m*w.Cols {
		panic(fmt.Sprintf("cpu: matmul m=%d with %dx%d weights: out has %d floats (need %d), x has %d (need %d)",
			m, w.Rows, w.Cols, len(out), m*w.Rows, len(x), m*w.Cols))
	}
	if m == 0 || w.Rows == 0 {
		return
	}
	rb := w.rowBytes()
	if w.Cols == 0 {
		clear(out[:m*w.Rows])
		return
	}
	if w.Type.Quantized() {
		p.matmulQuant(out, x, m, w, rb)
		return
	}
	threads := p.Threads()
	if m >= gemmMinM(w.Type) {
		if p.gemmT(out, x, m, w, rb) {
			return
		}
		if threads == 1 {
			var t gemmTask
			t.init(out, x, m, w, rb, 1)
			t.run(0)
			return
		}
		p.mu.Lock()
		defer p.mu.Unlock()
		t := &p.gm
		t.init(out, x, m, w, rb, threads)
		p.parallel(t)
		t.out, t.x, t.w.Data = nil, nil, nil
		return
	}
	if threads == 1 {
		matmulRows(out, x, m, w, rb, 0, w.Rows)
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	t := &p.mm
	t.out, t.x, t.m, t.w, t.rb = out, x, m, w, rb
	// About eight chunks per worker balances load when a core is shared,
	// while keeping chunks large enough to amortise the atomic.
	t.chunk = max(4, (w.Rows+8*threads-1)/(8*threads))
	t.ch.reset((w.Rows + t.chunk - 1) / t.chunk)
	p.parallel(t)
	t.out, t.x, t.w.Data = nil, nil, nil // do not retain caller memory
}

// matmulRows computes output features [r0, r1) for all m x rows.
func matmulRows(out, x []float32, m int, w Matrix, rb, r0, r1 int) {
	cols, rows := w.Cols, w.Rows
	var o [4]float32
	if m >= 4 {
		r0 = matmulTiles(out, x, m, w, rb, r0, r1)
	} else {
		r0 = matvecRows4(out, x, m, w, rb, r0, r1)
	}
	for r := r0; r < r1; r++ {
		wb := w.Data[r*rb : (r+1)*rb]
		i := 0
		switch w.Type {
		case F32:
			wr := bytesF32(wb)
			for ; i+4 <= m; i += 4 {
				dot4F32(wr, x[i*cols:], cols, &o)
				scatter4(out, o, i, rows, r)
			}
			for ; i < m; i++ {
				out[i*rows+r] = dotF32(wr, x[i*cols:(i+1)*cols])
			}
		case F16:
			for ; i+4 <= m; i += 4 {
				dot4F16(wb, x[i*cols:], cols, &o)
				scatter4(out, o, i, rows, r)
			}
			for ; i < m; i++ {
				out[i*rows+r] = dotF16(wb, x[i*cols:(i+1)*cols])
			}
		case BF16:
			for ; i+4 <= m; i += 4 {
				dot4BF16(wb, x[i*cols:], cols, &o)
				scatter4(out, o, i, rows, r)
			}
			for ; i < m; i++ {
				out[i*rows+r] = dotBF16(wb, x[i*cols:(i+1)*cols])
			}
		}
	}
}

// matvecRows4 runs the four-weight-row kernel (rows4) for each of m (< 4)
// x rows over rows [r0, r1) in groups of four, and returns the first row it
// did not handle. Decoding one sequence is this path: per weight row it saves
// the call, the x loads and the horizontal sum of a separate dot product.
func matvecRows4(out, x []float32, m int, w Matrix, rb, r0, r1 int) int {
	cols, rows := w.Cols, w.Rows
	var o [4]float32
	r := r0
	for ; r+4 <= r1; r += 4 {
		wb := w.Data[r*rb : (r+4)*rb]
		for i := range m {
			if !rows4(w.Type, wb, rb, x[i*cols:(i+1)*cols], &o) {
				return r // no such kernel for this type: the caller's loop does all
			}
			copy(out[i*rows+r:i*rows+r+4], o[:])
		}
	}
	if s := max(0, r1-4); r < r1 && s+4 <= rows {
		// Fewer than four rows left: rows4 over four rows of the matrix
		// that hold them (those ending at r1, or the first four), storing
		// only r..r1−1, so that every row of a matrix of four rows or more
		// comes from the one kernel whatever range it falls in — a work
		// chunk's, which the thread count decides, or the same rows in a
		// matrix of another height (TestMatVecRowsAgreeAcrossRanges).
		wb := w.Data[s*rb : (s+4)*rb]
		for i := range m {
			if !rows4(w.Type, wb, rb, x[i*cols:(i+1)*cols], &o) {
				return r
			}
			copy(out[i*rows+r:i*rows+r1], o[r-s:r1-s])
		}
		r = r1
	}
	return r
}

func scatter4(out []float32, o [4]float32, i, rows, r int) {
	out[i*rows+r] = o[0]
	out[(i+1)*rows+r] = o[1]
	out[(i+2)*rows+r] = o[2]
	out[(i+3)*rows+r] = o[3]
}

// matmulTiles runs the 3-weight-row × 4-x-row register tile over as much of
// rows [r0, r1) × x rows as it covers and returns the first row it did not
// handle; rows it covered also get their m%4 leftover x rows done here.
func matmulTiles(out, x []float32, m int, w Matrix, rb, r0, r1 int) int {
	cols, rows := w.Cols, w.Rows
	eb := rb / max(cols, 1)
	var o [12]float32
	r := r0
	for ; r+3 <= r1; r += 3 {
		wb := w.Data[r*rb : (r+3)*rb]
		i := 0
		for ; i+4 <= m; i += 4 {
			if !mm3x4(w.Type, wb, rb/eb, x[i*cols:], cols, cols, &o) {
				return r
			}
			for k := range 3 {
				for j := range 4 {
					out[(i+j)*rows+r+k] = o[k*4+j]
				}
			}
		}
		for ; i < m; i++ {
			xi := x[i*cols : (i+1)*cols]
			for k := range 3 {
				if w.Type == F32 {
					out[i*rows+r+k] = dotF32(bytesF32(wb[k*rb:(k+1)*rb]), xi)
				} else {
					out[i*rows+r+k] = dotF16(wb[k*rb:(k+1)*rb], xi)
				}
			}
		}
	}
	return r
}
