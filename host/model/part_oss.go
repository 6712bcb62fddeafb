package model

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/kvhost/kvhost/host/device"
	kcpu "github.com/kvhost/kvhost/kernels/cpu"
)

var _ FFN = (*ossMoE)(nil)

// ossMoE is gpt-oss's mixture of experts: n = RMSNorm(x), the router's
// top-K logits (with its bias), softmax over the selected, each token's
// experts run grouped by expert — gate and up with their biases, the
// clamped SwiGLU, down with its bias — weighted and summed back into x.
// The experts are {in, out, E} stacks (Builder.Stacked); a bias is an E·out ×
// 1 matrix multiplied by a column of ones, so one ExpertMatMul adds each
// grouped row's own expert's bias.
type ossMoE struct {
	norm, router, routerBias   device.Weight
	gate, up, down             device.Weight
	gateBias, upBias, downBias device.Weight
	ones                       device.Weight // F32 1×1: the ones column's table
	r                          device.Router
	alpha, limit               float32
	inter                      int
	eps                        float32
	ew                         device.Elementwise
	ex                         device.Experts
	zeros                      []int32 // row ids gathering the ones column (grown, never shrunk)
}

// ossExperts loads layer prefix p's experts.
func ossExperts(b *Builder, p string, ew device.Elementwise, ones device.Weight) (*ossMoE, error) {
	c := b.C
	m := SWAOf(c).MoE
	ex, ok := b.Kernels().(device.Experts)
	if !ok {
		return nil, fmt.Errorf("model: %s needs the device's Experts kernels, which it lacks", c.Arch)
	}
	f := &ossMoE{ones: ones, alpha: m.Alpha, limit: m.Limit, inter: c.Intermediate, eps: c.RMSEps, ew: ew, ex: ex,
		r: device.Router{Experts: m.Experts, TopK: m.TopK, Scoring: kcpu.ScoreSoftmaxTopK}}
	var err error
	if f.norm, err = b.Vector(p+"post_attention_norm.weight", c.Hidden); err != nil {
		return nil, err
	}
	if f.router, err = b.Matrix(p+"ffn_gate_inp.weight", m.Experts, c.Hidden); err != nil {
		return nil, err
	}
	if f.routerBias, err = b.Vector(p+"ffn_gate_inp.bias", m.Experts); err != nil {
		return nil, err
	}
	for _, st := range []struct {
		dst        *device.Weight
		name       string
		rows, cols int
	}{
		{&f.gate, "ffn_gate_exps.weight", c.Intermediate, c.Hidden},
		{&f.up, "ffn_up_exps.weight", c.Intermediate, c.Hidden},
		{&f.down, "ffn_down_exps.weight", c.Hidden, c.Intermediate},
		{&f.gateBias, "ffn_gate_exps.bias", c.Intermediate, 1},
		{&f.upBias, "ffn_up_exps.bias", c.Intermediate, 1},
		{&f.downBias, "ffn_down_exps.bias", c.Hidden, 1},
	} {
		if st.cols == 1 {
			*st.dst, err = b.stackedBias(p+st.name, m.Experts, st.rows)
		} else {
			*st.dst, err = b.Stacked(p+st.name, m.Experts, st.rows, st.cols)
		}
		if err != nil {
			return nil, err
		}
	}
	return f, nil
}

// Forward allocates, after the caller's h: the router logits, ids and
// weights (freed once grouped), the group arrays, the gathered rows, the
// ones column, gate, up and a bias scratch; it frees them all.
func (f *ossMoE) Forward(s *Step, x, h device.Buf) error {
	k, rows, d := s.K, s.Rows, s.C.Hidden
	E, K, fi := f.r.Experts, f.r.TopK, f.inter
	if err := k.RMSNorm(h, x, f.norm, rows, d, f.eps); err != nil {
		return err
	}
	logits, err := s.Buf(rows * E)
	if err != nil {
		return err
	}
	if err := k.MatMul(logits, h, rows, f.router); err != nil {
		return err
	}
	if err := k.AddBias(logits, f.routerBias, rows); err != nil {
		return err
	}
	ids, err := s.Buf(rows * K)
	if err != nil {
		return err
	}
	wts, err := s.Buf(rows * K)
	if err != nil {
		return err
	}
	if err := f.ex.RouteExperts(f.r, logits, rows, device.Weight{}, span(ids), wts); err != nil {
		return err
	}
	s.Free(logits)
	n := rows * K
	var arrays [4]device.Buf
	for i, size := range [4]int{E + 1, n, n, n} {
		if arrays[i], err = s.Buf(size); err != nil {
			return err
		}
	}
	g := device.ExpertGroups{Experts: E, K: K, Offsets: span(arrays[0]), Tokens: span(arrays[1]), Slots: span(arrays[2]), Weights: arrays[3]}
	if err := f.ex.GroupExperts(span(ids), wts, rows, g); err != nil {
		return err
	}
	s.Free(ids)
	s.Free(wts)
	xg, err := s.Buf(n * d)
	if err != nil {
		return err
	}
	if err := f.ex.GatherRowsAt(xg, h, d, g.Tokens, n); err != nil {
		return err
	}
	ones, err := s.Buf(n)
	if err != nil {
		return err
	}
	if len(f.zeros) < n {
		f.zeros = make([]int32, n)
	}
	if err := k.Embedding(ones, f.ones, f.zeros[:n]); err != nil {
		return err
	}
	gate, err := s.Buf(n * fi)
	if err != nil {
		return err
	}
	up, err := s.Buf(n * fi)
	if err != nil {
		return err
	}
	tmp, err := s.Buf(n * max(fi, d))
	if err != nil {
		return err
	}
	if err := f.expert(k, rows, g, gate, xg, f.gate, f.gateBias, ones, tmp.Slice(0, n*fi)); err != nil {
		return err
	}
	if err := f.expert(k, rows, g, up, xg, f.up, f.upBias, ones, tmp.Slice(0, n*fi)); err != nil {
		return err
	}
	if err := f.ew.SwiGLUOAI(gate, gate, up, f.alpha, f.limit); err != nil {
		return err
	}
	s.Free(up)
	if err := f.expert(k, rows, g, xg, gate, f.down, f.downBias, ones, tmp.Slice(0, n*d)); err != nil {
		return err
	}
	s.Free(gate)
	s.Free(tmp)
	s.Free(ones)
	if err := f.ex.ScatterAdd(h, xg, d, g, rows, false); err != nil {
		return err
	}
	s.Free(xg)
	for _, a := range arrays {
		s.Free(a)
	}
	return k.Add(x, x, h)
}

// expert computes out = in·W_eᵀ + b_e for every grouped row (b_e through
// the ones column into tmp).
func (f *ossMoE) expert(k device.Kernels, rows int, g device.ExpertGroups, out, in device.Buf, w, b device.Weight, ones, tmp device.Buf) error {
	if err := f.ex.ExpertMatMul(out, in, rows, w, g); err != nil {
		return err
	}
	if err := f.ex.ExpertMatMul(tmp, ones, rows, b, g); err != nil {
		return err
	}
	return k.Add(out, out, tmp)
}

// stackedBias loads n expert biases of rows values (GGUF dims {rows, n})
// as one F32 weight of n·rows rows of one column (Builder.Stacked is the
// matrices' counterpart).
func (b *Builder) stackedBias(name string, n, rows int) (device.Weight, error) {
	b.tensors = append(b.tensors, TensorShape{Name: name, Rows: n * rows, Cols: 1})
	if b.u == nil {
		return b.dryWeight(n*rows, 1), nil
	}
	return b.u.shaped(name, []int{rows, n}, n*rows, 1, true)
}

// ones is the 1×1 F32 weight holding 1.
func (b *Builder) ones() (device.Weight, error) {
	b.tensors = append(b.tensors, TensorShape{Name: "moe.ones", Rows: 1, Cols: 1, Vector: true})
	if b.u == nil {
		return b.dryWeight(1, 1), nil
	}
	one := make([]byte, 4)
	binary.LittleEndian.PutUint32(one, math.Float32bits(1))
	return b.u.put("moe.ones", one, device.Weight{Type: device.F32, Rows: 1, Cols: 1, Bytes: 4})
}
