package model

import (
	"encoding/binary"
	"math"

	"github.com/kvhost/kvhost/host/device"
	kcpu "github.com/kvhost/kvhost/kernels/cpu"
)

// ossExperts loads layer prefix p's experts as gpt-oss's MoE part:
// post_attention_norm, the router with its logit bias, top-K by logit with
// softmax over the selected, the clamped SwiGLU, per-expert biases on
// gate, up and down (through the ones column), no shared expert.
func ossExperts(b *Builder, p string, ew device.Elementwise, ones device.Weight) (*moePart, error) {
	c := b.C
	m := SWAOf(c).MoE
	f := &moePart{ones: ones, act: actSwiGLUOAI, alpha: m.Alpha, limit: m.Limit, width: c.Intermediate, eps: c.RMSEps, ew: ew,
		r: device.Router{Experts: m.Experts, TopK: m.TopK, Scoring: kcpu.ScoreSoftmaxTopK}}
	if err := f.moeKernels(b); err != nil {
		return nil, err
	}
	var err error
	if f.norm, err = b.Vector(p+"post_attention_norm.weight", c.Hidden); err != nil {
		return nil, err
	}
	if f.router, err = b.Matrix(p+"ffn_gate_inp.weight", m.Experts, c.Hidden); err != nil {
		return nil, err
	}
	if f.logitBias, err = b.Vector(p+"ffn_gate_inp.bias", m.Experts); err != nil {
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
