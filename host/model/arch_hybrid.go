package model

import (
	"fmt"
	"math"

	"github.com/kvhost/kvhost/host/kv"
	"github.com/kvhost/kvhost/host/model/hf"
	kcpu "github.com/kvhost/kvhost/kernels/cpu"
)

// Hybrid Mamba-2 models (Nemotron-H, Granite-4.0-H): every layer is a
// mixer (a Mamba-2 mixer, attention without rotary embeddings, or none) and
// an FFN (none, a squared-ReLU MLP, a SwiGLU MLP, or a mixture of experts
// beside a shared SwiGLU MLP), each with its own pre-norm and residual.
// docs/architectures/mamba2-hybrids.md is the spec this follows.

// MixerKind is a hybrid layer's token mixer.
type MixerKind uint8

const (
	MixerNone      MixerKind = iota // Nemotron-H's MLP-only layers
	MixerMamba                      // Mamba-2 (Nemotron-H M, Granite "mamba")
	MixerAttention                  // GQA without rotary embeddings
)

// FFNKind is a hybrid layer's feed-forward block.
type FFNKind uint8

const (
	FFNNone   FFNKind = iota // Nemotron-H's mixer-only layers
	FFNReLU2                 // down(relu(up(x))²) (Nemotron-H -)
	FFNSwiGLU                // down(silu(gate(x))·up(x)) (Granite's shared_mlp)
	FFNMoE                   // Granite: experts (SwiGLU) plus the shared SwiGLU MLP
)

func (m MixerKind) String() string { return [...]string{"none", "mamba", "attention"}[m] }
func (f FFNKind) String() string   { return [...]string{"none", "relu2", "swiglu", "moe"}[f] }

// HybridLayer is one layer's parts.
type HybridLayer struct {
	Mixer MixerKind `json:"mixer"`
	FFN   FFNKind   `json:"ffn"`
}

// Hybrid is what a hybrid architecture adds to Config. Config's attention
// fields (Heads, KVHeads, HeadDim) describe the attention layers and
// Intermediate the dense (or shared) MLP width.
type Hybrid struct {
	Layers []HybridLayer `json:"layers"`
	// Mamba is the Mamba-2 mixers' shape (all Mamba layers share it).
	Mamba kcpu.Mamba2 `json:"mamba"`
	// NormGroup is the gated RMSNorm's group (Inner/Groups: mamba_ssm's and
	// llama.cpp's convention, docs §1).
	NormGroup int  `json:"norm_group"`
	ConvBias  bool `json:"conv_bias"`
	// Experts, ExpertsUsed and ExpertFF describe FFNMoE layers.
	Experts     int `json:"experts,omitempty"`
	ExpertsUsed int `json:"experts_used,omitempty"`
	ExpertFF    int `json:"expert_ff,omitempty"`
	// Granite's multipliers: the embedding is scaled by EmbedScale, each
	// residual branch by ResidualScale, attention scores by AttnScale and
	// the logits divided by LogitScale. Nemotron-H: 1, 1, head_dim^-½, 1.
	EmbedMult     float32 `json:"embedding_multiplier"`
	ResidualScale float32 `json:"residual_multiplier"`
	AttnScale     float32 `json:"attention_multiplier"`
	LogitDiv      float32 `json:"logits_scaling"`
}

// Count is the number of layers with the given mixer.
func (h *Hybrid) Count(m MixerKind) int {
	n := 0
	for _, l := range h.Layers {
		if l.Mixer == m {
			n++
		}
	}
	return n
}

// CountFFN is the number of layers with the given FFN.
func (h *Hybrid) CountFFN(f FFNKind) int {
	n := 0
	for _, l := range h.Layers {
		if l.FFN == f {
			n++
		}
	}
	return n
}

var _ ArchParams = (*Hybrid)(nil)

func init() {
	for _, a := range []struct{ name, hf string }{{"nemotron_h", "NemotronHForCausalLM"}, {"granitehybrid", "GraniteMoeHybridForCausalLM"}} {
		fromHF := nemotronHFromHF
		if a.name == "granitehybrid" {
			fromHF = graniteHybridFromHF
		}
		name := a.name
		register(&Arch{
			Name: name, HF: []string{a.hf},
			FromGGUF: hybridFromGGUF,
			FromHF:   func(_ hf.Config, raw []byte, path string) (Config, error) { return fromHF(raw, path) },
			HFTensor: func(canon string) string { return hybridHFName(name, canon) },
			HFRead:   hybridHFRead[name],
			ConfigJSON: func(c Config, out map[string]any) {
				for k, v := range c.HybridHF() {
					out[k] = v
				}
			},
			Layers: hybridLayers, KVNeeds: hybridKVNeeds, Params: hybridParams,
		})
	}
}

// Hybrid is c's hybrid parameters, nil for another architecture.
func (c Config) Hybrid() *Hybrid {
	h, _ := c.Ext.(*Hybrid)
	return h
}

// NoRope says the architecture rotates nothing: Config.Rope is unset and
// not validated.
func (h *Hybrid) NoRope() bool { return true }

// Validate names the first field that cannot describe a working hybrid
// model of c's shape.
func (h *Hybrid) Validate(c Config) error {
	if !(c.RMSEps > 0 && c.RMSEps < 1) {
		return fmt.Errorf("model: rms_norm_eps %v out of range (0, 1)", c.RMSEps)
	}
	if len(h.Layers) != c.Layers {
		return fmt.Errorf("model: %s: %d layer kinds for num_layers %d", c.Arch, len(h.Layers), c.Layers)
	}
	for i, l := range h.Layers {
		if l.Mixer > MixerAttention || l.FFN > FFNMoE {
			return fmt.Errorf("model: %s: layer %d has unknown parts (mixer %d, ffn %d)", c.Arch, i, l.Mixer, l.FFN)
		}
		if l.Mixer == MixerNone && l.FFN == FFNNone {
			return fmt.Errorf("model: %s: layer %d has neither a mixer nor an FFN", c.Arch, i)
		}
	}
	if h.Count(MixerMamba) > 0 {
		if err := h.Mamba.Validate(); err != nil {
			return fmt.Errorf("model: %s: %w", c.Arch, err)
		}
		if in := h.Mamba.Inner(); h.NormGroup < 1 || in%h.NormGroup != 0 {
			return fmt.Errorf("model: %s: gated norm group %d must divide the mamba inner size %d (heads %d × head dim %d)",
				c.Arch, h.NormGroup, in, h.Mamba.Heads, h.Mamba.HeadDim)
		}
		if h.Mamba.ConvKernel < 2 {
			return fmt.Errorf("model: %s: ssm conv kernel %d is out of range [2, %d]", c.Arch, h.Mamba.ConvKernel, kcpu.MaxConvKernel)
		}
	}
	if h.CountFFN(FFNMoE) > 0 {
		switch {
		case h.Experts < 1 || h.Experts > kcpu.MaxRouterExperts:
			return fmt.Errorf("model: %s: num_local_experts %d is out of range [1, %d]", c.Arch, h.Experts, kcpu.MaxRouterExperts)
		case h.ExpertsUsed < 1 || h.ExpertsUsed > h.Experts:
			return fmt.Errorf("model: %s: num_experts_per_tok %d is out of range [1, %d]", c.Arch, h.ExpertsUsed, h.Experts)
		case h.ExpertFF < 1 || h.ExpertFF > maxDim:
			return fmt.Errorf("model: %s: expert intermediate size %d is out of range [1, %d]", c.Arch, h.ExpertFF, maxDim)
		}
	}
	for _, s := range []struct {
		name string
		v    float32
	}{{"embedding_multiplier", h.EmbedMult}, {"residual_multiplier", h.ResidualScale}, {"attention_multiplier", h.AttnScale}, {"logits_scaling", h.LogitDiv}} {
		if !(s.v > 0) || math.IsInf(float64(s.v), 0) {
			return fmt.Errorf("model: %s: %s = %v must be positive and finite", c.Arch, s.name, s.v)
		}
	}
	return nil
}

// hybridKVNeeds is what each layer of a hybrid model keeps: attention
// layers K and V rows, Mamba layers a request slot of state, MLP-only
// layers nothing.
func hybridKVNeeds(c Config) []kv.LayerNeed {
	out := make([]kv.LayerNeed, c.Layers)
	for i, l := range c.Hybrid().Layers {
		switch l.Mixer {
		case MixerAttention:
			out[i] = kv.LayerNeed{KVHeads: c.KVHeads, HeadDim: c.HeadDim, VHeadDim: c.HeadDim}
		case MixerMamba:
			out[i] = kv.LayerNeed{State: true}
		}
	}
	return out
}

// hybridParams counts a hybrid model's parameters.
func hybridParams(c Config) int64 {
	h := c.Hybrid()
	hid, q, kvr, ff := int64(c.Hidden), int64(c.QRow()), int64(c.KVRow()), int64(c.Intermediate)
	s := h.Mamba
	in, cd, H := int64(s.Inner()), int64(s.ConvDim()), int64(s.Heads)
	n := int64(c.Vocab)*hid + hid
	if !c.Tied {
		n += int64(c.Vocab) * hid
	}
	for _, l := range h.Layers {
		switch l.Mixer {
		case MixerMamba:
			n += hid + hid*(in+cd+H) + cd*int64(s.ConvKernel) + 3*H + in + in*hid
			if h.ConvBias {
				n += cd
			}
		case MixerAttention:
			n += hid + hid*q + 2*hid*kvr + q*hid
		}
		switch l.FFN {
		case FFNReLU2:
			n += hid + 2*hid*ff
		case FFNSwiGLU:
			n += hid + 3*hid*ff
		case FFNMoE:
			n += hid + 3*hid*ff + int64(h.Experts)*(hid+3*hid*int64(h.ExpertFF))
		}
	}
	return n
}

// HybridHF is the Hugging Face config.json equivalent of a hybrid c (what
// a GGUF header implies): the configurator's input, which
// ConfigFromHFJSON reads back to c.
func (c Config) HybridHF() map[string]any {
	h := c.Hybrid()
	s := h.Mamba
	out := map[string]any{
		"hidden_size": c.Hidden, "num_hidden_layers": c.Layers, "num_attention_heads": c.Heads,
		"num_key_value_heads": c.KVHeads, "head_dim": c.HeadDim, "vocab_size": c.Vocab,
		"max_position_embeddings": c.ContextLen, "tie_word_embeddings": c.Tied,
	}
	lim := []any{float64(s.DtMin), "Infinity"}
	if !math.IsInf(float64(s.DtMax), 1) {
		lim[1] = float64(s.DtMax)
	}
	out["time_step_limit"] = lim
	if c.Arch == "nemotron_h" {
		pat := make([]byte, len(h.Layers))
		for i, l := range h.Layers {
			pat[i] = map[MixerKind]byte{MixerMamba: 'M', MixerAttention: '*', MixerNone: '-'}[l.Mixer]
		}
		for k, v := range map[string]any{
			"architectures": []string{"NemotronHForCausalLM"}, "model_type": "nemotron_h",
			"hybrid_override_pattern": string(pat), "intermediate_size": c.Intermediate,
			"mamba_num_heads": s.Heads, "mamba_head_dim": s.HeadDim, "ssm_state_size": s.State, "n_groups": s.Groups,
			"conv_kernel": s.ConvKernel, "use_conv_bias": h.ConvBias, "layer_norm_epsilon": c.RMSEps,
		} {
			out[k] = v
		}
		return out
	}
	types := make([]string, len(h.Layers))
	for i, l := range h.Layers {
		types[i] = map[MixerKind]string{MixerMamba: "mamba", MixerAttention: "attention"}[l.Mixer]
	}
	for k, v := range map[string]any{
		"architectures": []string{"GraniteMoeHybridForCausalLM"}, "model_type": "granitemoehybrid",
		"layer_types": types, "mamba_n_heads": s.Heads, "mamba_d_head": s.HeadDim, "mamba_d_state": s.State,
		"mamba_n_groups": s.Groups, "mamba_d_conv": s.ConvKernel, "mamba_conv_bias": h.ConvBias, "rms_norm_eps": c.RMSEps,
		"embedding_multiplier": h.EmbedMult, "residual_multiplier": h.ResidualScale, "attention_multiplier": h.AttnScale,
		"logits_scaling": h.LogitDiv, "num_local_experts": h.Experts, "num_experts_per_tok": h.ExpertsUsed,
		"intermediate_size": h.ExpertFF, "shared_intermediate_size": c.Intermediate,
	} {
		out[k] = v
	}
	if s.Inner()%c.Hidden == 0 {
		out["mamba_expand"] = s.Inner() / c.Hidden
	}
	return out
}
