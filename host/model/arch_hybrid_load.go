package model

import (
	"encoding/binary"
	"fmt"
	"math"
	"strings"

	"github.com/kvhost/kvhost/host/device"
	kcpu "github.com/kvhost/kvhost/kernels/cpu"
)

// hybridLayer holds one hybrid layer's weights; the parts it lacks are
// zero Weights.
type hybridLayer struct {
	norm, ffnNorm device.Weight // ffnNorm: Granite's post-mixer norm
	// Mamba-2: in_proj as three row views (z, xBC, dt) of ssmIn.
	ssmIn, inZ, inXBC, inDt           device.Weight
	convW, convB, a, d, dtBias, gNorm device.Weight
	ssmOut                            device.Weight
	// attention
	wq, wk, wv, wo device.Weight
	// MLP (SwiGLU gate and up may be row views of gateUp, HF Granite's
	// fused shared_mlp.input_linear); with experts it is the shared MLP
	gateUp, gate, up, down device.Weight
	// experts: the router [E, hidden] and the stacked expert matrices
	// (E × ff rows of hidden for gate and up, E × hidden rows of ff for down)
	router, gateExps, upExps, downExps device.Weight
}

// rowView is rows [r0, r1) of w, sharing its memory (no copy).
func rowView(w device.Weight, r0, r1 int) (device.Weight, error) {
	rb, err := kcpu.DType(w.Type).RowBytes(w.Cols)
	if err != nil {
		return device.Weight{}, err
	}
	return device.Weight{Ptr: w.Ptr + device.Ptr(int64(r0)*int64(rb)), Type: w.Type, Rows: r1 - r0, Cols: w.Cols, Bytes: int64(r1-r0) * int64(rb)}, nil
}

// hybridHFName maps a canonical tensor name to Nemotron-H's (backbone.*)
// or Granite-4.0-H's (model.*) Hugging Face name; the Mamba tensors are
// named alike in both, under mixer. or mamba.
func hybridHFName(arch, canon string) string {
	nem := arch == "nemotron_h"
	switch canon {
	case "token_embd.weight":
		if nem {
			return "backbone.embeddings.weight"
		}
		return "model.embed_tokens.weight"
	case "output_norm.weight":
		if nem {
			return "backbone.norm_f.weight"
		}
		return "model.norm.weight"
	case "output.weight":
		return "lm_head.weight"
	}
	rest, ok := strings.CutPrefix(canon, "blk.")
	if !ok {
		return canon
	}
	layer, part, _ := strings.Cut(rest, ".")
	mamba := map[string]string{
		"ssm_in.weight": "in_proj.weight", "ssm_conv1d.weight": "conv1d.weight", "ssm_conv1d.bias": "conv1d.bias",
		"ssm_dt.bias": "dt_bias", "ssm_a": "A_log", "ssm_d": "D", "ssm_norm.weight": "norm.weight", "ssm_out.weight": "out_proj.weight",
	}
	attn := map[string]string{
		"attn_q.weight": "q_proj.weight", "attn_k.weight": "k_proj.weight", "attn_v.weight": "v_proj.weight", "attn_output.weight": "o_proj.weight",
	}
	if nem {
		p := "backbone.layers." + layer + "."
		if part == "attn_norm.weight" {
			return p + "norm.weight"
		}
		if n, ok := mamba[part]; ok {
			return p + "mixer." + n
		}
		if n, ok := attn[part]; ok {
			return p + "mixer." + n
		}
		return p + "mixer." + map[string]string{"ffn_up.weight": "up_proj.weight", "ffn_down.weight": "down_proj.weight"}[part]
	}
	p := "model.layers." + layer + "."
	if n, ok := mamba[part]; ok {
		return p + "mamba." + n
	}
	if n, ok := attn[part]; ok {
		return p + "self_attn." + n
	}
	return p + map[string]string{
		"attn_norm.weight": "input_layernorm.weight", "ffn_norm.weight": "post_attention_layernorm.weight",
		"ffn_gate_up.weight": "shared_mlp.input_linear.weight", "ffn_down.weight": "shared_mlp.output_linear.weight",
		// the MoE sizes (GraniteMoeHybridMoE): the shared MLP's down, the
		// router, the experts' fused gate/up [E, 2·ff, hidden] (gate rows,
		// then up rows, per expert; hybridHFRead splits it) and down
		"ffn_down_shexp.weight": "shared_mlp.output_linear.weight", "ffn_gate_inp.weight": "block_sparse_moe.router.layer.weight",
		"ffn_up_exps.weight": "block_sparse_moe.input_linear.weight", "ffn_down_exps.weight": "block_sparse_moe.output_linear.weight",
	}[part]
}

// f32Values reads a tensor of n values in any shape (GGUF keeps ssm_a as
// {1, H}, HF as [H]) as float32.
func (u *uploader) f32Values(name string, n int, required bool) ([]float32, bool, error) {
	raw, typ, dims, ok, err := u.src.tensor(name)
	if err != nil || !ok {
		if err == nil && required {
			err = fmt.Errorf("model: tensor %s is missing", name)
		}
		return nil, false, err
	}
	count := 1
	for _, d := range dims {
		count *= d
	}
	if count != n {
		return nil, false, fmt.Errorf("model: tensor %s has shape %v (%d values), want %d", name, dims, count, n)
	}
	out := make([]float32, n)
	switch typ {
	case device.F32:
		if len(raw) != 4*n {
			return nil, false, fmt.Errorf("model: tensor %s holds %d bytes, want %d", name, len(raw), 4*n)
		}
		for i := range out {
			out[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
		}
	case device.F16, device.BF16:
		if len(raw) != 2*n {
			return nil, false, fmt.Errorf("model: tensor %s holds %d bytes, want %d", name, len(raw), 2*n)
		}
		for i := range out {
			h := binary.LittleEndian.Uint16(raw[2*i:])
			if typ == device.F16 {
				out[i] = kcpu.F16ToF32(h)
			} else {
				out[i] = kcpu.BF16ToF32(h)
			}
		}
	default:
		return nil, false, fmt.Errorf("model: tensor %s stored as %s; only f32, f16 and bf16 are supported for it", name, typ)
	}
	return out, true, nil
}

// putF32 uploads values as an F32 rows × cols weight.
func (u *uploader) putF32(name string, v []float32, rows, cols int) (device.Weight, error) {
	b := make([]byte, 4*len(v))
	for i, f := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(f))
	}
	return u.put(name, b, device.Weight{Type: device.F32, Rows: rows, Cols: cols, Bytes: int64(len(b))})
}

// f32 loads a tensor of rows × cols values in any shape as F32 (the Mamba
// kernels read conv weights and per-head vectors as f32; GGUF keeps ssm_a
// as {1, H}), after f when set; absent and not required gives a zero
// Weight.
func (b *Builder) f32(name string, rows, cols int, required bool, f func([]float32)) (device.Weight, error) {
	// Listed as a vector of rows·cols f32 values: what it costs loaded.
	shape := TensorShape{Name: name, Rows: 1, Cols: rows * cols, Vector: true}
	if b.u == nil {
		if !required { // a dry build reads no file: optional means absent
			return device.Weight{}, nil
		}
		b.tensors = append(b.tensors, shape)
		return b.dryWeight(rows, cols), nil
	}
	v, ok, err := b.u.f32Values(name, rows*cols, required)
	if err != nil || !ok {
		return device.Weight{}, err
	}
	if f != nil {
		f(v)
	}
	b.tensors = append(b.tensors, shape)
	return b.u.putF32(name, v, rows, cols)
}

// hybridLayers loads a hybrid model's layers and returns their parts.
func hybridLayers(b *Builder) ([]Layer, error) {
	c, h := b.C, b.C.Hybrid()
	s := h.Mamba
	fromHF := false
	if b.u != nil {
		_, fromHF = b.u.src.(hfSource)
	}
	if h.Count(MixerMamba) > 0 {
		if _, ok := b.Kernels().(device.Mamba); !ok {
			return nil, fmt.Errorf("model: %s needs the Mamba kernels, which the %s device lacks", c.Arch, b.m.dev.Info().Kind)
		}
	}
	if _, ok := b.Kernels().(device.Elementwise); !ok {
		return nil, fmt.Errorf("model: %s needs the elementwise kernels (squared ReLU, scaling), which the %s device lacks", c.Arch, b.m.dev.Info().Kind)
	}
	if h.Count(MixerAttention) > 0 {
		b.AttnShape(c.AttnShape())
	}
	// Granite's embedding multiplier and 1/logits_scaling (1 for Nemotron-H).
	var trunk Trunk
	if h.EmbedMult != 1 {
		trunk.EmbedScale = h.EmbedMult
	}
	if h.LogitDiv != 1 {
		trunk.LogitScale = 1 / h.LogitDiv
	}
	if err := b.SetTrunk(trunk); err != nil {
		return nil, err
	}
	granite := c.Arch == "granitehybrid"
	host := &hybridHost{}
	out := make([]Layer, c.Layers)
	var err error
	mat := func(dst *device.Weight, name string, rows, cols int) {
		if err == nil {
			*dst, err = b.Matrix(name, rows, cols)
		}
	}
	vec := func(dst *device.Weight, name string, n int) {
		if err == nil {
			*dst, err = b.Vector(name, n)
		}
	}
	view := func(dst *device.Weight, w device.Weight, r0, r1 int) {
		if err == nil {
			*dst, err = rowView(w, r0, r1)
		}
	}
	// Granite's SwiGLU MLP (the shared expert beside MoE: sfx "_shexp");
	// HF fuses gate and up into shared_mlp.input_linear [2·ff, hidden]
	// (gate rows first), loaded once and viewed as two.
	swiglu := func(L *hybridLayer, p, sfx string) {
		if fromHF {
			mat(&L.gateUp, p+"ffn_gate_up.weight", 2*c.Intermediate, c.Hidden)
			view(&L.gate, L.gateUp, 0, c.Intermediate)
			view(&L.up, L.gateUp, c.Intermediate, 2*c.Intermediate)
		} else {
			mat(&L.gate, p+"ffn_gate"+sfx+".weight", c.Intermediate, c.Hidden)
			mat(&L.up, p+"ffn_up"+sfx+".weight", c.Intermediate, c.Hidden)
		}
		mat(&L.down, p+"ffn_down"+sfx+".weight", c.Hidden, c.Intermediate)
	}
	for i, kind := range h.Layers {
		L, p := &hybridLayer{}, fmt.Sprintf("blk.%d.", i)
		vec(&L.norm, p+"attn_norm.weight", c.Hidden)
		if granite {
			vec(&L.ffnNorm, p+"ffn_norm.weight", c.Hidden)
		}
		switch kind.Mixer {
		case MixerMamba:
			I, CD, H := s.Inner(), s.ConvDim(), s.Heads
			mat(&L.ssmIn, p+"ssm_in.weight", I+CD+H, c.Hidden)
			view(&L.inZ, L.ssmIn, 0, I)
			view(&L.inXBC, L.ssmIn, I, I+CD)
			view(&L.inDt, L.ssmIn, I+CD, I+CD+H)
			f32 := func(dst *device.Weight, name string, rows, cols int, need bool, f func([]float32)) {
				if err == nil {
					*dst, err = b.f32(p+name, rows, cols, need, f)
				}
			}
			f32(&L.convW, "ssm_conv1d.weight", CD, s.ConvKernel, true, nil)
			f32(&L.convB, "ssm_conv1d.bias", 1, CD, h.ConvBias, nil)
			var negExp func([]float32)
			if fromHF { // HF keeps A_log; GGUF keeps A = −exp(A_log)
				negExp = func(v []float32) {
					for j := range v {
						v[j] = float32(-math.Exp(float64(v[j])))
					}
				}
			}
			f32(&L.a, "ssm_a", 1, H, true, negExp)
			f32(&L.d, "ssm_d", 1, H, true, nil)
			f32(&L.dtBias, "ssm_dt.bias", 1, H, true, nil)
			f32(&L.gNorm, "ssm_norm.weight", 1, I, true, nil)
			mat(&L.ssmOut, p+"ssm_out.weight", c.Hidden, I)
			out[i].Mixer = &mambaPart{w: L, h: h, host: host}
		case MixerAttention:
			mat(&L.wq, p+"attn_q.weight", c.QRow(), c.Hidden)
			mat(&L.wk, p+"attn_k.weight", c.KVRow(), c.Hidden)
			mat(&L.wv, p+"attn_v.weight", c.KVRow(), c.Hidden)
			mat(&L.wo, p+"attn_output.weight", c.Hidden, c.QRow())
			out[i].Mixer = &hybridAttention{w: L, h: h}
		}
		switch kind.FFN {
		case FFNReLU2:
			mat(&L.up, p+"ffn_up.weight", c.Intermediate, c.Hidden)
			mat(&L.down, p+"ffn_down.weight", c.Hidden, c.Intermediate)
		case FFNSwiGLU:
			swiglu(L, p, "")
		case FFNMoE:
			if _, ok := b.Kernels().(device.Experts); !ok {
				err = fmt.Errorf("model: %s needs the mixture-of-experts kernels, which the %s device lacks", c.Arch, b.m.dev.Info().Kind)
				break
			}
			E, ff := h.Experts, h.ExpertFF
			mat(&L.router, p+"ffn_gate_inp.weight", E, c.Hidden)
			if err == nil {
				L.gateExps, err = b.Stacked(p+"ffn_gate_exps.weight", E, ff, c.Hidden)
			}
			if err == nil {
				L.upExps, err = b.Stacked(p+"ffn_up_exps.weight", E, ff, c.Hidden)
			}
			if err == nil {
				L.downExps, err = b.Stacked(p+"ffn_down_exps.weight", E, c.Hidden, ff)
			}
			swiglu(L, p, "_shexp")
		}
		if kind.FFN != FFNNone {
			norm := L.ffnNorm
			if kind.Mixer == MixerNone {
				norm = L.norm // Nemotron-H: one norm per layer
			}
			if kind.FFN != FFNMoE {
				out[i].FFN = &hybridFFN{w: L, h: h, kind: kind.FFN, norm: norm}
			} else if err == nil {
				out[i].FFN, err = hybridMoE(b, L, h, norm)
			}
		}
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}
