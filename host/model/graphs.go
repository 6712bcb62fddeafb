package model

import (
	"errors"
	"fmt"
	"slices"
	"sync/atomic"

	"github.com/kvhost/kvhost/host/alloc"
	"github.com/kvhost/kvhost/host/device"
	"github.com/kvhost/kvhost/host/kv"
)

// ErrNoCapture means the device cannot capture graphs or run batched decode.
var ErrNoCapture = errors.New("model: the device cannot capture decode graphs")

// decodeInputs are the fixed host buffers a captured decode step reads:
// one token, position and page table per token pool per row
// (tables[pool][row]) and one slot per state pool per row (slots[pool][row]).
type decodeInputs struct {
	ids       []int32
	positions []int32
	tables    [][][]int32
	slots     [][]int32
	starts    []int32 // 0, 1, …, maxBS: row i is sequence i (Step.StateBatch)
}

// decodeStep runs one token for each of rows sequences. Every per-step value
// is read from in's slices when the kernels run, so the same launches can be
// captured once and replayed (spec §4: fixed buffers, graph-shared logits).
// The layers run through layersForward, as the eager forward's do.
func (m *Model) decodeStep(pools *kv.Set, in *decodeInputs, rows int, logitsBuf device.Buf, logits []float32) error {
	c, k := m.Config, m.k
	if _, ok := k.(device.DecodeKernels); !ok {
		return ErrNoCapture
	}
	st := m.begin(pools, rows, in.positions[:rows], alloc.Graph)
	st.dec = in
	defer st.end()
	x, err := st.Buf(rows * c.Hidden)
	if err != nil {
		return err
	}
	if err := m.embed(x, in.ids[:rows]); err != nil {
		return err
	}
	if err := m.layersForward(st, x); err != nil {
		return err
	}
	if err := k.RMSNorm(x, x, m.outNorm, rows, c.Hidden, c.RMSEps); err != nil {
		return err
	}
	out := logitsBuf.Slice(0, rows*c.Vocab)
	if err := m.logits(out, x, rows); err != nil {
		return err
	}
	return k.CopyToHost(m.hostLogits(logits, rows), out)
}

// DecodeGraphs holds one captured decode step per batch bucket, all in one
// private allocator pool, captured largest first so the smaller ones reuse
// its blocks: the pool's size is the largest bucket's peak, not the sum.
type DecodeGraphs struct {
	m         *Model
	pools     *kv.Set
	buckets   []int // ascending
	graphs    map[int]device.Graph
	in        decodeInputs
	pad       *padding // one padding page per token pool, slot per state pool
	logitsBuf device.Buf
	logits    []float32
	poolID    alloc.PoolID

	replays, padded atomic.Int64
}

// CaptureDecodeGraphs captures a decode step for every bucket (batch sizes),
// largest first, into one private pool. Pad rows of a replay write to a
// dummy page the graphs own in each token pool and a dummy slot in each
// state pool.
func (m *Model) CaptureDecodeGraphs(pools *kv.Set, buckets []int) (g *DecodeGraphs, err error) {
	_, ok := m.dev.(device.Capturer)
	if _, dok := m.k.(device.DecodeKernels); !ok || !dok {
		return nil, ErrNoCapture
	}
	if len(buckets) == 0 {
		return nil, fmt.Errorf("model: no decode buckets to capture")
	}
	buckets = slices.Clone(buckets)
	slices.Sort(buckets)
	buckets = slices.Compact(buckets)
	if buckets[0] < 1 {
		return nil, fmt.Errorf("model: decode bucket %d must be positive", buckets[0])
	}
	maxBS, c := buckets[len(buckets)-1], m.Config
	g = &DecodeGraphs{m: m, buckets: buckets, graphs: map[int]device.Graph{}, poolID: m.act.NewPrivatePool("decode-graphs")}
	defer func() {
		if err != nil {
			g.Close()
		}
	}()
	if err := g.bind(pools); err != nil {
		return nil, err
	}
	g.in = decodeInputs{ids: make([]int32, maxBS), positions: make([]int32, maxBS), tables: make([][][]int32, len(pools.TokenPools())),
		slots: make([][]int32, len(pools.SlotPools()))}
	for p, tp := range pools.TokenPools() {
		g.in.tables[p] = make([][]int32, maxBS)
		for i := range g.in.tables[p] {
			g.in.tables[p][i] = make([]int32, tp.PagesFor(c.ContextLen))
		}
	}
	for p := range g.in.slots {
		g.in.slots[p] = make([]int32, maxBS)
	}
	g.in.starts = make([]int32, maxBS+1)
	for i := range g.in.starts {
		g.in.starts[i] = int32(i)
	}
	g.fillPadding(0)
	p, err := m.act.AllocIn(g.poolID, int64(maxBS)*int64(c.Vocab)*4, alloc.Graph)
	if err != nil {
		return nil, fmt.Errorf("model: graph-shared logits buffer: %w", err)
	}
	g.logitsBuf = device.Buf{Ptr: p, N: maxBS * c.Vocab}
	if !m.dry {
		g.logits = make([]float32, maxBS*c.Vocab)
	}
	if err := g.capture(); err != nil {
		return nil, err
	}
	return g, nil
}

// capture records every bucket, largest first, into the private pool.
func (g *DecodeGraphs) capture() error {
	m := g.m
	capt := m.dev.(device.Capturer)
	for i := len(g.buckets) - 1; i >= 0; i-- {
		bs := g.buckets[i]
		if err := m.act.BeginCapture(g.poolID); err != nil {
			return err
		}
		if err := capt.BeginCapture(); err != nil {
			m.act.EndCapture()
			return err
		}
		err := m.decodeStep(g.pools, &g.in, bs, g.logitsBuf, g.logits)
		graph, cerr := capt.EndCapture()
		m.act.EndCapture()
		if err != nil {
			return fmt.Errorf("model: capture decode bucket %d: %w", bs, err)
		}
		if cerr != nil {
			return cerr
		}
		g.graphs[bs] = graph
	}
	return nil
}

// bind takes a padding page in every token pool of pools and a padding
// slot in every state pool, releasing the ones held in the previous set
// once the new ones are taken.
func (g *DecodeGraphs) bind(pools *kv.Set) error {
	next := &padding{pools: pools, pages: make([][]int32, len(pools.TokenPools())), slots: make([]int32, len(pools.SlotPools()))}
	for i := range next.slots {
		next.slots[i] = -1
	}
	for i, tp := range pools.TokenPools() {
		pg, err := tp.Grow(nil, tp.PageSize())
		if err != nil {
			next.release()
			return fmt.Errorf("model: decode graphs need a padding page in %s: %w", tp, err)
		}
		next.pages[i] = pg
	}
	for i, sp := range pools.SlotPools() {
		sl, err := sp.Acquire()
		if err != nil {
			next.release()
			return fmt.Errorf("model: decode graphs need a padding slot in %s: %w", sp, err)
		}
		next.slots[i] = sl
	}
	g.pad.release()
	g.pools, g.pad = pools, next
	return nil
}

// padding is what the graphs' pad rows point at: a page of every token
// pool and a slot of every state pool of one set.
type padding struct {
	pools *kv.Set
	pages [][]int32
	slots []int32
}

// release gives the padding back (nil-safe).
func (p *padding) release() {
	if p == nil {
		return
	}
	for i, d := range p.pages {
		if d != nil {
			p.pools.TokenPools()[i].Release(d)
		}
	}
	for i, sl := range p.slots {
		if sl >= 0 {
			p.pools.SlotPools()[i].Release(sl)
		}
	}
	p.pages, p.slots = nil, nil
}

// Recapture rebinds the graphs to pools — the KV pools after post-capture
// growth, whose buffers are longer views of the same memory — by capturing
// again into the same private pool: the same allocation sequence on the
// same free blocks, so it costs no new device memory.
func (g *DecodeGraphs) Recapture(pools *kv.Set) error {
	if len(pools.TokenPools()) != len(g.in.tables) {
		return fmt.Errorf("model: recapture over %d token pools, captured over %d", len(pools.TokenPools()), len(g.in.tables))
	}
	if err := g.bind(pools); err != nil {
		return err
	}
	g.fillPadding(0)
	if err := g.closeGraphs(); err != nil {
		return err
	}
	g.graphs = map[int]device.Graph{}
	return g.capture()
}

// closeGraphs releases every captured graph's device resources.
func (g *DecodeGraphs) closeGraphs() error {
	var errs []error
	for b, gr := range g.graphs {
		if err := gr.Close(); err != nil {
			errs = append(errs, fmt.Errorf("model: closing the batch-%d decode graph: %w", b, err))
		}
	}
	g.graphs = nil
	return errors.Join(errs...)
}

func (g *DecodeGraphs) fillPadding(from int) {
	for i := from; i < len(g.in.ids); i++ {
		g.in.ids[i], g.in.positions[i] = 0, 0
		for p, rows := range g.in.tables {
			for j := range rows[i] {
				rows[i][j] = g.pad.pages[p][0]
			}
		}
		for p, rows := range g.in.slots {
			rows[i] = g.pad.slots[p]
		}
	}
}

// Buckets returns the captured batch sizes, ascending.
func (g *DecodeGraphs) Buckets() []int { return slices.Clone(g.buckets) }

// MaxBatch is the largest captured bucket.
func (g *DecodeGraphs) MaxBatch() int { return g.buckets[len(g.buckets)-1] }

// PoolBytes is the device memory the graphs' private pool holds.
func (g *DecodeGraphs) PoolBytes() int64 { return g.m.act.PoolReserved(g.poolID) }

// Stats returns replays and padded rows so far.
func (g *DecodeGraphs) Stats() (replays, paddedRows int64) { return g.replays.Load(), g.padded.Load() }

// Run replays the graph of the smallest bucket that holds seqs (each one
// decode token with one logits row) and writes len(seqs)×Vocab logits. It
// returns false, doing nothing, when the batch is larger than every bucket
// or not a pure decode batch: the caller then runs the forward eagerly.
func (g *DecodeGraphs) Run(seqs []Seq, logits []float32) (bool, error) {
	n := len(seqs)
	if n == 0 || n > g.MaxBatch() {
		return false, nil
	}
	for _, s := range seqs {
		if len(s.Tokens) != 1 || s.LogitRows != 1 || s.Start >= g.m.Config.ContextLen {
			return false, nil
		}
	}
	bs := g.buckets[0]
	for _, b := range g.buckets {
		if b >= n {
			bs = b
			break
		}
	}
	if err := checkPools(g.pools, seqs); err != nil {
		return false, err
	}
	for i, s := range seqs {
		g.in.ids[i], g.in.positions[i] = s.Tokens[0], int32(s.Start)
		for p, rows := range g.in.tables {
			t := rows[i]
			if len(s.Pages[p]) > len(t) {
				return false, fmt.Errorf("model: page table of %d pages exceeds the graphs' %d", len(s.Pages[p]), len(t))
			}
			copy(t, s.Pages[p])
			for j := len(s.Pages[p]); j < len(t); j++ {
				t[j] = g.pad.pages[p][0]
			}
		}
		for p, rows := range g.in.slots {
			rows[i] = s.Slots[p]
		}
	}
	g.fillPadding(n)
	if err := g.graphs[bs].Launch(); err != nil {
		return true, err
	}
	V := g.m.Config.Vocab
	copy(logits[:n*V], g.logits[:n*V])
	g.replays.Add(1)
	g.padded.Add(int64(bs - n))
	return true, nil
}

// Close releases the graphs' pool, logits buffer and padding page.
func (g *DecodeGraphs) Close() {
	if g.logitsBuf.Ptr != 0 {
		_ = g.m.act.Free(g.logitsBuf.Ptr)
		g.logitsBuf = device.Buf{}
	}
	_ = g.closeGraphs()
	_ = g.m.act.ReleasePool(g.poolID)
	g.pad.release()
	g.pad = nil
}
