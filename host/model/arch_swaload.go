package model

import (
	"encoding/binary"
	"fmt"
	"math"
	"strings"

	"github.com/kvhost/kvhost/host/device"
	kcpu "github.com/kvhost/kvhost/kernels/cpu"
)

// swaWeights are the weights the sliding-window family adds to a Llama
// block, and what its forward prepares once: the sliding layers' rope, a
// column of ones for gpt-oss's expert biases.
type swaWeights struct {
	layers    []swaLayer
	localRope device.Rope // nil: every layer rotates with Model.rope
	ew        device.Elementwise
	ex        device.Experts // nil unless MoE
	ones      device.Weight  // MoE: F32 [1, 1]: the input of the bias matmul
	zeros     []int32        // MoE: row ids gathering ones (grown, never shrunk)
}

// swaLayer is one block's extra weights. Gemma: the post-attention and
// post-MLP norms. gpt-oss: the output bias, the sinks, the router and the
// experts (gate, up, down as {in, out, E} stacks, biases as E·out single
// column matrices multiplied by the ones row, so one ExpertMatMul adds each
// grouped row's expert bias).
type swaLayer struct {
	postAttnNorm, postFfwNorm  device.Weight
	bo, sinks                  device.Weight
	router, routerBias         device.Weight
	gateExps, upExps, downExps device.Weight
	gateBias, upBias, downBias device.Weight
}

func (s *swaWeights) all() []device.Weight {
	if s == nil {
		return nil
	}
	out := []device.Weight{s.ones}
	for _, l := range s.layers {
		out = append(out, l.postAttnNorm, l.postFfwNorm, l.bo, l.sinks, l.router, l.routerBias,
			l.gateExps, l.upExps, l.downExps, l.gateBias, l.upBias, l.downBias)
	}
	return out
}

// buildSWA uploads the family's extra weights after build's Llama ones.
func (m *Model) buildSWA(u *uploader) error {
	c := m.Config
	s := c.SWA
	if s == nil {
		return nil
	}
	w := &swaWeights{layers: make([]swaLayer, c.Layers)}
	m.swa = w
	var ok bool
	if s.Gemma || s.MoE != nil || s.FinalSoftCap > 0 {
		if w.ew, ok = m.k.(device.Elementwise); !ok {
			return fmt.Errorf("model: %s needs the device's Elementwise kernels, which it lacks", c.Arch)
		}
	}
	if s.LocalRope != nil {
		var err error
		if w.localRope, err = m.k.NewRope(*s.LocalRope); err != nil {
			return err
		}
	}
	if s.MoE != nil {
		if w.ex, ok = m.k.(device.Experts); !ok {
			return fmt.Errorf("model: %s needs the device's Experts kernels, which it lacks", c.Arch)
		}
		one := make([]byte, 4)
		binary.LittleEndian.PutUint32(one, math.Float32bits(1))
		var err error
		if w.ones, err = u.put("moe.ones", one, device.Weight{Type: device.F32, Rows: 1, Cols: 1, Bytes: 4}); err != nil {
			return err
		}
	}
	for i := range w.layers {
		L, p := &w.layers[i], fmt.Sprintf("blk.%d.", i)
		var err error
		if s.Gemma || s.MoE != nil { // gpt-oss: the MoE's input norm
			if L.postAttnNorm, err = u.vector(p+"post_attention_norm.weight", c.Hidden, true); err != nil {
				return err
			}
		}
		if s.Gemma {
			if L.postFfwNorm, err = u.vector(p+"post_ffw_norm.weight", c.Hidden, true); err != nil {
				return err
			}
		}
		if s.MoE == nil {
			continue
		}
		e, f := s.MoE.Experts, c.Intermediate
		steps := []struct {
			dst        *device.Weight
			name       string
			rows, cols int
			kind       int // 0 vector, 1 matrix, 2 expert stack, 3 expert bias
		}{
			{&L.bo, "attn_output.bias", 1, c.Hidden, 0},
			{&L.sinks, "attn_sinks.weight", 1, c.Heads, 0},
			{&L.router, "ffn_gate_inp.weight", e, c.Hidden, 1},
			{&L.routerBias, "ffn_gate_inp.bias", 1, e, 0},
			{&L.gateExps, "ffn_gate_exps.weight", f, c.Hidden, 2},
			{&L.upExps, "ffn_up_exps.weight", f, c.Hidden, 2},
			{&L.downExps, "ffn_down_exps.weight", c.Hidden, f, 2},
			{&L.gateBias, "ffn_gate_exps.bias", f, 1, 3},
			{&L.upBias, "ffn_up_exps.bias", f, 1, 3},
			{&L.downBias, "ffn_down_exps.bias", c.Hidden, 1, 3},
		}
		for _, st := range steps {
			switch st.kind {
			case 0:
				*st.dst, err = u.vector(p+st.name, st.cols, true)
			case 1:
				*st.dst, err = u.matrix(p+st.name, st.rows, st.cols, true)
			default:
				*st.dst, err = u.experts(p+st.name, e, st.rows, st.cols)
			}
			if err != nil {
				return err
			}
		}
	}
	return nil
}

// experts uploads a stack of e matrices of rows × cols (GGUF dims {cols,
// rows, e}; an expert bias is {rows, e}, uploaded as e·rows × 1) as one
// Weight of e·rows rows. MXFP4 stacks arrive decoded to BF16, which holds
// every MXFP4 value exactly (ggufSource.tensor).
func (u *uploader) experts(name string, e, rows, cols int) (device.Weight, error) {
	raw, typ, dims, ok, err := u.src.tensor(name)
	if err != nil {
		return device.Weight{}, err
	}
	if !ok {
		return device.Weight{}, fmt.Errorf("model: tensor %s is missing", name)
	}
	bias := cols == 1
	want := []int{cols, rows, e}
	if bias {
		want = []int{rows, e}
	}
	if fmt.Sprint(dims) != fmt.Sprint(want) {
		return device.Weight{}, fmt.Errorf("model: tensor %s has shape %v, want %v (row length first)", name, dims, want)
	}
	if bias {
		if typ != device.F32 || len(raw) != 4*rows*e {
			return device.Weight{}, fmt.Errorf("model: expert bias %s is %s of %d bytes, want f32 of %d", name, typ, len(raw), 4*rows*e)
		}
		return u.put(name, raw, device.Weight{Type: device.F32, Rows: e * rows, Cols: 1, Bytes: int64(len(raw))})
	}
	rb, err := kcpu.DType(typ).RowBytes(cols)
	if err != nil {
		return device.Weight{}, fmt.Errorf("model: tensor %s: %w", name, err)
	}
	if int64(len(raw)) != int64(rb)*int64(rows*e) {
		return device.Weight{}, fmt.Errorf("model: tensor %s holds %d bytes, %s [%d %d %d] needs %d", name, len(raw), typ, cols, rows, e, int64(rb)*int64(rows*e))
	}
	return u.put(name, raw, device.Weight{Type: typ, Rows: e * rows, Cols: cols, Bytes: int64(len(raw))})
}

// decodeMXFP4 turns GGML MXFP4 blocks (17 bytes per 32 values) into BF16,
// exact: every E2M1 value times a power of two has a one-bit mantissa.
func decodeMXFP4(raw []byte, n int) ([]byte, error) {
	f := make([]float32, n)
	if err := kcpu.DequantizeMXFP4(f, raw); err != nil {
		return nil, err
	}
	out := make([]byte, 2*n)
	for i, v := range f {
		binary.LittleEndian.PutUint16(out[2*i:], kcpu.F32ToBF16(v))
	}
	return out, nil
}

// gemmaHFName is hfName for Gemma checkpoints, whose post_attention_layernorm
// follows attention (GGUF post_attention_norm) rather than feeding the MLP
// as in Llama (docs/architectures/gemma2.md, "name clash").
func gemmaHFName(canon string) string {
	rest, ok := strings.CutPrefix(canon, "blk.")
	if !ok {
		return hfName(canon)
	}
	layer, part, _ := strings.Cut(rest, ".")
	switch part {
	case "post_attention_norm.weight":
		return "model.layers." + layer + ".post_attention_layernorm.weight"
	case "ffn_norm.weight":
		return "model.layers." + layer + ".pre_feedforward_layernorm.weight"
	case "post_ffw_norm.weight":
		return "model.layers." + layer + ".post_feedforward_layernorm.weight"
	}
	return hfName(canon)
}

// plusOne turns an HF Gemma norm weight w into the 1 + w the forward
// multiplies by (the GGUF converter bakes the same in), as F32.
func plusOne(raw []byte, typ device.DType) ([]byte, device.DType) {
	vals, err := toF32(raw, typ)
	if err != nil {
		return raw, typ // a quantized norm: the uploader refuses it by type
	}
	out := make([]byte, 4*len(vals))
	for i, v := range vals {
		binary.LittleEndian.PutUint32(out[4*i:], math.Float32bits(1+v))
	}
	return out, device.F32
}
