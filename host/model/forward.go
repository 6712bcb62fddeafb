package model

import (
	"fmt"

	"github.com/kvhost/kvhost/host/alloc"
	"github.com/kvhost/kvhost/host/device"
	"github.com/kvhost/kvhost/host/kv"
)

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
	if len(logits) < rows*c.Vocab && !m.dry {
		return fmt.Errorf("model: logits buffer holds %d floats, needs %d", len(logits), rows*c.Vocab)
	}
	m.prepareHost(seqs, total, rows)
	st := m.begin(pools, total, m.positions, alloc.Activations)
	st.Seqs = seqs
	defer st.end()

	x, err := st.Buf(total * c.Hidden)
	if err != nil {
		return err
	}
	if err := m.embed(x, m.ids); err != nil {
		return err
	}
	if err := m.layersForward(st, x); err != nil {
		return err
	}
	if err := m.hiddenOut(&st.sc, x, seqs, total); err != nil {
		return err
	}
	if rows == 0 {
		return nil
	}
	return m.head(&st.sc, x, rows, m.hostLogits(logits, rows))
}

// begin readies the model's Step for a forward of rows rows at positions
// over pools, its activations in category cat; end releases what is left.
func (m *Model) begin(pools *kv.Set, rows int, positions []int32, cat alloc.Category) *Step {
	st := &m.step
	*st = Step{K: m.k, C: &m.Config, Rows: rows, Positions: positions, Pools: pools, m: m,
		sc: scope{a: m.act, cat: cat}, scratch: m.attnScratch}
	return st
}

func (st *Step) end() {
	st.sc.release()
	st.Seqs, st.dec = nil, nil
}

// layersForward runs every layer on the residual stream x: the layer's
// scratch h, then its mixer and its feed-forward part. The eager forward
// and the captured decode step both come here, so they (and plan's dry
// run of both) allocate in the same order.
func (m *Model) layersForward(st *Step, x device.Buf) error {
	for l := range m.layers {
		st.Layer = l
		L := &m.layers[l]
		h, err := st.Buf(st.Rows * m.Config.Hidden)
		if err != nil {
			return fmt.Errorf("model: layer %d: %w", l, err)
		}
		if L.Mixer != nil {
			if err := L.Mixer.Mix(st, x, h); err != nil {
				return fmt.Errorf("model: layer %d: %w", l, err)
			}
		}
		if L.FFN != nil {
			if err := L.FFN.Forward(st, x, h); err != nil {
				return fmt.Errorf("model: layer %d: %w", l, err)
			}
		}
		st.Free(h)
	}
	return nil
}

// embed gathers the rows of ids into x and applies the trunk's embedding
// scale.
func (m *Model) embed(x device.Buf, ids []int32) error {
	if err := m.k.Embedding(x, m.tokEmbd, ids); err != nil {
		return err
	}
	if m.trunk.EmbedScale != 0 {
		return m.ew.Scale(x, m.trunk.EmbedScale)
	}
	return nil
}

// logits runs the LM head on rows rows of normed x into out and applies
// the trunk's logit scale and soft cap.
func (m *Model) logits(out, x device.Buf, rows int) error {
	if err := m.k.MatMul(out, x, rows, m.output); err != nil {
		return err
	}
	if m.trunk.LogitScale != 0 {
		if err := m.ew.Scale(out, m.trunk.LogitScale); err != nil {
			return err
		}
	}
	if m.trunk.LogitSoftCap > 0 {
		return m.ew.SoftCap(out, m.trunk.LogitSoftCap)
	}
	return nil
}

// hostLogits is the host slice n rows of logits land in; nil on a dry
// model, whose kernels copy nothing.
func (m *Model) hostLogits(logits []float32, n int) []float32 {
	if m.dry {
		return nil
	}
	return logits[:n*m.Config.Vocab]
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
		if err := m.logits(out, xl.Slice(r0*c.Hidden, n*c.Hidden), n); err != nil {
			return err
		}
		var dst []float32
		if logits != nil {
			dst = logits[r0*c.Vocab : (r0+n)*c.Vocab]
		}
		if err := k.CopyToHost(dst, out); err != nil {
			return err
		}
		sc.free(out)
	}
	return nil
}
