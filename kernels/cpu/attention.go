package cpu

import (
	"fmt"
	"math"
)

// Tiled online-softmax attention (flash-attention style) over a paged,
// encoded KV cache, for prefill and batched decode alike.
//
// A work item is one sequence's block of query rows for the query heads of
// one KV head (a block of heads when a KV head serves more than attnMaxM of
// them): at most attnMaxM query vectors, which share every key and value
// tile they read. Keys go attnBK at a time: the tile's rows are decoded from
// the cache's encoding into float32 (the only copy of cache data, one tile
// per worker), the keys transposed into 16-key panels, the scores of all
// the item's vectors against the tile computed by a register-tiled
// microkernel, soft-capped and masked (causal, sliding window), folded into
// a running maximum and sum per vector, and the values accumulated with the
// same microkernel. Nothing depends on the context length except the number
// of tiles: the scratch is a few tiles per worker. When a call has fewer
// items than workers (batch-1 decode over one or few KV heads), each item's
// key range is split into parts that run in parallel and whose partial
// maxima, sums and outputs are merged at the end (flash-decoding).
const (
	attnBK         = 64 // keys per tile: four 16-key panels
	attnMaxM       = 48 // query vectors per work item (a multiple of 4 and 12)
	attnSplitTasks = 4  // target parts per worker when items are fewer than workers
)

// AttnOpts are the choices of an attention call beyond its shapes.
type AttnOpts struct {
	// Scale multiplies q·k (usually 1/sqrt(HeadDim)); it must be positive.
	Scale float32
	// Window > 0 lets a query at position p see keys p-Window+1..p only;
	// keys before are never read (their pages may have been released).
	Window int
	// SoftCap > 0 replaces each scaled score s by SoftCap·tanh(s/SoftCap).
	SoftCap float32
	// Sinks, when non-nil, holds one logit per query head that joins the
	// softmax denominator as a key without a value.
	Sinks []float32
}

func round16(n int) int { return (n + 15) &^ 15 }

// attnWorkerFloats is one worker's tile scratch: the item's scaled queries,
// a key tile decoded and transposed, a value tile, the scores and the
// output accumulator.
func attnWorkerFloats(d, dv int) int {
	dvp := round16(dv)
	return attnMaxM*d + 2*attnBK*d + attnBK*dvp + attnMaxM*attnBK + attnMaxM*dvp
}

// attnPartFloats is one split part's partial result: attnMaxM output rows,
// their maxima and their sums (accumulated in float64, kept as float32).
func attnPartFloats(dv int) int { return attnMaxM * (round16(dv) + 2) }

// attnMaxParts bounds the parts of a split call: parts are only made when
// items < threads, ceil(attnSplitTasks·threads/items) per item.
func attnMaxParts(threads int) int {
	if threads <= 1 {
		return 0
	}
	return (attnSplitTasks + 1) * threads
}

// AttentionScratch is the number of scratch floats Attention and
// DecodeAttention need on a Pool of threads workers (Pool.Threads) for heads
// of headDim (keys) and vHeadDim (values): a few tiles per worker plus the
// split parts — independent of the context length, the number of query rows
// and the number of heads. This is the one formula for the figure; the
// planner asks it too.
func AttentionScratch(threads, headDim, vHeadDim int) int {
	threads = max(1, threads)
	return threads*attnWorkerFloats(headDim, vHeadDim) + attnMaxParts(threads)*attnPartFloats(vHeadDim)
}

// Attention computes causal attention over the paged cache for one sequence.
// q is [n, nHeads·HeadDim] and out [n, nHeads·VHeadDim]; query row i is at
// position startPos+i and attends to positions 0..startPos+i (within
// o.Window), which must already be written (WriteKV). Query head h reads KV
// head h/(nHeads/KVHeads). scratch needs AttentionScratch floats. Nothing is
// allocated.
func (p *Pool) Attention(out, q []float32, n, nHeads int, kv PagedKV, pageTable []int32, startPos int, o AttnOpts, scratch []float32) {
	t := attnCall{out: out, q: q, nHeads: nHeads, kv: kv, o: o, rows: n, startPos: startPos, pageTable: pageTable, scratch: scratch}
	t.check("attention", n)
	if n < 0 || startPos < 0 {
		panic(fmt.Sprintf("cpu: attention: %d rows at start %d", n, startPos))
	}
	if need := (startPos + n + kv.PageSize - 1) / kv.PageSize; len(pageTable) < need {
		panic(fmt.Sprintf("cpu: attention: page table has %d pages, positions up to %d need %d", len(pageTable), startPos+n-1, need))
	}
	p.runAttention(&t, n)
}

// DecodeAttention runs attention for len(positions) sequences at once: row i
// of q ([rows, nHeads·HeadDim]) is the newest token of a sequence at
// positions[i] (page table tables[i]) and attends to its positions up to
// positions[i] (within o.Window). out is [rows, nHeads·VHeadDim].
func (p *Pool) DecodeAttention(out, q []float32, nHeads int, kv PagedKV, positions []int32, tables [][]int32, o AttnOpts, scratch []float32) {
	rows := len(positions)
	t := attnCall{out: out, q: q, nHeads: nHeads, kv: kv, o: o, decode: true, positions: positions, tables: tables, scratch: scratch}
	t.check("decode attention", rows)
	if len(tables) < rows {
		panic(fmt.Sprintf("cpu: decode attention: %d rows, %d page tables", rows, len(tables)))
	}
	for i, pos := range positions {
		if pos < 0 || len(tables[i]) <= int(pos)/kv.PageSize {
			panic(fmt.Sprintf("cpu: decode attention: position %d outside page table %d of %d pages", pos, i, len(tables[i])))
		}
	}
	p.runAttention(&t, rows)
}

// attnTask is one Attention or DecodeAttention call being run on a Pool.
type attnTask struct {
	attnCall
	ch chunker
}

// attnCall is the call's arguments and layout. A prefill call is one job of
// rows query rows; a decode call is one job per row.
type attnCall struct {
	out, q    []float32
	nHeads    int
	kv        PagedKV
	o         AttnOpts
	decode    bool
	rows      int     // prefill: query rows
	startPos  int     // prefill
	pageTable []int32 // prefill
	positions []int32 // decode
	tables    [][]int32
	scratch   []float32

	group, hb, nhb int // query heads per KV head; per head block; head blocks per KV head
	bq, nqb        int // query rows per block; blocks per job
	items, splits  int
	partsOff       int // where the split parts start in scratch
}

func (t *attnCall) check(what string, rows int) {
	kv := t.kv
	kv.mustValid(what)
	if t.nHeads <= 0 || t.nHeads%kv.KVHeads != 0 {
		panic(fmt.Sprintf("cpu: %s: %d query heads is not a positive multiple of %d kv heads", what, t.nHeads, kv.KVHeads))
	}
	if qw, ow := t.nHeads*kv.HeadDim, t.nHeads*kv.VHeadDim; len(t.q) < rows*qw || len(t.out) < rows*ow {
		panic(fmt.Sprintf("cpu: %s: %d rows of %d heads: q has %d floats (need %d), out %d (need %d)", what, rows, t.nHeads, len(t.q), rows*qw, len(t.out), rows*ow))
	}
	if o := t.o; !(o.Scale > 0) || o.Window < 0 || o.SoftCap < 0 || (o.Sinks != nil && len(o.Sinks) < t.nHeads) {
		panic(fmt.Sprintf("cpu: %s: scale %v, window %d, soft cap %v, %d sinks for %d heads", what, o.Scale, o.Window, o.SoftCap, len(o.Sinks), t.nHeads))
	}
}

// runAttention lays out the work items and runs them over the pool.
func (p *Pool) runAttention(t *attnCall, rows int) {
	kv := t.kv
	threads := p.Threads()
	if need := AttentionScratch(threads, kv.HeadDim, kv.VHeadDim); len(t.scratch) < need {
		panic(fmt.Sprintf("cpu: attention: scratch has %d floats, need %d", len(t.scratch), need))
	}
	if rows == 0 {
		return
	}
	t.group = t.nHeads / kv.KVHeads
	t.nhb, t.hb = 1, t.group
	if t.group > attnMaxM {
		t.nhb = (t.group + attnMaxM - 1) / attnMaxM
		t.hb = (t.group + t.nhb - 1) / t.nhb
	}
	jobs, longest := 1, 0
	if t.decode {
		jobs, t.bq, t.nqb = rows, 1, 1
		for _, pos := range t.positions {
			longest = max(longest, int(pos)+1)
		}
	} else {
		t.bq = max(1, attnMaxM/t.hb)
		t.nqb = (rows + t.bq - 1) / t.bq
		longest = t.startPos + rows
	}
	t.items = jobs * kv.KVHeads * t.nhb * t.nqb
	t.splits = 1
	if t.items < threads {
		// Split no finer than one tile per part.
		if w := t.o.Window; w > 0 {
			longest = min(longest, w+t.bq-1)
		}
		tiles := (longest + attnBK - 1) / attnBK
		t.splits = max(1, min((attnSplitTasks*threads+t.items-1)/t.items, tiles))
	}
	t.partsOff = threads * attnWorkerFloats(kv.HeadDim, kv.VHeadDim)
	if threads == 1 {
		var w attnWork
		t.bind(&w, 0)
		for c := range t.items {
			t.compute(c, 0, &w)
		}
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.at.attnCall = *t
	p.at.ch.reset(t.items * t.splits)
	p.parallel(&p.at)
	if t.splits > 1 {
		for it := range t.items {
			p.at.combine(it)
		}
	}
	p.at = attnTask{}
}

func (t *attnTask) run(worker int) {
	var w attnWork
	t.bind(&w, worker)
	for c := t.ch.take(); c >= 0; c = t.ch.take() {
		t.compute(c/t.splits, c%t.splits, &w)
	}
}

// item is one work item's coordinates.
type attnItem struct {
	q, out      []float32 // the job's rows
	start       int       // position of the job's row 0
	table       []int32
	i0, i1      int // query rows
	g, h0, nh   int // KV head, first query head, heads
	m           int // query vectors: (i1-i0)·nh, row-major over (row, head)
	lo, hi      int // key positions read: [lo, hi)
	first, last int // positions of the first and last query rows
	qw, ow, dvp int
}

// item decodes work item it. Prefill items are handed out last query block
// first: those see the most keys, so the long ones start early.
func (t *attnCall) item(it int) attnItem {
	kv := t.kv
	per := kv.KVHeads * t.nhb * t.nqb
	job, r := it/per, it%per
	qb := t.nqb - 1 - r%t.nqb
	r /= t.nqb
	hbi, g := r%t.nhb, r/t.nhb
	var a attnItem
	a.qw, a.ow, a.dvp = t.nHeads*kv.HeadDim, t.nHeads*kv.VHeadDim, round16(kv.VHeadDim)
	rows := t.rows
	if t.decode {
		rows = 1
		a.start, a.table = int(t.positions[job]), t.tables[job]
		a.q, a.out = t.q[job*a.qw:(job+1)*a.qw], t.out[job*a.ow:(job+1)*a.ow]
	} else {
		a.start, a.table, a.q, a.out = t.startPos, t.pageTable, t.q, t.out
	}
	a.i0 = qb * t.bq
	a.i1 = min(a.i0+t.bq, rows)
	a.g = g
	a.h0 = g*t.group + hbi*t.hb
	a.nh = min(t.hb, (g+1)*t.group-a.h0)
	a.m = (a.i1 - a.i0) * a.nh
	a.first, a.last = a.start+a.i0, a.start+a.i1-1
	a.hi = a.last + 1
	if w := t.o.Window; w > 0 {
		a.lo = max(0, a.first-w+1)
	}
	return a
}

// partOffset is where split part (it, part) keeps its partial result.
func (t *attnCall) partOffset(it, part int) int {
	return t.partsOff + (it*t.splits+part)*attnPartFloats(t.kv.VHeadDim)
}

// combine merges the split parts of item it into out: each part holds,
// per query vector, its maximum score m_p, its sum of exp(s - m_p) and its
// unnormalised output; the merged output is Σ O_p·e^(m_p-M) / (Σ l_p·e^(m_p-M)
// + e^(sink-M)) with M the largest m_p.
func (t *attnCall) combine(it int) {
	a := t.item(it)
	kv := t.kv
	dv := kv.VHeadDim
	for r := range a.m {
		mx := math.Inf(-1)
		for part := range t.splits {
			pb := t.scratch[t.partOffset(it, part):]
			mx = math.Max(mx, float64(pb[attnMaxM*a.dvp+r]))
		}
		ii, hh := r/a.nh, r%a.nh
		h := a.h0 + hh
		dst := a.out[(a.i0+ii)*a.ow+h*dv:][:dv]
		clear(dst)
		var den float64
		for part := range t.splits {
			pb := t.scratch[t.partOffset(it, part):]
			mp := float64(pb[attnMaxM*a.dvp+r])
			if math.IsInf(mp, -1) {
				continue
			}
			f := math.Exp(mp - mx)
			den += f * float64(pb[attnMaxM*(a.dvp+1)+r])
			axpy(dst, float32(f), pb[r*a.dvp:][:dv])
		}
		if t.o.Sinks != nil {
			den += math.Exp(float64(t.o.Sinks[h]) - mx)
		}
		inv := float32(1 / den)
		for c := range dst {
			dst[c] *= inv
		}
	}
}
