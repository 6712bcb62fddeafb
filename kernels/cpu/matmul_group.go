package cpu

import (
	"fmt"
	"unsafe"
)

// MatMulGroupMax is the most weights one MatMuls call multiplies: a layer's
// q, k and v projections (or its gate and up).
const MatMulGroupMax = 3

// groupTask is one MatMuls call: every weight's MatMul laid out as it would
// be alone (the GEMM's panels, the matvec's row chunks, the quantized
// kernel's row groups) and handed out from one counter, so the workers
// meet once per group instead of once per weight and the small projections
// of a small model (k and v are a fraction of q) leave no worker idle at
// the tail of each. Each output is computed by the same item code as a lone
// MatMul, so the results are identical.
type groupTask struct {
	n    int
	kind [MatMulGroupMax]groupKind
	end  [MatMulGroupMax]int // cumulative item counts
	gm   [MatMulGroupMax]gemmTask
	gt   [MatMulGroupMax]gemmTTask
	xt   []float32 // the x block packed for gt (gemm16.go), shared
	mm   [MatMulGroupMax]matmulTask
	qm   [MatMulGroupMax]qmatTask
	qbuf [MatMulGroupMax][]uint64 // quantized activation rows, one per format used
	ch   chunker
}

type groupKind uint8

const (
	groupGEMM groupKind = iota
	groupTiles
	groupRows
	groupQuant
)

// MatMuls computes MatMul(outs[i], x, m, ws[i]) for every i (at most
// MatMulGroupMax) in one parallel call. Quantized weights whose activation
// format agrees (actK) and whose column counts match share one quantized
// copy of x, and float weights in the small-batch range share one packed
// x block (gemm16.go). Panics as MatMul does on malformed input.
func (p *Pool) MatMuls(outs [][]float32, x []float32, m int, ws []Matrix) {
	if len(outs) != len(ws) || len(ws) > MatMulGroupMax {
		panic(fmt.Sprintf("cpu: matmuls of %d outputs and %d weights (at most %d)", len(outs), len(ws), MatMulGroupMax))
	}
	simple := p.Threads() == 1 || m == 0
	for i, w := range ws {
		w.mustValid()
		if m < 0 || len(outs[i]) < m*w.Rows || len(x) < m*w.Cols {
			panic(fmt.Sprintf("cpu: matmuls m=%d with %dx%d weights: out has %d floats (need %d), x has %d (need %d)",
				m, w.Rows, w.Cols, len(outs[i]), m*w.Rows, len(x), m*w.Cols))
		}
		simple = simple || w.Rows == 0 || w.Cols == 0
		// gemm16.go's small-batch tiles share one packed x block: a float
		// weight of another width (never a layer's projections) goes alone.
		simple = simple || !w.Type.Quantized() && m >= gemmMinM(w.Type) && p.gemmTFor(m) && w.Cols != ws[0].Cols
	}
	if simple {
		for i, w := range ws {
			p.MatMul(outs[i], x, m, w)
		}
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	t := &p.grp
	t.xt = nil
	if len(ws) > 0 && p.gemmTFor(m) {
		t.xt = p.packXT(x, m, ws[0].Cols) // once for the group
	}
	t.init(outs, x, m, ws, p.threads)
	p.parallel(t)
	t.release()
}

// init lays out every weight's items for threads workers.
func (t *groupTask) init(outs [][]float32, x []float32, m int, ws []Matrix, threads int) {
	t.n = len(ws)
	total := 0
	for i, w := range ws {
		rb := w.rowBytes()
		switch {
		case w.Type.Quantized():
			t.kind[i] = groupQuant
			q := &t.qm[i]
			shared := false
			for j := range i {
				if o := &t.qm[j]; t.kind[j] == groupQuant && actK(o.w.Type) == actK(w.Type) && o.w.Cols == w.Cols {
					q.xq, q.xrb, shared = o.xq, o.xrb, true
					q.out, q.m, q.w, q.rb = outs[i], m, w, rb
					break
				}
			}
			if !shared {
				q.prepare(outs[i], x, m, w, rb, &t.qbuf[i])
			}
			xblocks := (m + qmXBlock - 1) / qmXBlock
			per := (w.Rows*xblocks + 8*threads - 1) / (8 * threads)
			q.chunk = min(max(qmRowGroup, per/qmRowGroup*qmRowGroup), w.Rows)
			q.nchunk = (w.Rows + q.chunk - 1) / q.chunk
			total += q.nchunk * xblocks
		case m >= gemmMinM(w.Type) && t.xt != nil:
			t.kind[i] = groupTiles
			g := &t.gt[i]
			g.init(outs[i], t.xt, m, w, rb, threads)
			total += g.items()
		case m >= gemmMinM(w.Type):
			t.kind[i] = groupGEMM
			g := &t.gm[i]
			g.init(outs[i], x, m, w, rb, threads)
			total += int(g.ch.n)
		default:
			t.kind[i] = groupRows
			r := &t.mm[i]
			r.out, r.x, r.m, r.w, r.rb = outs[i], x, m, w, rb
			r.chunk = max(4, (w.Rows+8*threads-1)/(8*threads))
			total += (w.Rows + r.chunk - 1) / r.chunk
		}
		t.end[i] = total
	}
	t.ch.reset(total)
}

func (t *groupTask) run(int) {
	var ts gemmTScratch
	var buf [gemmBufLen]float32
	var xt [2 * gemmMR * gemmKC]float32
	off := int(-uintptr(unsafe.Pointer(&buf[0]))&63) / 4
	pk := buf[off : off+gemmNR*gemmKC]
	src := tileSource{g: t, pending: -1}
	for c := t.ch.take(); c >= 0; c = t.ch.take() {
		for c >= 0 {
			i, lc := t.locate(c)
			c = -1
			switch t.kind[i] {
			case groupGEMM:
				g := &t.gm[i]
				xb, grp := lc/g.ngrp, lc%g.ngrp
				for p := grp * g.grp; p < min((grp+1)*g.grp, g.npan); p++ {
					g.item(xb, p, pk, &xt)
				}
			case groupTiles:
				if g := &t.gt[i]; g.piped {
					// The pipeline runs on through the tile items it claims;
					// the first other item it claims is done next here.
					pipeTiles(&src, g.runOf(lc), &ts)
					c, src.pending = src.pending, -1
				} else {
					for j := lc * g.grp; j < min((lc+1)*g.grp, g.ntile); j++ {
						g.tile(j, &ts.tile, ts.stage(0))
					}
				}
			case groupRows:
				r := &t.mm[i]
				r0 := lc * r.chunk
				matmulRows(r.out, r.x, r.m, r.w, r.rb, r0, min(r0+r.chunk, r.w.Rows))
			default:
				q := &t.qm[i]
				r0 := lc % q.nchunk * q.chunk
				i0 := lc / q.nchunk * qmXBlock
				q.rows(r0, min(r0+q.chunk, q.w.Rows), i0, min(i0+qmXBlock, q.m))
			}
		}
	}
}

// locate maps group item c to its weight i and the item's index lc there.
func (t *groupTask) locate(c int) (i, lc int) {
	for c >= t.end[i] {
		i++
	}
	if i > 0 {
		c -= t.end[i-1]
	}
	return i, c
}

// release drops the references to the caller's memory.
func (t *groupTask) release() {
	for i := range t.n {
		t.gm[i].out, t.gm[i].x, t.gm[i].w.Data = nil, nil, nil
		t.mm[i].out, t.mm[i].x, t.mm[i].w.Data = nil, nil, nil
		t.qm[i].out, t.qm[i].xq, t.qm[i].w.Data = nil, nil, nil
		t.gt[i].release()
	}
	t.xt = nil
}
