package model

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"

	"github.com/kvhost/kvhost/host/model/hf"
	kcpu "github.com/kvhost/kvhost/kernels/cpu"
)

// Nemotron-H (NemotronHForCausalLM, GGUF nemotron_h): every layer is one
// part — a Mamba-2 mixer (M), attention without RoPE (*), or a
// squared-ReLU MLP (-) — behind its own RMSNorm and residual
// (docs/architectures/mamba2-hybrids.md §2).

// nemotronHJSON is config.json's Nemotron-H fields; pointers tell absent
// from zero so HF's defaults (configuration_nemotron_h.py) apply.
type nemotronHJSON struct {
	Pattern         *string  `json:"hybrid_override_pattern"`
	BlockTypes      []string `json:"layers_block_type"`
	Layers          *int     `json:"num_hidden_layers"`
	Hidden          *int     `json:"hidden_size"`
	Vocab           *int     `json:"vocab_size"`
	MambaHeads      *int     `json:"mamba_num_heads"`
	MambaHeadDim    *int     `json:"mamba_head_dim"`
	State           *int     `json:"ssm_state_size"`
	Groups          *int     `json:"n_groups"`
	GroupsLegacy    *int     `json:"mamba_n_groups"`
	ConvKernel      *int     `json:"conv_kernel"`
	ConvLegacy      *int     `json:"mamba_d_conv"`
	ConvBias        *bool    `json:"use_conv_bias"`
	ConvBiasLegacy  *bool    `json:"mamba_conv_bias"`
	ProjBias        *bool    `json:"mamba_proj_bias"`
	UseBias         *bool    `json:"use_bias"`
	DtLimit         *limits  `json:"time_step_limit"`
	DtLimitLegacy   *limits  `json:"mamba_dt_limit"`
	MambaAct        *string  `json:"mamba_hidden_act"`
	Heads           *int     `json:"num_attention_heads"`
	KVHeads         *int     `json:"num_key_value_heads"`
	HeadDim         *int     `json:"head_dim"`
	HeadDimLegacy   *int     `json:"attention_head_dim"`
	AttnBias        *bool    `json:"attention_bias"`
	Intermediate    *int     `json:"intermediate_size"`
	MLPAct          *string  `json:"mlp_hidden_act"`
	MLPBias         *bool    `json:"mlp_bias"`
	Eps             *float64 `json:"layer_norm_epsilon"`
	MaxPos          *int     `json:"max_position_embeddings"`
	Tied            *bool    `json:"tie_word_embeddings"`
	ResidualInFP32  *bool    `json:"residual_in_fp32"`
	NumExpertsPerTk *int     `json:"num_experts_per_tok"`
}

func or[T any](p *T, def T) T {
	if p == nil {
		return def
	}
	return *p
}

func firstOf[T any](ps ...*T) *T {
	for _, p := range ps {
		if p != nil {
			return p
		}
	}
	return nil
}

// limits is a time_step_limit pair. Python's json writes infinity as the
// bare token Infinity, transformers 5 as {"__float__": "Infinity"}, others
// as the string "Infinity" (hf.PythonJSON makes the bare token a string
// first).
type limits [2]float64

func (l *limits) UnmarshalJSON(b []byte) error {
	var raw []json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil || len(raw) != 2 {
		return fmt.Errorf("time_step_limit must be a list of two numbers, got %s", b)
	}
	for i, r := range raw {
		v, err := pyFloat(r)
		if err != nil {
			return fmt.Errorf("time_step_limit[%d]: %w", i, err)
		}
		l[i] = v
	}
	return nil
}

// pyFloat reads a number, a string Python's float() takes, or
// {"__float__": string}.
func pyFloat(r json.RawMessage) (float64, error) {
	var f float64
	if err := json.Unmarshal(r, &f); err == nil {
		return f, nil
	}
	var s string
	if err := json.Unmarshal(r, &s); err != nil {
		var obj struct {
			F *string `json:"__float__"`
		}
		if err := json.Unmarshal(r, &obj); err != nil || obj.F == nil {
			return 0, fmt.Errorf("want a number, got %s", r)
		}
		s = *obj.F
	}
	switch s {
	case "Infinity", "inf", "+inf":
		return math.Inf(1), nil
	case "-Infinity", "-inf":
		return math.Inf(-1), nil
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return 0, fmt.Errorf("want a number, got %q", s)
	}
	return v, nil
}

// nemotronHLayers parses the layer kinds: the pattern string (M, *, -, E)
// or layers_block_type (mamba, attention, mlp, moe; newer
// linear_attention/full_attention).
func nemotronHLayers(pattern *string, types []string) ([]HybridLayer, error) {
	kind := func(i int, k string) (HybridLayer, error) {
		switch k {
		case "M", "mamba", "linear_attention":
			return HybridLayer{Mixer: MixerMamba}, nil
		case "*", "attention", "full_attention":
			return HybridLayer{Mixer: MixerAttention}, nil
		case "-", "mlp":
			return HybridLayer{FFN: FFNReLU2}, nil
		case "E", "moe":
			return HybridLayer{}, fmt.Errorf("model: nemotron_h: layer %d is a mixture-of-experts layer (%q, nemotron_h_moe), which kvhost does not run yet", i, k)
		}
		return HybridLayer{}, fmt.Errorf("model: nemotron_h: layer %d kind %q: want M (mamba), * (attention) or - (mlp)", i, k)
	}
	var out []HybridLayer
	switch {
	case pattern != nil:
		for i, c := range *pattern {
			l, err := kind(i, string(c))
			if err != nil {
				return nil, err
			}
			out = append(out, l)
		}
	case types != nil:
		for i, t := range types {
			l, err := kind(i, t)
			if err != nil {
				return nil, err
			}
			out = append(out, l)
		}
	default:
		return nil, fmt.Errorf("model: nemotron_h: config.json has neither hybrid_override_pattern nor layers_block_type")
	}
	if len(out) == 0 || len(out) > 1024 {
		return nil, fmt.Errorf("model: nemotron_h: %d layers in the pattern, want [1, 1024]", len(out))
	}
	return out, nil
}

// nemotronHFromHF is Nemotron-H's Config from config.json's bytes.
func nemotronHFromHF(raw []byte, path string) (Config, error) {
	var j nemotronHJSON
	if err := json.Unmarshal(hf.PythonJSON(raw), &j); err != nil {
		return Config{}, fmt.Errorf("model: %s: %w", path, err)
	}
	layers, err := nemotronHLayers(j.Pattern, j.BlockTypes)
	if err != nil {
		return Config{}, fmt.Errorf("%s: %w", path, err)
	}
	if j.Layers != nil && *j.Layers != len(layers) {
		return Config{}, fmt.Errorf("model: %s: num_hidden_layers %d, but the layer pattern has %d", path, *j.Layers, len(layers))
	}
	for _, b := range []struct {
		name string
		v    *bool
	}{{"mamba_proj_bias", j.ProjBias}, {"use_bias", j.UseBias}, {"attention_bias", j.AttnBias}, {"mlp_bias", j.MLPBias}, {"residual_in_fp32", j.ResidualInFP32}} {
		if or(b.v, false) {
			return Config{}, fmt.Errorf("model: %s: %s = true is not supported (every published Nemotron-H has false)", path, b.name)
		}
	}
	if a := or(j.MambaAct, "silu"); a != "silu" {
		return Config{}, fmt.Errorf("model: %s: mamba_hidden_act %q is not supported (silu)", path, a)
	}
	if a := or(j.MLPAct, "relu2"); a != "relu2" {
		return Config{}, fmt.Errorf("model: %s: mlp_hidden_act %q is not supported (relu2)", path, a)
	}
	lim := or(firstOf(j.DtLimit, j.DtLimitLegacy), limits{0, math.Inf(1)})
	heads := or(j.Heads, 32)
	c := Config{
		Arch: "nemotron_h", Hidden: or(j.Hidden, 4096), Layers: len(layers), Heads: heads,
		KVHeads: or(j.KVHeads, 8), HeadDim: or(firstOf(j.HeadDim, j.HeadDimLegacy), 128),
		Intermediate: or(j.Intermediate, 21504), Vocab: or(j.Vocab, 131072), ContextLen: or(j.MaxPos, 4096),
		RMSEps: float32(or(j.Eps, 1e-5)), Tied: or(j.Tied, false),
	}
	groups := or(firstOf(j.Groups, j.GroupsLegacy), 8)
	m := kcpu.Mamba2{Heads: or(j.MambaHeads, 128), HeadDim: or(j.MambaHeadDim, 64), Groups: groups,
		State: or(j.State, 128), ConvKernel: or(firstOf(j.ConvKernel, j.ConvLegacy), 4),
		DtMin: float32(max(lim[0], 0)), DtMax: float32(lim[1])}
	c.Ext = &Hybrid{Layers: layers, Mamba: m, ConvBias: or(firstOf(j.ConvBias, j.ConvBiasLegacy), true),
		NormGroup: nemotronNormGroup(m), EmbedMult: 1, ResidualScale: 1, LogitDiv: 1,
		AttnScale: float32(1 / math.Sqrt(float64(c.HeadDim)))}
	if err := c.Validate(); err != nil {
		return Config{}, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// nemotronNormGroup is the gated norm's group, Inner/Groups (0 when the
// groups do not divide it, which Validate reports).
func nemotronNormGroup(m kcpu.Mamba2) int {
	if m.Groups < 1 || m.Inner()%m.Groups != 0 {
		return 0
	}
	return m.Inner() / m.Groups
}
