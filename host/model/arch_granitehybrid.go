package model

import (
	"encoding/json"
	"fmt"
	"math"

	"github.com/kvhost/kvhost/host/model/hf"
	kcpu "github.com/kvhost/kvhost/kernels/cpu"
)

// Granite-4.0-H (GraniteMoeHybridForCausalLM, GGUF granitehybrid): every
// layer is a mixer (Mamba-2 or attention without RoPE) and an FFN (a
// SwiGLU shared MLP, plus top-k softmax experts in the MoE sizes), with
// Granite's multipliers on the embedding, the residual branches, the
// attention scores and the logits (docs/architectures/mamba2-hybrids.md §3).

// graniteHybridJSON is config.json's GraniteMoeHybrid fields (pointers: HF's
// defaults from configuration_granitemoehybrid.py apply when absent).
type graniteHybridJSON struct {
	LayerTypes    []string        `json:"layer_types"`
	BlockTypes    []string        `json:"layers_block_type"`
	Layers        *int            `json:"num_hidden_layers"`
	Hidden        *int            `json:"hidden_size"`
	Vocab         *int            `json:"vocab_size"`
	MambaHeads    *int            `json:"mamba_n_heads"`
	MambaHeadDim  json.RawMessage `json:"mamba_d_head"` // an integer or "auto"
	Expand        *int            `json:"mamba_expand"`
	State         *int            `json:"mamba_d_state"`
	Groups        *int            `json:"mamba_n_groups"`
	ConvKernel    *int            `json:"mamba_d_conv"`
	ConvBias      *bool           `json:"mamba_conv_bias"`
	ProjBias      *bool           `json:"mamba_proj_bias"`
	DtLimit       *limits         `json:"time_step_limit"`
	Act           *string         `json:"hidden_act"`
	Eps           *float64        `json:"rms_norm_eps"`
	Heads         *int            `json:"num_attention_heads"`
	KVHeads       *int            `json:"num_key_value_heads"`
	AttnBias      *bool           `json:"attention_bias"`
	PosEmbed      *string         `json:"position_embedding_type"`
	EmbedMult     *float64        `json:"embedding_multiplier"`
	AttnMult      *float64        `json:"attention_multiplier"`
	ResidualMult  *float64        `json:"residual_multiplier"`
	LogitsScaling *float64        `json:"logits_scaling"`
	Experts       *int            `json:"num_local_experts"`
	ExpertsUsed   *int            `json:"num_experts_per_tok"`
	Intermediate  *int            `json:"intermediate_size"`
	Shared        *int            `json:"shared_intermediate_size"`
	MaxPos        *int            `json:"max_position_embeddings"`
	Tied          *bool           `json:"tie_word_embeddings"`
}

// graniteHybridFromHF is Granite-4.0-H's Config from config.json's bytes.
func graniteHybridFromHF(raw []byte, path string) (Config, error) {
	var j graniteHybridJSON
	if err := json.Unmarshal(hf.PythonJSON(raw), &j); err != nil {
		return Config{}, fmt.Errorf("model: %s: %w", path, err)
	}
	n := or(j.Layers, 32)
	if n < 1 || n > 1024 {
		return Config{}, fmt.Errorf("model: %s: num_hidden_layers %d is out of range [1, 1024]", path, n)
	}
	types := j.LayerTypes
	if types == nil {
		types = j.BlockTypes
	}
	layers := make([]HybridLayer, n)
	if types != nil && len(types) != n {
		return Config{}, fmt.Errorf("model: %s: layer_types has %d entries for num_hidden_layers %d", path, len(types), n)
	}
	for i := range layers {
		layers[i].Mixer = MixerMamba // HF's default: every layer Mamba
		if types == nil {
			continue
		}
		switch types[i] {
		case "mamba":
		case "attention":
			layers[i].Mixer = MixerAttention
		default:
			return Config{}, fmt.Errorf("model: %s: layer_types[%d] = %q: want mamba or attention", path, i, types[i])
		}
	}
	for _, b := range []struct {
		name string
		v    *bool
	}{{"mamba_proj_bias", j.ProjBias}, {"attention_bias", j.AttnBias}} {
		if or(b.v, false) {
			return Config{}, fmt.Errorf("model: %s: %s = true is not supported (every published Granite-4.0-H has false)", path, b.name)
		}
	}
	if a := or(j.Act, "silu"); a != "silu" {
		return Config{}, fmt.Errorf("model: %s: hidden_act %q is not supported (silu)", path, a)
	}
	if p := or(j.PosEmbed, ""); p != "" && p != "nope" {
		return Config{}, fmt.Errorf("model: %s: position_embedding_type %q is not supported (Granite-4.0-H uses none)", path, p)
	}
	hidden, heads := or(j.Hidden, 4096), or(j.Heads, 32)
	if heads < 1 || hidden%heads != 0 {
		return Config{}, fmt.Errorf("model: %s: hidden_size %d is not a multiple of num_attention_heads %d", path, hidden, heads)
	}
	m := kcpu.Mamba2{Heads: or(j.MambaHeads, 128), Groups: or(j.Groups, 1), State: or(j.State, 256),
		ConvKernel: or(j.ConvKernel, 4)}
	inner := or(j.Expand, 2) * hidden
	switch s := string(j.MambaHeadDim); s {
	case "", "null", `"auto"`:
		if m.Heads < 1 || inner%m.Heads != 0 {
			return Config{}, fmt.Errorf("model: %s: mamba_d_head auto: mamba_expand × hidden_size = %d is not a multiple of mamba_n_heads %d", path, inner, m.Heads)
		}
		m.HeadDim = inner / m.Heads
	default:
		if err := json.Unmarshal(j.MambaHeadDim, &m.HeadDim); err != nil {
			return Config{}, fmt.Errorf("model: %s: mamba_d_head %s: want an integer or \"auto\"", path, s)
		}
		if m.HeadDim*m.Heads != inner {
			return Config{}, fmt.Errorf("model: %s: mamba_d_head %d × mamba_n_heads %d must equal mamba_expand × hidden_size = %d", path, m.HeadDim, m.Heads, inner)
		}
	}
	lim := or(j.DtLimit, limits{0, math.Inf(1)})
	m.DtMin, m.DtMax = float32(max(lim[0], 0)), float32(lim[1])
	c := Config{
		Arch: "granitehybrid", Hidden: hidden, Layers: n, Heads: heads, KVHeads: or(j.KVHeads, heads),
		HeadDim: hidden / heads, Vocab: or(j.Vocab, 32000), ContextLen: or(j.MaxPos, 2048),
		RMSEps: float32(or(j.Eps, 1e-6)), Tied: or(j.Tied, false),
	}
	h := &Hybrid{Layers: layers, Mamba: m, NormGroup: nemotronNormGroup(m), ConvBias: or(j.ConvBias, true),
		EmbedMult: float32(or(j.EmbedMult, 1)), ResidualScale: float32(or(j.ResidualMult, 1)),
		AttnScale: float32(or(j.AttnMult, 1)), LogitDiv: float32(or(j.LogitsScaling, 1))}
	ffn := FFNSwiGLU
	c.Intermediate = or(j.Shared, 1024)
	if e := or(j.Experts, 8); e > 0 {
		ffn = FFNMoE
		h.Experts, h.ExpertsUsed, h.ExpertFF = e, or(j.ExpertsUsed, 2), or(j.Intermediate, 11008)
	}
	for i := range h.Layers {
		h.Layers[i].FFN = ffn
	}
	c.Ext = h
	if err := c.Validate(); err != nil {
		return Config{}, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}
