package model

import (
	"math"

	"github.com/kvhost/kvhost/host/device"
	kcpu "github.com/kvhost/kvhost/kernels/cpu"
)

// attendFn stores a layer's new K/V rows and runs its attention with o:
// the eager forward over each sequence, or the batched decode step.
type attendFn func(q, kk, vv, att device.Buf, o device.AttnOpts) error

// customLayers reports whether the blocks are not Llama's (Gemma's
// sandwich norms and GeGLU, gpt-oss's experts): swaLayer runs them. A
// Mistral with a window is a Llama block with a windowed attention.
func (m *Model) customLayers() bool {
	s := m.Config.SWA
	return s != nil && (s.Gemma || s.MoE != nil)
}

// attnOpts is layer l's attention options, with its sinks when it has them.
func (m *Model) attnOpts(l int) device.AttnOpts {
	o := m.Config.AttnOpts(l)
	if m.swa != nil && m.swa.layers[l].sinks.Ptr != 0 {
		o.Sinks = m.swa.layers[l].sinks
	}
	return o
}

// layerRope is the rotary embedding of layer l: Gemma 3's sliding layers
// have their own.
func (m *Model) layerRope(l int) device.Rope {
	if m.swa != nil && m.swa.localRope != nil && m.Config.LayerWindow(l) > 0 {
		return m.swa.localRope
	}
	return m.rope
}

// embedScale multiplies the embeddings by √hidden (Gemma), in f32 as
// llama.cpp does (HF rounds the factor to the activation dtype first:
// docs/architectures/gemma2.md).
func (m *Model) embedScale(x device.Buf) error {
	if m.swa == nil || !m.Config.SWA.Gemma {
		return nil
	}
	return m.swa.ew.Scale(x, float32(math.Sqrt(float64(m.Config.Hidden))))
}

// finalSoftCap caps the logits (Gemma 2's final_logit_softcapping).
func (m *Model) finalSoftCap(logits device.Buf) error {
	if m.swa == nil || m.Config.SWA.FinalSoftCap <= 0 {
		return nil
	}
	return m.swa.ew.SoftCap(logits, m.Config.SWA.FinalSoftCap)
}

// swaLayer is one Gemma or gpt-oss block over rows tokens at positions.
func (m *Model) swaLayer(sc *scope, l int, x device.Buf, rows int, positions []int32, attend attendFn) error {
	c, k, L, S := m.Config, m.k, &m.layers[l], &m.swa.layers[l]
	h, q, kk, vv, att, err := m.attentionIn(sc, l, x, rows, positions)
	if err != nil {
		return err
	}
	if err := attend(q, kk, vv, att, m.attnOpts(l)); err != nil {
		return err
	}
	sc.free(q)
	sc.free(kk)
	sc.free(vv)
	if err := k.MatMul(h, att, rows, L.wo); err != nil {
		return err
	}
	sc.free(att)
	if S.bo.Ptr != 0 {
		if err := k.AddBias(h, S.bo, rows); err != nil {
			return err
		}
	}
	if c.SWA.Gemma {
		if err := k.RMSNorm(h, h, S.postAttnNorm, rows, c.Hidden, c.RMSEps); err != nil {
			return err
		}
	}
	if err := k.Add(x, x, h); err != nil {
		return err
	}
	if c.SWA.MoE != nil {
		err = m.ossExperts(sc, l, x, h, rows)
	} else {
		err = m.gemmaMLP(sc, l, x, h, rows)
	}
	if err != nil {
		return err
	}
	sc.free(h)
	return nil
}

// gemmaMLP: x += post_ffw_norm(down(gelu_tanh(gate(n))·up(n))), n =
// ffn_norm(x); h is scratch of rows × hidden.
func (m *Model) gemmaMLP(sc *scope, l int, x, h device.Buf, rows int) error {
	c, k, L, S := m.Config, m.k, &m.layers[l], &m.swa.layers[l]
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
	if err := m.swa.ew.GeGLUTanh(g, g, u); err != nil {
		return err
	}
	sc.free(u)
	if err := k.MatMul(h, g, rows, L.down); err != nil {
		return err
	}
	sc.free(g)
	if err := k.RMSNorm(h, h, S.postFfwNorm, rows, c.Hidden, c.RMSEps); err != nil {
		return err
	}
	return k.Add(x, x, h)
}

// ones fills a buffer of n ones (the input of the expert-bias matmul) by
// gathering row 0 of the 1×1 ones weight n times.
func (m *Model) ones(out device.Buf, n int) error {
	s := m.swa
	for len(s.zeros) < n {
		s.zeros = append(s.zeros, 0)
	}
	return m.k.Embedding(out, s.ones, s.zeros[:n])
}

// ossExperts is gpt-oss's MoE block: n = post_attention_norm(x), the
// router's top-K with a softmax over them, each token's experts run
// grouped by expert (gate and up with their biases, the clamped SwiGLU,
// down with its bias), weighted and summed back: x += Σ w·expert(n).
func (m *Model) ossExperts(sc *scope, l int, x, h device.Buf, rows int) error {
	c, k, S, ex := m.Config, m.k, &m.swa.layers[l], m.swa.ex
	moe := c.SWA.MoE
	E, K, f, d := moe.Experts, moe.TopK, c.Intermediate, c.Hidden
	if err := k.RMSNorm(h, x, S.postAttnNorm, rows, d, c.RMSEps); err != nil {
		return err
	}
	logits, err := sc.buf(rows * E)
	if err != nil {
		return err
	}
	if err := k.MatMul(logits, h, rows, S.router); err != nil {
		return err
	}
	if err := k.AddBias(logits, S.routerBias, rows); err != nil {
		return err
	}
	ids, err := sc.buf(rows * K)
	if err != nil {
		return err
	}
	wts, err := sc.buf(rows * K)
	if err != nil {
		return err
	}
	r := device.Router{Experts: E, TopK: K, Scoring: kcpu.ScoreSoftmaxTopK}
	if err := ex.RouteExperts(r, logits, rows, device.Weight{}, span(ids), wts); err != nil {
		return err
	}
	sc.free(logits)
	g := device.ExpertGroups{Experts: E, K: K}
	var arrays [4]device.Buf
	for i, n := range []int{E + 1, rows * K, rows * K, rows * K} {
		if arrays[i], err = sc.buf(n); err != nil {
			return err
		}
	}
	g.Offsets, g.Tokens, g.Slots, g.Weights = span(arrays[0]), span(arrays[1]), span(arrays[2]), arrays[3]
	if err := ex.GroupExperts(span(ids), wts, rows, g); err != nil {
		return err
	}
	sc.free(ids)
	sc.free(wts)
	n := rows * K
	xg, err := sc.buf(n * d)
	if err != nil {
		return err
	}
	if err := ex.GatherRowsAt(xg, h, d, g.Tokens, n); err != nil {
		return err
	}
	ones, err := sc.buf(n)
	if err != nil {
		return err
	}
	if err := m.ones(ones, n); err != nil {
		return err
	}
	gate, err := sc.buf(n * f)
	if err != nil {
		return err
	}
	up, err := sc.buf(n * f)
	if err != nil {
		return err
	}
	tmp, err := sc.buf(n * max(f, d))
	if err != nil {
		return err
	}
	// out = x·W_eᵀ + b_e for every grouped row (b_e by the ones matmul).
	expert := func(out, in device.Buf, w, b device.Weight, width int) error {
		if err := ex.ExpertMatMul(out, in, rows, w, g); err != nil {
			return err
		}
		t := tmp.Slice(0, n*width)
		if err := ex.ExpertMatMul(t, ones, rows, b, g); err != nil {
			return err
		}
		return k.Add(out, out, t)
	}
	if err := expert(gate, xg, S.gateExps, S.gateBias, f); err != nil {
		return err
	}
	if err := expert(up, xg, S.upExps, S.upBias, f); err != nil {
		return err
	}
	if err := m.swa.ew.SwiGLUOAI(gate, gate, up, moe.Alpha, moe.Limit); err != nil {
		return err
	}
	sc.free(up)
	if err := expert(xg, gate, S.downExps, S.downBias, d); err != nil {
		return err
	}
	sc.free(gate)
	sc.free(tmp)
	sc.free(ones)
	if err := ex.ScatterAdd(h, xg, d, g, rows, false); err != nil {
		return err
	}
	sc.free(xg)
	for _, a := range arrays {
		sc.free(a)
	}
	return k.Add(x, x, h)
}

// span views a float buffer as int32 device memory (same element size).
func span(b device.Buf) device.Span { return device.Span{Ptr: b.Ptr, Bytes: b.Bytes()} }
