package model

import (
	"fmt"
	"math"

	"github.com/kvhost/kvhost/host/device"
	"github.com/kvhost/kvhost/host/model/hf"
)

// Qwen3-MoE (docs/architectures/qwen3moe.md): Qwen3's attention (GQA,
// per-head q/k RMSNorm, NeoX rope, no biases) and routed experts with
// softmax top-k, no shared expert, on every layer.
func init() {
	register(&Arch{
		Name: "qwen3moe", HF: []string{"Qwen3MoeForCausalLM"},
		FromGGUF: func(g ggufMeta) (Config, error) {
			c, err := g.common(true)
			if err != nil {
				return Config{}, err
			}
			c.QKNorm = true
			e, err := moeFromGGUF(g, "qwen3moe.", true, c)
			if err != nil {
				return Config{}, err
			}
			// llama.cpp's qwen3moe graph always normalises the top-k
			// weights (the converter writes no expert_weights_norm).
			e.Router.NormTopK = true
			c.Ext = &moeParams{MoE: e}
			return c, nil
		},
		FromHF: func(hc hf.Config, raw []byte, path string) (Config, error) {
			c, err := hfCommon(hc, path)
			if err != nil {
				return Config{}, err
			}
			c.QKNorm = true
			e, err := moeFromHF(raw, "qwen3_moe", path)
			if err != nil {
				return Config{}, err
			}
			c.Ext = &moeParams{MoE: e}
			return c, nil
		},
		HFTensor: moeHFName,
		ConfigJSON: func(c Config, out map[string]any) {
			e := c.moe()
			out["num_experts"], out["num_experts_per_tok"], out["moe_intermediate_size"] = e.Router.Experts, e.Router.TopK, e.Intermediate
		},
		Layers:  qwen3moeLayers,
		KVNeeds: llamaKVNeeds,
		Params: func(c Config) int64 {
			h, q, kv := int64(c.Hidden), int64(c.QRow()), int64(c.KVRow())
			return moeParamsOf(c, 2*h*q+2*h*kv+2*int64(c.HeadDim))
		},
	})
}

// qwen3moeLayers loads Qwen3 attention and the experts on every layer
// (a dense MLP below first_dense, which no release has).
func qwen3moeLayers(b *Builder) ([]Layer, error) {
	c := b.C
	rope, err := b.Rope(c.Rope)
	if err != nil {
		return nil, err
	}
	b.AttnShape(c.AttnShape())
	out := make([]Layer, c.Layers)
	for i := range out {
		p := fmt.Sprintf("blk.%d.", i)
		a := &attention{rope: rope, heads: c.Heads, kvHeads: c.KVHeads, headDim: c.HeadDim, vHeadDim: c.HeadDim, eps: c.RMSEps,
			opts: device.AttnOpts{Scale: float32(1 / math.Sqrt(float64(c.HeadDim)))}}
		if err := b.load(p, []weightStep{
			{&a.norm, "attn_norm.weight", 1, c.Hidden, true, true},
			{&a.wq, "attn_q.weight", c.QRow(), c.Hidden, false, true},
			{&a.wk, "attn_k.weight", c.KVRow(), c.Hidden, false, true},
			{&a.wv, "attn_v.weight", c.KVRow(), c.Hidden, false, true},
			{&a.wo, "attn_output.weight", c.Hidden, c.QRow(), false, true},
			{&a.qNorm, "attn_q_norm.weight", 1, c.HeadDim, true, true},
			{&a.kNorm, "attn_k_norm.weight", 1, c.HeadDim, true, true},
		}); err != nil {
			return nil, err
		}
		out[i].Mixer = a
		if out[i].FFN, err = ffnOf(b, p, i); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// ffnOf loads layer i's FFN: the experts, or the dense SwiGLU MLP of a
// leading dense layer.
func ffnOf(b *Builder, p string, i int) (FFN, error) {
	c := b.C
	if c.MoELayer(i) {
		return loadMoE(b, p)
	}
	f := &denseFFN{inter: c.Intermediate, eps: c.RMSEps}
	var err error
	if f.norm, err = b.Vector(p+"ffn_norm.weight", c.Hidden); err != nil {
		return nil, err
	}
	if f.gate, err = b.Matrix(p+"ffn_gate.weight", c.Intermediate, c.Hidden); err != nil {
		return nil, err
	}
	if f.up, err = b.Matrix(p+"ffn_up.weight", c.Intermediate, c.Hidden); err != nil {
		return nil, err
	}
	f.down, err = b.Matrix(p+"ffn_down.weight", c.Hidden, c.Intermediate)
	return f, err
}
