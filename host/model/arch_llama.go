package model

import (
	"fmt"

	"github.com/kvhost/kvhost/host/kv"
	"github.com/kvhost/kvhost/host/model/hf"
)

// The Llama family: Llama 2/3, Mistral (full attention), Qwen2/2.5 (q/k/v
// biases) and Qwen3 (per-head q/k RMSNorm). Every layer is GQA attention
// and a SwiGLU MLP; the entries differ only in these traits.
type llamaTraits struct {
	// neox: the GGUF copy keeps the Hugging Face half-split q/k layout
	// (llama.cpp permutes Llama's and Mistral's for adjacent pairs).
	neox, bias, qkNorm bool
}

func init() {
	for _, e := range []struct {
		name, hf string
		t        llamaTraits
	}{
		{"llama", "LlamaForCausalLM", llamaTraits{}},
		{"mistral", "MistralForCausalLM", llamaTraits{}},
		{"qwen2", "Qwen2ForCausalLM", llamaTraits{neox: true, bias: true}},
		{"qwen3", "Qwen3ForCausalLM", llamaTraits{neox: true, qkNorm: true}},
	} {
		register(e.t.arch(e.name, e.hf))
	}
}

// arch is the registry entry of one Llama-family architecture.
func (t llamaTraits) arch(name, hfClass string) *Arch {
	return &Arch{
		Name: name, HF: []string{hfClass},
		FromGGUF: func(g ggufMeta) (Config, error) {
			c, err := g.common(t.neox)
			c.QKVBias, c.QKNorm = t.bias, t.qkNorm
			if err == nil {
				err = swaFromGGUF(g, &c) // a window key makes every layer slide (arch_swa.go)
			}
			return c, err
		},
		FromHF: func(hc hf.Config, raw []byte, path string) (Config, error) {
			c, err := hfCommon(hc, path)
			c.QKVBias = c.QKVBias || t.bias
			c.QKNorm = t.qkNorm
			if err == nil {
				err = swaFromHF(raw, hfClass, &c, path) // Mistral's sliding_window
			}
			return c, err
		},
		HFTensor: hfName,
		ConfigJSON: func(c Config, out map[string]any) {
			swaConfigJSON(c, out) // a Mistral's window, if any
			if SWAOf(c) != nil && name == "llama" {
				// llama.cpp writes Mistral as llama; with a window it is
				// Hugging Face's MistralForCausalLM (Llama has none), the
				// class whose configurators read sliding_window.
				out["architectures"], out["model_type"] = []string{"MistralForCausalLM"}, "mistral"
			}
		},
		Layers:  llamaLayers,
		KVNeeds: llamaKVNeeds,
		Params:  llamaParams,
	}
}

// llamaLayers loads every layer as GQA attention and a SwiGLU MLP, under
// llama.cpp's tensor names (blk.N.attn_q.weight, ...).
func llamaLayers(b *Builder) ([]Layer, error) {
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
			opts: c.AttnOpts(i)}
		f := &denseFFN{inter: c.Intermediate, eps: c.RMSEps}
		steps := []weightStep{
			{&a.norm, "attn_norm.weight", 1, c.Hidden, true, true},
			{&a.wq, "attn_q.weight", c.QRow(), c.Hidden, false, true},
			{&a.wk, "attn_k.weight", c.KVRow(), c.Hidden, false, true},
			{&a.wv, "attn_v.weight", c.KVRow(), c.Hidden, false, true},
			{&a.wo, "attn_output.weight", c.Hidden, c.QRow(), false, true},
			{&a.bq, "attn_q.bias", 1, c.QRow(), true, c.QKVBias},
			{&a.bk, "attn_k.bias", 1, c.KVRow(), true, c.QKVBias},
			{&a.bv, "attn_v.bias", 1, c.KVRow(), true, c.QKVBias},
			{&a.qNorm, "attn_q_norm.weight", 1, c.HeadDim, true, c.QKNorm},
			{&a.kNorm, "attn_k_norm.weight", 1, c.HeadDim, true, c.QKNorm},
			{&f.norm, "ffn_norm.weight", 1, c.Hidden, true, true},
			{&f.gate, "ffn_gate.weight", c.Intermediate, c.Hidden, false, true},
			{&f.up, "ffn_up.weight", c.Intermediate, c.Hidden, false, true},
			{&f.down, "ffn_down.weight", c.Hidden, c.Intermediate, false, true},
		}
		if err := b.load(p, steps); err != nil {
			return nil, err
		}
		out[i] = Layer{Mixer: a, FFN: f}
	}
	return out, nil
}

// llamaKVNeeds: every layer keeps K and V rows of KVHeads × HeadDim for
// every past position (its window's when it slides: Mistral).
func llamaKVNeeds(c Config) []kv.LayerNeed {
	out := make([]kv.LayerNeed, c.Layers)
	for i := range out {
		out[i] = kv.LayerNeed{KVHeads: c.KVHeads, HeadDim: c.HeadDim, VHeadDim: c.HeadDim, Window: c.LayerWindow(i)}
	}
	return out
}

// llamaParams counts embedding, layers (attention with its optional biases
// and q/k norms, SwiGLU MLP, two norms), output norm and untied head.
func llamaParams(c Config) int64 {
	h, q, kv, i := int64(c.Hidden), int64(c.QRow()), int64(c.KVRow()), int64(c.Intermediate)
	per := h + h*q + 2*h*kv + q*h + h + 3*h*i
	if c.QKVBias {
		per += q + 2*kv
	}
	if c.QKNorm {
		per += 2 * int64(c.HeadDim)
	}
	n := int64(c.Layers)*per + int64(c.Vocab)*h + h
	if !c.Tied {
		n += int64(c.Vocab) * h
	}
	return n
}
