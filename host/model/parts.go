package model

import (
	"github.com/kvhost/kvhost/host/device"
)

// The parts the Llama family is made of, written once for the eager
// forward and the captured decode step (Step). Other architectures reuse
// them with their fields set (a window, a soft cap, sinks, a per-layer
// rope) or add their own Mixer and FFN types beside them.

var (
	_ Mixer = (*attention)(nil)
	_ FFN   = (*denseFFN)(nil)
)

// attention is multi-head attention with grouped KV heads: input RMSNorm,
// q/k/v projections (optional biases and per-head q/k RMSNorms), rotary
// embedding, paged attention over the layer's cache, output projection and
// residual add.
type attention struct {
	norm           device.Weight
	wq, wk, wv, wo device.Weight
	bq, bk, bv     device.Weight // zero when the architecture has none
	qNorm, kNorm   device.Weight // zero when the architecture has none
	rope           device.Rope
	heads, kvHeads int
	headDim        int // q and k per head
	vHeadDim       int // v per head
	eps            float32
	opts           device.AttnOpts // Scale, and Window/SoftCap/Sinks where the layer has them
	bo             device.Weight   // output bias (gpt-oss); zero when none
	post           device.Weight   // post-attention RMSNorm of the branch (Gemma); zero when none
}

// Mix allocates q, k, v and the attention output after the caller's h, in
// that order, and frees them before returning: the order plan's dry run
// and the graph pool replay see (TestPlanMatchesServe).
func (a *attention) Mix(s *Step, x, h device.Buf) error {
	k, rows, hidden := s.K, s.Rows, s.C.Hidden
	if err := k.RMSNorm(h, x, a.norm, rows, hidden, a.eps); err != nil {
		return err
	}
	q, err := s.Buf(rows * a.heads * a.headDim)
	if err != nil {
		return err
	}
	kk, err := s.Buf(rows * a.kvHeads * a.headDim)
	if err != nil {
		return err
	}
	vv, err := s.Buf(rows * a.kvHeads * a.vHeadDim)
	if err != nil {
		return err
	}
	if err := s.matMuls(h, []device.Buf{q, kk, vv}, []device.Weight{a.wq, a.wk, a.wv}); err != nil {
		return err
	}
	for _, p := range [...]struct {
		out device.Buf
		b   device.Weight
	}{{q, a.bq}, {kk, a.bk}, {vv, a.bv}} {
		if p.b.Ptr != 0 {
			if err := k.AddBias(p.out, p.b, rows); err != nil {
				return err
			}
		}
	}
	if a.qNorm.Ptr != 0 {
		if err := k.RMSNorm(q, q, a.qNorm, rows*a.heads, a.headDim, a.eps); err != nil {
			return err
		}
		if err := k.RMSNorm(kk, kk, a.kNorm, rows*a.kvHeads, a.headDim, a.eps); err != nil {
			return err
		}
	}
	if err := k.ApplyRope(a.rope, q, rows, a.heads, s.Positions); err != nil {
		return err
	}
	if err := k.ApplyRope(a.rope, kk, rows, a.kvHeads, s.Positions); err != nil {
		return err
	}
	att, err := s.Buf(rows * a.heads * a.vHeadDim)
	if err != nil {
		return err
	}
	if err := s.Attend(att, q, kk, vv, a.heads, a.opts); err != nil {
		return err
	}
	s.Free(q)
	s.Free(kk)
	s.Free(vv)
	if err := k.MatMul(h, att, rows, a.wo); err != nil {
		return err
	}
	s.Free(att)
	if a.bo.Ptr != 0 {
		if err := k.AddBias(h, a.bo, rows); err != nil {
			return err
		}
	}
	if a.post.Ptr != 0 {
		if err := k.RMSNorm(h, h, a.post, rows, hidden, a.eps); err != nil {
			return err
		}
	}
	return k.Add(x, x, h)
}

// denseFFN is the gated MLP: RMSNorm, gate and up projections, SiLU(gate)
// × up, down projection, residual add.
type denseFFN struct {
	norm, gate, up, down device.Weight
	inter                int
	eps                  float32
	geglu                device.Elementwise // set: GELU-tanh(gate) × up (Gemma) instead of SiLU
	post                 device.Weight      // post-MLP RMSNorm of the branch (Gemma); zero when none
}

// Forward allocates gate then up after the caller's h and frees them.
func (f *denseFFN) Forward(s *Step, x, h device.Buf) error {
	k, rows := s.K, s.Rows
	if err := k.RMSNorm(h, x, f.norm, rows, s.C.Hidden, f.eps); err != nil {
		return err
	}
	g, err := s.Buf(rows * f.inter)
	if err != nil {
		return err
	}
	u, err := s.Buf(rows * f.inter)
	if err != nil {
		return err
	}
	if err := s.matMuls(h, []device.Buf{g, u}, []device.Weight{f.gate, f.up}); err != nil {
		return err
	}
	if f.geglu != nil {
		err = f.geglu.GeGLUTanh(g, g, u)
	} else {
		err = k.SiLUMul(g, g, u)
	}
	if err != nil {
		return err
	}
	s.Free(u)
	if err := k.MatMul(h, g, rows, f.down); err != nil {
		return err
	}
	s.Free(g)
	if f.post.Ptr != 0 {
		if err := k.RMSNorm(h, h, f.post, rows, s.C.Hidden, f.eps); err != nil {
			return err
		}
	}
	return k.Add(x, x, h)
}
