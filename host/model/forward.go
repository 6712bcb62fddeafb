package model

import (
	"fmt"

	"github.com/kvhost/kvhost/host/alloc"
	"github.com/kvhost/kvhost/host/device"
	"github.com/kvhost/kvhost/host/kv"
)

// layer holds one decoder block's weights. Biases and q/k norms are zero
// Weights when the architecture has none.
type layer struct {
	attnNorm, wq, wk, wv, wo device.Weight
	bq, bk, bv               device.Weight
	qNorm, kNorm             device.Weight
	ffnNorm, gate, up, down  device.Weight
}

// Seq is one sequence's part of a forward: Tokens new tokens at positions
// Start.., written into its pages. Pages holds one page table per token
// pool of the kv.Set (Pages[i] for TokenPools()[i]), each already covering
// Start+len(Tokens) positions; Slots one slot per state pool. LogitRows
// trailing positions get logits.
type Seq struct {
	Tokens    []int32
	Start     int
	Pages     [][]int32
	Slots     []int32
	LogitRows int
	// Hidden, when not nil, receives the final hidden state of every row of
	// Tokens — after the output norm, what the LM head reads — as
	// len(Tokens) × Config.Hidden floats (embeddings pool it). A batch with
	// Hidden never runs as a captured decode graph.
	Hidden []float32
}

// KVNeeds is what each layer keeps between forwards, the need a
// configurator's declaration must meet (kv.NewLayout): the Llama family's
// layers each keep K and V rows of KVHeads × HeadDim for every past
// position, a sliding layer (Config.LayerWindow) for its window's.
func (c Config) KVNeeds() []kv.LayerNeed {
	out := make([]kv.LayerNeed, c.Layers)
	for i := range out {
		out[i] = kv.LayerNeed{KVHeads: c.KVHeads, HeadDim: c.HeadDim, VHeadDim: c.HeadDim, Window: c.LayerWindow(i)}
	}
	return out
}

// checkPools verifies that seqs carry a page table for every token pool of
// pools and a slot for every state pool.
func checkPools(pools *kv.Set, seqs []Seq) error {
	for i, s := range seqs {
		if len(s.Pages) != len(pools.TokenPools()) || len(s.Slots) != len(pools.SlotPools()) {
			return fmt.Errorf("model: sequence %d has %d page tables and %d slots for %d token and %d state pools",
				i, len(s.Pages), len(s.Slots), len(pools.TokenPools()), len(pools.SlotPools()))
		}
	}
	return nil
}

// scope tracks the activations of one forward so an error anywhere frees
// them all; it holds no Go-heap allocations of its own.
type scope struct {
	a    *alloc.Allocator
	cat  alloc.Category
	live [16]device.Ptr
	n    int
}

func (s *scope) buf(floats int) (device.Buf, error) {
	if floats <= 0 {
		floats = 1
	}
	p, err := s.a.Alloc(int64(floats)*4, s.cat)
	if err != nil {
		return device.Buf{}, err
	}
	if s.n == len(s.live) {
		_ = s.a.Free(p)
		return device.Buf{}, fmt.Errorf("model: more than %d live activations", len(s.live))
	}
	s.live[s.n] = p
	s.n++
	return device.Buf{Ptr: p, N: floats}, nil
}

func (s *scope) free(b device.Buf) {
	for i := s.n - 1; i >= 0; i-- {
		if s.live[i] == b.Ptr {
			_ = s.a.Free(b.Ptr)
			s.n--
			s.live[i] = s.live[s.n]
			return
		}
	}
}

func (s *scope) release() {
	for i := 0; i < s.n; i++ {
		_ = s.a.Free(s.live[i])
	}
	s.n = 0
}

// Forward runs one batched forward over seqs and writes Σ LogitRows × Vocab
// logits (in sequence order) into logits. It is not safe for concurrent use:
// one goroutine owns the device.
func (m *Model) Forward(pools *kv.Set, seqs []Seq, logits []float32) error {
	c := m.Config
	if err := checkPools(pools, seqs); err != nil {
		return err
	}
	total, rows := 0, 0
	for i, s := range seqs {
		if len(s.Tokens) == 0 {
			return fmt.Errorf("model: sequence %d has no tokens", i)
		}
		if s.LogitRows < 0 || s.LogitRows > len(s.Tokens) {
			return fmt.Errorf("model: sequence %d asks logits for %d of %d rows", i, s.LogitRows, len(s.Tokens))
		}
		if end := s.Start + len(s.Tokens); end > c.ContextLen {
			return fmt.Errorf("model: sequence %d reaches position %d past the context of %d", i, end, c.ContextLen)
		}
		if s.Hidden != nil && len(s.Hidden) != len(s.Tokens)*c.Hidden {
			return fmt.Errorf("model: sequence %d has a hidden-state buffer of %d floats, needs %d", i, len(s.Hidden), len(s.Tokens)*c.Hidden)
		}
		total += len(s.Tokens)
		rows += s.LogitRows
	}
	if len(logits) < rows*c.Vocab {
		return fmt.Errorf("model: logits buffer holds %d floats, needs %d", len(logits), rows*c.Vocab)
	}
	m.prepareHost(seqs, total, rows)
	sc := scope{a: m.act, cat: alloc.Activations}
	defer sc.release()

	x, err := sc.buf(total * c.Hidden)
	if err != nil {
		return err
	}
	if err := m.k.Embedding(x, m.tokEmbd, m.ids); err != nil {
		return err
	}
	if err := m.embedScale(x); err != nil {
		return err
	}
	for l := range m.layers {
		if err := m.block(&sc, pools, l, seqs, x, total); err != nil {
			return fmt.Errorf("model: layer %d: %w", l, err)
		}
	}
	if err := m.hiddenOut(&sc, x, seqs, total); err != nil {
		return err
	}
	if rows == 0 {
		return nil
	}
	return m.head(&sc, x, rows, logits[:rows*c.Vocab])
}

// prepareHost fills the reusable host-side index arrays.
func (m *Model) prepareHost(seqs []Seq, total, rows int) {
	m.ids = m.ids[:0]
	m.positions = m.positions[:0]
	m.lastRows = m.lastRows[:0]
	off := 0
	for _, s := range seqs {
		m.ids = append(m.ids, s.Tokens...)
		for i := range s.Tokens {
			m.positions = append(m.positions, int32(s.Start+i))
		}
		for r := len(s.Tokens) - s.LogitRows; r < len(s.Tokens); r++ {
			m.lastRows = append(m.lastRows, int32(off+r))
		}
		off += len(s.Tokens)
	}
}

func (m *Model) block(sc *scope, pools *kv.Set, l int, seqs []Seq, x device.Buf, total int) error {
	if m.customLayers() {
		return m.swaLayer(sc, l, x, total, m.positions, func(q, kk, vv, att device.Buf, o device.AttnOpts) error {
			return m.attendSeqs(pools, l, seqs, q, kk, vv, att, o)
		})
	}
	h, q, kk, vv, att, err := m.attentionIn(sc, l, x, total, m.positions)
	if err != nil {
		return err
	}
	if err := m.attendSeqs(pools, l, seqs, q, kk, vv, att, m.attnOpts(l)); err != nil {
		return err
	}
	return m.attentionOutAndMLP(sc, l, x, h, q, kk, vv, att, total)
}

// attendSeqs writes each sequence's new K/V rows of layer l and runs its
// attention.
func (m *Model) attendSeqs(pools *kv.Set, l int, seqs []Seq, q, kk, vv, att device.Buf, o device.AttnOpts) error {
	c, k := m.Config, m.k
	kvl, tp := pools.Layer(l), pools.Table(l)
	off := 0
	for _, s := range seqs {
		n := len(s.Tokens)
		ks, vs := kk.Slice(off*c.KVRow(), n*c.KVRow()), vv.Slice(off*c.KVRow(), n*c.KVRow())
		if err := k.WriteKV(kvl, ks, vs, n, s.Pages[tp], s.Start); err != nil {
			return err
		}
		err := k.Attention(att.Slice(off*c.QRow(), n*c.QRow()), q.Slice(off*c.QRow(), n*c.QRow()), n, c.Heads, kvl, s.Pages[tp], s.Start, o, m.attnScratch)
		if err != nil {
			return err
		}
		off += n
	}
	return nil
}

// attentionIn is a layer's first half up to attention: the input norm into
// h, the q/k/v projections (with biases and q/k norms where the
// architecture has them) and the rotation at positions, and the attention
// output buffer. Both the eager forward and the captured decode step use it,
// so their allocation order — which host/plan replays — is the same.
func (m *Model) attentionIn(sc *scope, l int, x device.Buf, rows int, positions []int32) (h, q, kk, vv, att device.Buf, err error) {
	c, k, L := m.Config, m.k, &m.layers[l]
	if h, err = sc.buf(rows * c.Hidden); err != nil {
		return
	}
	if err = k.RMSNorm(h, x, L.attnNorm, rows, c.Hidden, c.RMSEps); err != nil {
		return
	}
	if q, err = sc.buf(rows * c.QRow()); err != nil {
		return
	}
	if kk, err = sc.buf(rows * c.KVRow()); err != nil {
		return
	}
	if vv, err = sc.buf(rows * c.KVRow()); err != nil {
		return
	}
	for _, p := range []struct {
		out  device.Buf
		w, b device.Weight
	}{{q, L.wq, L.bq}, {kk, L.wk, L.bk}, {vv, L.wv, L.bv}} {
		if err = k.MatMul(p.out, h, rows, p.w); err != nil {
			return
		}
		if p.b.Ptr != 0 {
			if err = k.AddBias(p.out, p.b, rows); err != nil {
				return
			}
		}
	}
	if c.QKNorm {
		if err = k.RMSNorm(q, q, L.qNorm, rows*c.Heads, c.HeadDim, c.RMSEps); err != nil {
			return
		}
		if err = k.RMSNorm(kk, kk, L.kNorm, rows*c.KVHeads, c.HeadDim, c.RMSEps); err != nil {
			return
		}
	}
	rope := m.layerRope(l)
	if err = k.ApplyRope(rope, q, rows, c.Heads, positions); err != nil {
		return
	}
	if err = k.ApplyRope(rope, kk, rows, c.KVHeads, positions); err != nil {
		return
	}
	att, err = sc.buf(rows * c.QRow())
	return
}

// attentionOutAndMLP is a layer's second half: the output projection and
// residual, the post-attention norm, SwiGLU MLP and residual. It frees
// every temporary of the layer.
func (m *Model) attentionOutAndMLP(sc *scope, l int, x, h, q, kk, vv, att device.Buf, rows int) error {
	c, k, L := m.Config, m.k, &m.layers[l]
	sc.free(q)
	sc.free(kk)
	sc.free(vv)
	if err := k.MatMul(h, att, rows, L.wo); err != nil {
		return err
	}
	sc.free(att)
	if err := k.Add(x, x, h); err != nil {
		return err
	}
	if err := k.RMSNorm(h, x, L.ffnNorm, rows, c.Hidden, c.RMSEps); err != nil {
		return err
	}
	g, err := sc.buf(rows * c.Intermediate)
	if err != nil {
		return err
	}
	u, err := sc.buf(rows * c.Intermediate)
	if err != nil {
		return err
	}
	if err := k.MatMul(g, h, rows, L.gate); err != nil {
		return err
	}
	if err := k.MatMul(u, h, rows, L.up); err != nil {
		return err
	}
	if err := k.SiLUMul(g, g, u); err != nil {
		return err
	}
	sc.free(u)
	if err := k.MatMul(h, g, rows, L.down); err != nil {
		return err
	}
	sc.free(g)
	if err := k.Add(x, x, h); err != nil {
		return err
	}
	sc.free(h)
	return nil
}

// hiddenOut copies the output-normed hidden state of every row of the
// sequences that asked for it (Seq.Hidden). It holds one extra activation
// of total rows beside x, less than a layer's MLP holds, so it stays under
// the forward's measured peak.
func (m *Model) hiddenOut(sc *scope, x device.Buf, seqs []Seq, total int) error {
	want := false
	for _, s := range seqs {
		want = want || s.Hidden != nil
	}
	if !want {
		return nil
	}
	c, k := m.Config, m.k
	hn, err := sc.buf(total * c.Hidden)
	if err != nil {
		return err
	}
	if err := k.RMSNorm(hn, x, m.outNorm, total, c.Hidden, c.RMSEps); err != nil {
		return err
	}
	off := 0
	for _, s := range seqs {
		n := len(s.Tokens)
		if s.Hidden != nil {
			if err := k.CopyToHost(s.Hidden, hn.Slice(off*c.Hidden, n*c.Hidden)); err != nil {
				return err
			}
		}
		off += n
	}
	sc.free(hn)
	return nil
}

// head gathers the rows whose logits are wanted before the final norm and
// the LM head, so a prefill of T tokens costs one row of logits, not T. When
// many rows are wanted (input logprobs) they go through the LM head in
// chunks of LogitsChunk rows, each freed before the next (spec §4).
func (m *Model) head(sc *scope, x device.Buf, rows int, logits []float32) error {
	c, k := m.Config, m.k
	xl, err := sc.buf(rows * c.Hidden)
	if err != nil {
		return err
	}
	if err := k.GatherRows(xl, x, c.Hidden, m.lastRows); err != nil {
		return err
	}
	sc.free(x)
	if err := k.RMSNorm(xl, xl, m.outNorm, rows, c.Hidden, c.RMSEps); err != nil {
		return err
	}
	chunk := m.LogitsChunk
	if chunk <= 0 {
		chunk = DefaultLogitsChunk
	}
	for r0 := 0; r0 < rows; r0 += chunk {
		n := min(chunk, rows-r0)
		out, err := sc.buf(n * c.Vocab)
		if err != nil {
			return err
		}
		if err := k.MatMul(out, xl.Slice(r0*c.Hidden, n*c.Hidden), n, m.output); err != nil {
			return err
		}
		if err := m.finalSoftCap(out); err != nil {
			return err
		}
		if err := k.CopyToHost(logits[r0*c.Vocab:(r0+n)*c.Vocab], out); err != nil {
			return err
		}
		sc.free(out)
	}
	return nil
}
