package model

import (
	"fmt"

	"github.com/kvhost/kvhost/host/device"
	kcpu "github.com/kvhost/kvhost/kernels/cpu"
)

// The hybrid models' layer parts (arch_hybrid.go): the Mamba-2 mixer,
// attention without rotary embeddings, and the squared-ReLU and SwiGLU
// MLPs, each adding its branch to the residual stream scaled by Granite's
// residual multiplier (1 for Nemotron-H).

var (
	_ Mixer = (*mambaPart)(nil)
	_ Mixer = (*hybridAttention)(nil)
	_ FFN   = (*hybridFFN)(nil)
)

// hybridHost is host-side scratch the Mamba parts of one model share:
// zeros to clear a new sequence's state.
type hybridHost struct {
	zeros []float32
}

// residual adds the branch b to x: x += residual_multiplier · b.
func residual(s *Step, h *Hybrid, x, b device.Buf) error {
	if h.ResidualScale == 1 {
		return s.K.Add(x, x, b)
	}
	return s.K.(device.Elementwise).AddScaled(x, x, b, h.ResidualScale)
}

// mambaPart is one Mamba-2 mixer over its layer's state slots
// (docs/architectures/mamba2-hybrids.md §1 and §5). A sequence whose
// forward starts at position 0 starts from a zero state: the part clears
// its slot first (a new request, or a preempted one recomputed from its
// prompt). Forked sequences (n > 1) start later, with the state the
// engine copied from their parent's slot.
type mambaPart struct {
	w    *hybridLayer
	h    *Hybrid
	host *hybridHost
}

func (p *mambaPart) Mix(s *Step, x, hb device.Buf) error {
	k, rows, c, L, sh := s.K, s.Rows, s.C, p.w, p.h.Mamba
	if err := k.RMSNorm(hb, x, L.norm, rows, c.Hidden, c.RMSEps); err != nil {
		return err
	}
	st, ok := s.Pools.State(s.Layer)
	if !ok {
		return fmt.Errorf("model: layer %d is a Mamba layer but the pools hold no state for it", s.Layer)
	}
	starts, slots := s.StateBatch(st.Pool)
	batch := device.MambaBatch{Starts: starts, Slots: slots}
	if !s.Decode() { // a decode row is never a sequence's first position
		for q, sq := range s.Seqs {
			if sq.Start != 0 {
				continue
			}
			if err := p.clear(s, st.Conv, st.ConvBytes, slots[q]); err != nil {
				return err
			}
			if err := p.clear(s, st.SSM, st.SSMBytes, slots[q]); err != nil {
				return err
			}
		}
	}
	mk := k.(device.Mamba)
	states := device.MambaStates{Conv: st.Conv, SSM: st.SSM, ConvType: st.ConvType, ConvBytes: st.ConvBytes, SSMBytes: st.SSMBytes}
	I, CD := sh.Inner(), sh.ConvDim()
	z, err := s.Buf(rows * I)
	if err != nil {
		return err
	}
	xbc, err := s.Buf(rows * CD)
	if err != nil {
		return err
	}
	dt, err := s.Buf(rows * sh.Heads)
	if err != nil {
		return err
	}
	for _, m := range [...]struct {
		out device.Buf
		w   device.Weight
	}{{z, L.inZ}, {xbc, L.inXBC}, {dt, L.inDt}} {
		if err := k.MatMul(m.out, hb, rows, m.w); err != nil {
			return err
		}
	}
	if err := mk.MambaConv(sh, xbc, xbc, L.convW, L.convB, states, batch); err != nil {
		return err
	}
	y, err := s.Buf(rows * I)
	if err != nil {
		return err
	}
	scratch, err := s.Buf(mk.MambaScanScratch(sh, rows, len(batch.Slots)))
	if err != nil {
		return err
	}
	if err := mk.MambaScan(sh, y, xbc, dt, device.MambaParams{A: L.a, D: L.d, DtBias: L.dtBias}, states, batch, scratch); err != nil {
		return err
	}
	s.Free(scratch)
	s.Free(dt)
	s.Free(xbc)
	if err := mk.GatedRMSNorm(y, y, z, L.gNorm, rows, I, p.h.NormGroup, c.RMSEps); err != nil {
		return err
	}
	s.Free(z)
	if err := k.MatMul(hb, y, rows, L.ssmOut); err != nil {
		return err
	}
	s.Free(y)
	return residual(s, p.h, x, hb)
}

// clear zeroes slot's unit bytes of a state span.
func (p *mambaPart) clear(s *Step, span device.Span, unit int64, slot int32) error {
	if unit%4 != 0 || slot < 0 || (int64(slot)+1)*unit > span.Bytes {
		return fmt.Errorf("model: layer %d: state slot %d of %d bytes is outside its pool of %d bytes", s.Layer, slot, unit, span.Bytes)
	}
	n := int(unit / 4)
	if len(p.host.zeros) < n {
		p.host.zeros = make([]float32, n)
	}
	return s.K.CopyFromHost(device.Buf{Ptr: span.Ptr + device.Ptr(int64(slot)*unit), N: n}, p.host.zeros[:n])
}

// hybridAttention is GQA without rotary embeddings, its scores scaled by
// the architecture's attention scale.
type hybridAttention struct {
	w *hybridLayer
	h *Hybrid
}

func (a *hybridAttention) Mix(s *Step, x, hb device.Buf) error {
	k, rows, c, L := s.K, s.Rows, s.C, a.w
	if err := k.RMSNorm(hb, x, L.norm, rows, c.Hidden, c.RMSEps); err != nil {
		return err
	}
	q, err := s.Buf(rows * c.QRow())
	if err != nil {
		return err
	}
	kk, err := s.Buf(rows * c.KVRow())
	if err != nil {
		return err
	}
	vv, err := s.Buf(rows * c.KVRow())
	if err != nil {
		return err
	}
	for _, p := range [...]struct {
		out device.Buf
		w   device.Weight
	}{{q, L.wq}, {kk, L.wk}, {vv, L.wv}} {
		if err := k.MatMul(p.out, hb, rows, p.w); err != nil {
			return err
		}
	}
	att, err := s.Buf(rows * c.QRow())
	if err != nil {
		return err
	}
	if err := s.Attend(att, q, kk, vv, c.Heads, device.AttnOpts{Scale: a.h.AttnScale}); err != nil {
		return err
	}
	s.Free(q)
	s.Free(kk)
	s.Free(vv)
	if err := k.MatMul(hb, att, rows, L.wo); err != nil {
		return err
	}
	s.Free(att)
	return residual(s, a.h, x, hb)
}

// hybridFFN is a layer's dense MLP: squared ReLU (Nemotron-H) or SwiGLU
// (Granite without experts), behind its own RMSNorm. Granite's MoE layers
// are the MoE part (hybridMoE).
type hybridFFN struct {
	w    *hybridLayer
	h    *Hybrid
	kind FFNKind
	norm device.Weight
}

func (f *hybridFFN) Forward(s *Step, x, hb device.Buf) error {
	k, rows, c, L := s.K, s.Rows, s.C, f.w
	if err := k.RMSNorm(hb, x, f.norm, rows, c.Hidden, c.RMSEps); err != nil {
		return err
	}
	u, err := s.Buf(rows * c.Intermediate)
	if err != nil {
		return err
	}
	if err := k.MatMul(u, hb, rows, L.up); err != nil {
		return err
	}
	switch f.kind {
	case FFNReLU2:
		if err := k.(device.Elementwise).ReLUSquare(u, u); err != nil {
			return err
		}
	case FFNSwiGLU:
		g, err := s.Buf(rows * c.Intermediate)
		if err != nil {
			return err
		}
		if err := k.MatMul(g, hb, rows, L.gate); err != nil {
			return err
		}
		if err := k.SiLUMul(u, g, u); err != nil {
			return err
		}
		s.Free(g)
	default:
		return fmt.Errorf("model: layer %d: ffn %s is not run", s.Layer, f.kind)
	}
	if err := k.MatMul(hb, u, rows, L.down); err != nil {
		return err
	}
	s.Free(u)
	return residual(s, f.h, x, hb)
}

// hybridMoE is a Granite MoE layer as the MoE part: top-k on the router's
// logits with softmax over the k chosen (llama.cpp's softmax gating with
// the weights renormalised is the same), SwiGLU experts, the shared_mlp
// (L.gate, L.up, L.down) as the shared expert, the residual multiplier.
func hybridMoE(b *Builder, L *hybridLayer, h *Hybrid, norm device.Weight) (*moePart, error) {
	c := b.C
	f := &moePart{norm: norm, router: L.router, r: device.Router{Experts: h.Experts, TopK: h.ExpertsUsed, Scoring: kcpu.ScoreSoftmaxTopK},
		width: h.ExpertFF, gate: L.gateExps, up: L.upExps, down: L.downExps, act: actSwiGLU,
		shared: c.Intermediate, shGate: L.gate, shUp: L.up, shDown: L.down, resScale: h.ResidualScale, eps: c.RMSEps}
	return f, f.moeKernels(b)
}
