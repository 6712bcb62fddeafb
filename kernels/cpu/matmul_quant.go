package cpu

import "sync"

// Quantized MatMul, for every m: the m activation rows are quantized once
// into scratch (qact.go) and every output is an integer dot product of a
// weight row with a quantized activation row, as llama.cpp computes it. Work
// items are (block of qmXBlock activation rows, chunk of weight rows); an
// item walks its rows in groups of qmRowGroup that stay in L1 while its
// activation rows (in L2) are dotted with them eight at a time
// (qgemm512_amd64.s, AVX-512 VNNI: Q8_0, Q5_0, Q4_K, Q6_K, MXFP4), then
// four at a time (qdot4_amd64.s), then one at a time, so at decode sizes
// every weight byte is read from memory once per call. The integer sums are exact on
// every path, but the float sums of the blocks are added in a different
// order by the eight-, four- and one-row kernels: a row's result can differ
// in its last bits with the tile it lands in, so a sequence's logits are
// not bit-for-bit independent of what it is batched with.

const (
	// qmRowGroup weight rows are dotted with each activation row in turn;
	// a group of the widest rows this is tuned for (Q8_0, 4096 columns:
	// 4.25 KiB a row) stays in L1.
	qmRowGroup = 8
	// qmXBlock activation rows per work item: 64 quantized rows of 4096
	// values (~290 KiB) stay in L2 while the item's weight rows pass.
	qmXBlock = 64
)

type qmatTask struct {
	out    []float32
	m      int
	w      Matrix
	rb     int
	xq     []byte // m quantized activation rows
	xrb    int    // bytes per quantized activation row
	chunk  int    // weight rows per work item
	nchunk int    // weight-row chunks
	ch     chunker
}

func (t *qmatTask) run(int) {
	for c := t.ch.take(); c >= 0; c = t.ch.take() {
		r0 := c % t.nchunk * t.chunk
		i0 := c / t.nchunk * qmXBlock
		t.rows(r0, min(r0+t.chunk, t.w.Rows), i0, min(i0+qmXBlock, t.m))
	}
}

// rows computes output features [r0, r1) for activation rows [i0, i1).
func (t *qmatTask) rows(r0, r1, i0, i1 int) {
	rows := t.w.Rows
	for g := r0; g < r1; g += qmRowGroup {
		n := min(qmRowGroup, r1-g)
		wg := t.w.Data[g*t.rb : (g+n)*t.rb]
		i := i0
		for ; i+8 <= i1; i += 8 {
			if !vecDot8RowsSIMD(t.w.Type, wg, t.rb, n, t.xq[i*t.xrb:(i+8)*t.xrb], t.xrb, t.xrb/actBlockBytes(t.w.Type), t.out[i*rows+g:], rows) {
				break
			}
		}
		for ; i+4 <= i1; i += 4 {
			if !vecDot4RowsSIMD(t.w.Type, wg, t.rb, n, t.xq[i*t.xrb:(i+4)*t.xrb], t.xrb, t.xrb/actBlockBytes(t.w.Type), t.out[i*rows+g:], rows) {
				break
			}
		}
		for ; i < i1; i++ {
			vecDotRows(t.w.Type, wg, t.rb, n, t.xq[i*t.xrb:(i+1)*t.xrb], t.out[i*rows+g:i*rows+g+n])
		}
	}
}

// vecDotRows sets out[r] = row r of w (n rows of rb bytes) · the quantized
// activation row xq, with the SIMD kernels where they run.
func vecDotRows(t DType, w []byte, rb, n int, xq []byte, out []float32) {
	if vecDotRowsSIMD(t, w, rb, n, xq, out) {
		return
	}
	for r := range n {
		out[r] = vecDotGo(t, w[r*rb:(r+1)*rb], xq)
	}
}

// qscratch serves the nil Pool's activation scratch (a Pool keeps its own).
// It is one buffer behind a try-lock rather than a sync.Pool: a sync.Pool may
// drop what is put back (the race detector drops a quarter on purpose), so
// the nil Pool's steady state would allocate. A caller that finds the buffer
// busy uses a scratch of its own for that call.
var qscratch struct {
	mu  sync.Mutex
	buf []uint64
}

// matmulQuant is MatMul for a quantized w.
func (p *Pool) matmulQuant(out, x []float32, m int, w Matrix, rb int) {
	if p == nil {
		buf := new([]uint64)
		if qscratch.mu.TryLock() {
			defer qscratch.mu.Unlock()
			buf = &qscratch.buf
		}
		var t qmatTask
		t.prepare(out, x, m, w, rb, buf)
		t.rows(0, w.Rows, 0, m)
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	t := &p.qm
	t.prepare(out, x, m, w, rb, &p.qbuf)
	if threads := p.Threads(); threads == 1 {
		t.rows(0, w.Rows, 0, m)
	} else {
		// About eight items per worker, in whole row groups.
		xblocks := (m + qmXBlock - 1) / qmXBlock
		per := (w.Rows*xblocks + 8*threads - 1) / (8 * threads)
		t.chunk = min(max(qmRowGroup, per/qmRowGroup*qmRowGroup), w.Rows)
		t.nchunk = (w.Rows + t.chunk - 1) / t.chunk
		t.ch.reset(t.nchunk * xblocks)
		p.parallel(t)
	}
	t.out, t.xq, t.w.Data = nil, nil, nil // do not retain caller memory
}

// prepare quantizes the activation rows into scratch and sets up the call.
func (t *qmatTask) prepare(out, x []float32, m int, w Matrix, rb int, scratch *[]uint64) {
	t.xrb = actRowBytes(w.Type, w.Cols)
	t.xq = actScratch(scratch, m*t.xrb)
	quantizeAct(w.Type, t.xq, x, m, w.Cols)
	t.out, t.m, t.w, t.rb = out, m, w, rb
}
