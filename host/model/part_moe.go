package model

import (
	"fmt"

	"github.com/kvhost/kvhost/host/device"
)

var _ FFN = (*moePart)(nil)

// expertAct is what an expert computes between its gate/up and its down
// projections.
type expertAct uint8

const (
	actSwiGLU    expertAct = iota // silu(gate)·up (Qwen3-MoE, DeepSeek, Granite)
	actSwiGLUOAI                  // gpt-oss's clamped SwiGLU (alpha, limit)
)

// moePart is the one mixture-of-experts feed-forward part (Qwen3-MoE,
// DeepSeek-V2/V3, gpt-oss, Granite-4.0-H's MoE layers), over the device's
// Experts capability: RMSNorm, router logits (plus gpt-oss's logit bias),
// route (r: softmax, sigmoid or softmax over the selected, group limits,
// normalisation, scaling; DeepSeek-V3's selection-only bias), group the
// rows by expert so each expert's matrices are read once per step for all
// its rows, gather, gate and up (plus gpt-oss's per-expert biases), the
// activation, down (plus its bias), the weighted scatter-add onto the
// shared expert's output (DeepSeek's shared experts, Granite's shared_mlp;
// none for Qwen3-MoE and gpt-oss), and the residual add (scaled by
// Granite's residual multiplier). What differs by architecture is data in
// these fields, set by the loaders (loadMoE, ossExperts, hybridMoE); the
// stacked experts are GGUF {in, out, E} tensors as stored (Rows = experts
// × width), any dtype the device's MatMul runs (MXFP4 for gpt-oss).
//
// A per-expert bias is an E·out × 1 matrix multiplied by a column of ones
// (the 1×1 weight ones gathered once per grouped row), so one ExpertMatMul
// adds each grouped row's own expert's bias.
type moePart struct {
	norm      device.Weight
	router    device.Weight
	logitBias device.Weight // added to the router logits (gpt-oss); zero: none
	selBias   device.Weight // selection-only score bias (DeepSeek-V3); zero: none
	r         device.Router
	width     int // expert intermediate size

	gate, up, down             device.Weight
	gateBias, upBias, downBias device.Weight // zero: none (all or none)
	ones                       device.Weight // F32 1×1 holding 1, with the biases
	act                        expertAct
	alpha, limit               float32 // actSwiGLUOAI

	shared               int // shared expert width; 0: none
	shGate, shUp, shDown device.Weight
	resScale             float32 // x += resScale·branch; 0 and 1 are a plain add
	eps                  float32
	ex                   device.Experts
	ew                   device.Elementwise // actSwiGLUOAI and resScale need it
	zeros                []int32            // row ids gathering the ones column (grown, never shrunk)

	// ungrouped (benchmarks only) runs the rows one at a time: each token
	// reads its experts' matrices, the baseline grouping improves on.
	ungrouped bool
}

// moeKernels finds the capabilities part f needs on b's device, refusing
// a device without them.
func (f *moePart) moeKernels(b *Builder) error {
	ex, ok := b.Kernels().(device.Experts)
	if !ok {
		return fmt.Errorf("model: %s needs the mixture-of-experts kernels, which the %s device lacks (device.Experts)", b.C.Arch, b.m.dev.Info().Kind)
	}
	f.ex = ex
	if f.act == actSwiGLUOAI || (f.resScale != 0 && f.resScale != 1) {
		if f.ew, ok = b.Kernels().(device.Elementwise); !ok {
			return fmt.Errorf("model: %s needs the elementwise kernels, which the %s device lacks (device.Elementwise)", b.C.Arch, b.m.dev.Info().Kind)
		}
	}
	return nil
}

// Forward implements FFN.
func (f *moePart) Forward(s *Step, x, h device.Buf) error {
	d := s.C.Hidden
	if err := s.K.RMSNorm(h, x, f.norm, s.Rows, d, f.eps); err != nil {
		return err
	}
	if f.ungrouped && s.Rows > 1 {
		for i := range s.Rows {
			if err := f.experts(s, x.Slice(i*d, d), h.Slice(i*d, d), 1); err != nil {
				return err
			}
		}
		return nil
	}
	return f.experts(s, x, h, s.Rows)
}

// ints takes an activation of n int32 values (4 bytes each, as floats).
func ints(s *Step, n int) (device.Span, device.Buf, error) {
	b, err := s.Buf(n)
	return device.Span{Ptr: b.Ptr, Bytes: 4 * int64(max(n, 1))}, b, err
}

// span is the bytes of b.
func span(b device.Buf) device.Span { return device.Span{Ptr: b.Ptr, Bytes: 4 * int64(b.N)} }

// experts adds the layer's branch for the normed rows h to x.
func (f *moePart) experts(s *Step, x, h device.Buf, rows int) error {
	k, ek := s.K, f.ex
	E, K, d, w := f.r.Experts, f.r.TopK, s.C.Hidden, f.width
	n := rows * K
	logits, err := s.Buf(rows * E)
	if err != nil {
		return err
	}
	if err := k.MatMul(logits, h, rows, f.router); err != nil {
		return err
	}
	if f.logitBias.Ptr != 0 {
		if err := k.AddBias(logits, f.logitBias, rows); err != nil {
			return err
		}
	}
	ids, idsBuf, err := ints(s, n)
	if err != nil {
		return err
	}
	wts, err := s.Buf(n)
	if err != nil {
		return err
	}
	if err := ek.RouteExperts(f.r, logits, rows, f.selBias, ids, wts); err != nil {
		return err
	}
	s.Free(logits)
	g := device.ExpertGroups{Experts: E, K: K}
	var gb [3]device.Buf
	if g.Offsets, gb[0], err = ints(s, E+1); err != nil {
		return err
	}
	if g.Tokens, gb[1], err = ints(s, n); err != nil {
		return err
	}
	if g.Slots, gb[2], err = ints(s, n); err != nil {
		return err
	}
	if g.Weights, err = s.Buf(n); err != nil {
		return err
	}
	if err := ek.GroupExperts(ids, wts, rows, g); err != nil {
		return err
	}
	s.Free(idsBuf)
	s.Free(wts)
	xs, err := s.Buf(n * d)
	if err != nil {
		return err
	}
	if err := ek.GatherRowsAt(xs, h, d, g.Tokens, n); err != nil {
		return err
	}
	biased := f.gateBias.Ptr != 0
	var ones, tmp device.Buf
	if biased {
		if ones, err = s.Buf(n); err != nil {
			return err
		}
		if len(f.zeros) < n {
			f.zeros = make([]int32, n)
		}
		if err := k.Embedding(ones, f.ones, f.zeros[:n]); err != nil {
			return err
		}
	}
	gate, err := s.Buf(n * w)
	if err != nil {
		return err
	}
	up, err := s.Buf(n * w)
	if err != nil {
		return err
	}
	if biased {
		if tmp, err = s.Buf(n * max(w, d)); err != nil {
			return err
		}
	}
	if err := f.project(k, rows, g, gate, xs, f.gate, f.gateBias, ones, tmp, n*w); err != nil {
		return err
	}
	if err := f.project(k, rows, g, up, xs, f.up, f.upBias, ones, tmp, n*w); err != nil {
		return err
	}
	if f.act == actSwiGLUOAI {
		err = f.ew.SwiGLUOAI(gate, gate, up, f.alpha, f.limit)
	} else {
		err = k.SiLUMul(gate, gate, up)
	}
	if err != nil {
		return err
	}
	s.Free(up)
	if err := f.project(k, rows, g, xs, gate, f.down, f.downBias, ones, tmp, n*d); err != nil {
		return err
	}
	s.Free(gate)
	if biased {
		s.Free(tmp)
		s.Free(ones)
	}
	shared := f.shared > 0
	if shared {
		// The shared expert's output replaces h once h is read; the
		// routed sum accumulates onto it.
		if err := swiGLU(s, h, h, rows, f.shared, f.shGate, f.shUp, f.shDown); err != nil {
			return err
		}
	}
	if err := ek.ScatterAdd(h, xs, d, g, rows, shared); err != nil {
		return err
	}
	s.Free(xs)
	for _, b := range gb {
		s.Free(b)
	}
	s.Free(g.Weights)
	if f.resScale == 0 || f.resScale == 1 {
		return k.Add(x, x, h)
	}
	return f.ew.AddScaled(x, x, h, f.resScale)
}

// project computes out = in·W_eᵀ for every grouped row, plus b_e when the
// part has biases (through the ones column into the first tn floats of
// tmp).
func (f *moePart) project(k device.Kernels, rows int, g device.ExpertGroups, out, in device.Buf, w, b device.Weight, ones, tmp device.Buf, tn int) error {
	if err := f.ex.ExpertMatMul(out, in, rows, w, g); err != nil {
		return err
	}
	if b.Ptr == 0 {
		return nil
	}
	t := tmp.Slice(0, tn)
	if err := f.ex.ExpertMatMul(t, ones, rows, b, g); err != nil {
		return err
	}
	return k.Add(out, out, t)
}

// swiGLU computes out = down(silu(gate(h))·up(h)) for rows of width inter;
// out may be h (h is read before out is written).
func swiGLU(s *Step, out, h device.Buf, rows, inter int, gw, uw, dw device.Weight) error {
	k := s.K
	g, err := s.Buf(rows * inter)
	if err != nil {
		return err
	}
	u, err := s.Buf(rows * inter)
	if err != nil {
		return err
	}
	if err := k.MatMul(g, h, rows, gw); err != nil {
		return err
	}
	if err := k.MatMul(u, h, rows, uw); err != nil {
		return err
	}
	if err := k.SiLUMul(g, g, u); err != nil {
		return err
	}
	s.Free(u)
	if err := k.MatMul(out, g, rows, dw); err != nil {
		return err
	}
	s.Free(g)
	return nil
}
