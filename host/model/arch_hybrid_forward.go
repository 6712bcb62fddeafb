package model

import (
	"fmt"

	"github.com/kvhost/kvhost/host/device"
	"github.com/kvhost/kvhost/host/kv"
)

// hybridHost is host-side scratch a hybrid forward reuses: the Mamba
// batch's row offsets and slots, and zeros to clear a new sequence's state.
type hybridHost struct {
	starts, slots []int32
	zeros         []float32
}

// forwardHybrid is Forward for a hybrid Mamba-2 model (after Forward has
// checked seqs and filled the host index arrays). A sequence whose Start is
// 0 begins from a zero state: a new request, or a preempted one recomputed
// from its prompt; its slots are cleared before the first layer. Forked
// sequences (n > 1) start later with the state their parent's slot held,
// copied by the engine.
func (m *Model) forwardHybrid(sc *scope, pools *kv.Set, seqs []Seq, total, rows int, logits []float32) error {
	c, k, h := m.Config, m.k, m.Config.Hybrid
	el := k.(device.Elementwise) // checked at load
	if err := m.hybridBatch(pools, seqs); err != nil {
		return err
	}
	x, err := sc.buf(total * c.Hidden)
	if err != nil {
		return err
	}
	if err := k.Embedding(x, m.tokEmbd, m.ids); err != nil {
		return err
	}
	if h.EmbedScale != 1 {
		if err := el.Scale(x, h.EmbedScale); err != nil {
			return err
		}
	}
	for l, kind := range h.Layers {
		L := &m.hy[l]
		if kind.Mixer != MixerNone {
			err = m.hybridPart(sc, x, L.norm, total, func(in, out device.Buf) error {
				if kind.Mixer == MixerMamba {
					return m.mambaMixer(sc, pools, l, in, out, total)
				}
				return m.hybridAttention(sc, pools, l, seqs, in, out, total)
			})
		}
		if err == nil && kind.FFN != FFNNone {
			norm := L.ffnNorm
			if kind.Mixer == MixerNone {
				norm = L.norm // Nemotron-H: one norm per layer
			}
			err = m.hybridPart(sc, x, norm, total, func(in, out device.Buf) error { return m.hybridFFN(sc, l, in, out, total) })
		}
		if err != nil {
			return fmt.Errorf("model: layer %d (%s/%s): %w", l, kind.Mixer, kind.FFN, err)
		}
	}
	if err := m.hiddenOut(sc, x, seqs, total); err != nil {
		return err
	}
	if rows == 0 {
		return nil
	}
	out := logits[:rows*c.Vocab]
	if err := m.head(sc, x, rows, out); err != nil {
		return err
	}
	if h.LogitScale != 1 { // Granite divides the logits by logits_scaling
		inv := 1 / h.LogitScale
		for i := range out {
			out[i] *= inv
		}
	}
	return nil
}

// hybridPart runs one residual branch: x += residual_multiplier ·
// part(rmsnorm(x)).
func (m *Model) hybridPart(sc *scope, x device.Buf, norm device.Weight, rows int, part func(in, out device.Buf) error) error {
	c, k := m.Config, m.k
	hn, err := sc.buf(rows * c.Hidden)
	if err != nil {
		return err
	}
	if err := k.RMSNorm(hn, x, norm, rows, c.Hidden, c.RMSEps); err != nil {
		return err
	}
	// The part reads hn and writes its output over it.
	if err := part(hn, hn); err != nil {
		return err
	}
	if rs := c.Hybrid.ResidualScale; rs != 1 {
		err = k.(device.Elementwise).AddScaled(x, x, hn, rs)
	} else {
		err = k.Add(x, x, hn)
	}
	sc.free(hn)
	return err
}

// hybridBatch fills the Mamba batch (one sequence per Seq, its slot in the
// state pool) and clears the slots of sequences that start at position 0.
func (m *Model) hybridBatch(pools *kv.Set, seqs []Seq) error {
	hh := &m.hyHost
	hh.starts, hh.slots = append(hh.starts[:0], 0), hh.slots[:0]
	for l, kind := range m.Config.Hybrid.Layers {
		if kind.Mixer != MixerMamba {
			continue
		}
		st, ok := pools.State(l)
		if !ok {
			return fmt.Errorf("model: layer %d is a Mamba layer but the pools hold no state for it", l)
		}
		if len(hh.slots) == 0 {
			off := int32(0)
			for _, s := range seqs {
				off += int32(len(s.Tokens))
				hh.starts = append(hh.starts, off)
				hh.slots = append(hh.slots, s.Slots[st.Pool])
			}
		}
		for _, s := range seqs {
			if s.Start != 0 {
				continue
			}
			slot := int64(s.Slots[st.Pool])
			for _, span := range []struct {
				base device.Span
				unit int64
			}{{st.Conv, st.ConvBytes}, {st.SSM, st.SSMBytes}} {
				if span.unit%4 != 0 || (slot+1)*span.unit > span.base.Bytes || slot < 0 {
					return fmt.Errorf("model: layer %d: state slot %d of %d bytes is outside its pool of %d bytes", l, slot, span.unit, span.base.Bytes)
				}
				n := int(span.unit / 4)
				if len(hh.zeros) < n {
					hh.zeros = make([]float32, n)
				}
				if err := m.k.CopyFromHost(device.Buf{Ptr: span.base.Ptr + device.Ptr(slot*span.unit), N: n}, hh.zeros[:n]); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// mambaMixer runs layer l's Mamba-2 mixer over in's rows into out
// (docs/architectures/mamba2-hybrids.md §1 and §5).
func (m *Model) mambaMixer(sc *scope, pools *kv.Set, l int, in, out device.Buf, rows int) error {
	c, k, L, s := m.Config, m.k, &m.hy[l], m.Config.Hybrid.Mamba
	mk := k.(device.Mamba)
	st, _ := pools.State(l)
	states := device.MambaStates{Conv: st.Conv, SSM: st.SSM, ConvType: st.ConvType, ConvBytes: st.ConvBytes, SSMBytes: st.SSMBytes}
	batch := device.MambaBatch{Starts: m.hyHost.starts, Slots: m.hyHost.slots}
	I, CD := s.Inner(), s.ConvDim()
	z, err := sc.buf(rows * I)
	if err != nil {
		return err
	}
	xbc, err := sc.buf(rows * CD)
	if err != nil {
		return err
	}
	dt, err := sc.buf(rows * s.Heads)
	if err != nil {
		return err
	}
	for _, p := range []struct {
		out device.Buf
		w   device.Weight
	}{{z, L.inZ}, {xbc, L.inXBC}, {dt, L.inDt}} {
		if err := k.MatMul(p.out, in, rows, p.w); err != nil {
			return err
		}
	}
	if err := mk.MambaConv(s, xbc, xbc, L.convW, L.convB, states, batch); err != nil {
		return err
	}
	y, err := sc.buf(rows * I)
	if err != nil {
		return err
	}
	scratch, err := sc.buf(mk.MambaScanScratch(s, rows, len(batch.Slots)))
	if err != nil {
		return err
	}
	if err := mk.MambaScan(s, y, xbc, dt, device.MambaParams{A: L.a, D: L.d, DtBias: L.dtBias}, states, batch, scratch); err != nil {
		return err
	}
	sc.free(scratch)
	sc.free(dt)
	sc.free(xbc)
	if err := mk.GatedRMSNorm(y, y, z, L.gNorm, rows, I, c.Hybrid.NormGroup, c.RMSEps); err != nil {
		return err
	}
	sc.free(z)
	if err := k.MatMul(out, y, rows, L.ssmOut); err != nil {
		return err
	}
	sc.free(y)
	return nil
}

// hybridAttention is GQA without rotary embeddings, scaled by the
// architecture's attention scale, over layer l's KV pages.
func (m *Model) hybridAttention(sc *scope, pools *kv.Set, l int, seqs []Seq, in, out device.Buf, rows int) error {
	c, k, L := m.Config, m.k, &m.hy[l]
	q, err := sc.buf(rows * c.QRow())
	if err != nil {
		return err
	}
	kk, err := sc.buf(rows * c.KVRow())
	if err != nil {
		return err
	}
	vv, err := sc.buf(rows * c.KVRow())
	if err != nil {
		return err
	}
	for _, p := range []struct {
		out device.Buf
		w   device.Weight
	}{{q, L.wq}, {kk, L.wk}, {vv, L.wv}} {
		if err := k.MatMul(p.out, in, rows, p.w); err != nil {
			return err
		}
	}
	att, err := sc.buf(rows * c.QRow())
	if err != nil {
		return err
	}
	kvl, tp := pools.Layer(l), pools.Table(l)
	if tp < 0 {
		return fmt.Errorf("model: layer %d is an attention layer but the pools hold no KV for it", l)
	}
	off := 0
	for _, s := range seqs {
		n := len(s.Tokens)
		ks, vs := kk.Slice(off*c.KVRow(), n*c.KVRow()), vv.Slice(off*c.KVRow(), n*c.KVRow())
		if err := k.WriteKV(kvl, ks, vs, n, s.Pages[tp], s.Start); err != nil {
			return err
		}
		if err := k.Attention(att.Slice(off*c.QRow(), n*c.QRow()), q.Slice(off*c.QRow(), n*c.QRow()), n, c.Heads, kvl, s.Pages[tp], s.Start,
			device.AttnOpts{Scale: c.Hybrid.AttnScale}, m.attnScratch); err != nil {
			return err
		}
		off += n
	}
	sc.free(vv)
	sc.free(kk)
	sc.free(q)
	if err := k.MatMul(out, att, rows, L.wo); err != nil {
		return err
	}
	sc.free(att)
	return nil
}

// hybridFFN is layer l's feed-forward block over in's rows into out.
func (m *Model) hybridFFN(sc *scope, l int, in, out device.Buf, rows int) error {
	c, k, L := m.Config, m.k, &m.hy[l]
	u, err := sc.buf(rows * c.Intermediate)
	if err != nil {
		return err
	}
	if err := k.MatMul(u, in, rows, L.up); err != nil {
		return err
	}
	switch c.Hybrid.Layers[l].FFN {
	case FFNReLU2:
		if err := k.(device.Elementwise).ReLUSquare(u, u); err != nil {
			return err
		}
	case FFNSwiGLU:
		g, err := sc.buf(rows * c.Intermediate)
		if err != nil {
			return err
		}
		if err := k.MatMul(g, in, rows, L.gate); err != nil {
			return err
		}
		if err := k.SiLUMul(u, g, u); err != nil {
			return err
		}
		sc.free(g)
	default:
		return fmt.Errorf("model: layer %d: ffn %s is not run", l, c.Hybrid.Layers[l].FFN)
	}
	if err := k.MatMul(out, u, rows, L.down); err != nil {
		return err
	}
	sc.free(u)
	return nil
}
