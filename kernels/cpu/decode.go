package cpu

import "fmt"

// Batched decode kernels: one new token per sequence, positions and page
// tables read from slices at call time. A captured decode graph records
// these calls once and replays them with the slices' contents rewritten, so
// nothing about a step may be a by-value argument.

// WriteKVRows stores row i of k and v at position positions[i] of the
// sequence whose page table is tables[i].
func WriteKVRows(kv PagedKV, k, v []float32, positions []int32, tables [][]int32) {
	kv.check("write kv rows")
	w := kv.rowLen()
	rows := len(positions)
	if len(tables) < rows || len(k) < rows*w || len(v) < rows*w {
		panic(fmt.Sprintf("cpu: write kv rows: %d rows need %d tables and %d floats, have %d, %d, %d", rows, rows, rows*w, len(tables), len(k), len(v)))
	}
	for i, pos := range positions {
		s := kv.slot(tables[i], int(pos))
		copy(kv.K[s*w:(s+1)*w], k[i*w:(i+1)*w])
		copy(kv.V[s*w:(s+1)*w], v[i*w:(i+1)*w])
	}
}

// DecodeAttentionScratch is the scratch DecodeAttention needs for sequences
// of at most maxLen positions.
func DecodeAttentionScratch(p *Pool, maxLen int) int { return p.Threads() * maxLen }

type decodeAttnTask struct {
	out, q    []float32
	nHeads    int
	kv        PagedKV
	positions []int32
	tables    [][]int32
	scale     float32
	scratch   []float32
	maxLen    int
	ch        chunker
}

func (t *decodeAttnTask) run(worker int) {
	sc := t.scratch[worker*t.maxLen : (worker+1)*t.maxLen]
	for c := t.ch.take(); c >= 0; c = t.ch.take() {
		t.one(c/t.nHeads, c%t.nHeads, sc)
	}
}

func (t *decodeAttnTask) one(i, h int, scores []float32) {
	qw := t.nHeads * t.kv.HeadDim
	row := attnTask{out: t.out[i*qw : (i+1)*qw], q: t.q[i*qw : (i+1)*qw], n: 1, nHeads: t.nHeads, kv: t.kv,
		pageTable: t.tables[i], startPos: int(t.positions[i]), scale: t.scale}
	row.one(0, h, scores)
}

// DecodeAttention runs attention for len(positions) sequences at once: row i
// of q ([rows, nHeads*HeadDim]) is the newest token of a sequence at
// positions[i] (page table tables[i]) and attends to positions
// 0..positions[i]. maxLen bounds positions[i]+1 and sizes the scratch
// (DecodeAttentionScratch). (row, head) pairs are split over the pool.
func (p *Pool) DecodeAttention(out, q []float32, nHeads int, kv PagedKV, positions []int32, tables [][]int32, scale float32, scratch []float32, maxLen int) {
	kv.check("decode attention")
	rows := len(positions)
	width := nHeads * kv.HeadDim
	if nHeads <= 0 || nHeads%kv.KVHeads != 0 || len(q) < rows*width || len(out) < rows*width || len(tables) < rows {
		panic(fmt.Sprintf("cpu: decode attention: %d rows of %d heads: q %d, out %d, tables %d", rows, nHeads, len(q), len(out), len(tables)))
	}
	if len(scratch) < DecodeAttentionScratch(p, maxLen) {
		panic(fmt.Sprintf("cpu: decode attention: scratch has %d floats, need %d", len(scratch), DecodeAttentionScratch(p, maxLen)))
	}
	for _, pos := range positions {
		if pos < 0 || int(pos) >= maxLen {
			panic(fmt.Sprintf("cpu: decode attention: position %d outside [0, %d)", pos, maxLen))
		}
	}
	if p.Threads() == 1 {
		t := decodeAttnTask{out: out, q: q, nHeads: nHeads, kv: kv, positions: positions, tables: tables, scale: scale, scratch: scratch, maxLen: maxLen}
		for c := range rows * nHeads {
			t.one(c/nHeads, c%nHeads, scratch[:maxLen])
		}
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.dat = decodeAttnTask{out: out, q: q, nHeads: nHeads, kv: kv, positions: positions, tables: tables, scale: scale, scratch: scratch, maxLen: maxLen}
	p.dat.ch.reset(rows * nHeads)
	p.parallel(&p.dat)
	p.dat = decodeAttnTask{}
}
