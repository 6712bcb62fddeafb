package model

import (
	"encoding/json"
	"fmt"
	"math"

	"github.com/kvhost/kvhost/host/device"
)

// SWAConfig is what the sliding-window family (Mistral with
// sliding_window, Gemma 2, Gemma 3 text, gpt-oss) adds to a Llama block.
// docs/architectures/{mistral,gemma2,gemma3,gpt-oss}.md give the source of
// every field in the HF config and the GGUF header.
type SWAConfig struct {
	// Window is the sliding window in tokens (HF sliding_window: a query at
	// p sees keys p-Window+1..p); Sliding[l] says whether layer l uses it.
	Window  int    `json:"sliding_window"`
	Sliding []bool `json:"sliding_layers"`
	// LocalRope, when set, rotates the sliding layers (Gemma 3's
	// rope_local_base_freq, never scaled); Config.Rope rotates the others.
	LocalRope *device.RopeSpec `json:"local_rope,omitempty"`
	// AttnScale multiplies q·k (Gemma's query_pre_attn_scalar^-½); 0 means
	// head_dim^-½.
	AttnScale float32 `json:"attn_scale,omitempty"`
	// AttnSoftCap and FinalSoftCap are Gemma 2's attention-logit and
	// final-logit soft caps (0: none).
	AttnSoftCap  float32 `json:"attn_logit_softcapping,omitempty"`
	FinalSoftCap float32 `json:"final_logit_softcapping,omitempty"`
	// Gemma is the Gemma block: embeddings scaled by √hidden, pre- and
	// post-norms around attention and MLP (post_attention_norm,
	// post_ffw_norm), GeGLU with tanh GELU. Norm weights are (1 + w) in HF
	// files and baked in GGUF ones; the loader adds the 1 for HF.
	Gemma bool `json:"gemma,omitempty"`
	// MoE is gpt-oss's mixture of experts with sinks, biases everywhere and
	// the clamped SwiGLU; nil for dense models.
	MoE *OSSMoE `json:"moe,omitempty"`
}

// OSSMoE is gpt-oss's expert block: top-K of Experts by router logits
// (softmax over the selected), experts of Config.Intermediate with biases,
// the clamped SwiGLU out = min(g, Limit)·σ(Alpha·min(g, Limit))·(clamp(u,
// ±Limit) + 1), learned attention sinks per head.
type OSSMoE struct {
	Experts int     `json:"experts"`
	TopK    int     `json:"top_k"`
	Alpha   float32 `json:"swiglu_alpha"`
	Limit   float32 `json:"swiglu_limit"`
}

// maxWindow bounds sliding_window (a window past any context is full
// attention; a lying header cannot size pools by it).
const maxWindow = 1 << 24

var _ ArchParams = (*SWAConfig)(nil)

// Validate names the first field that cannot describe a working model of
// c's shape (ArchParams).
func (s *SWAConfig) Validate(c Config) error {
	switch {
	case s.Window < 1 || s.Window > maxWindow:
		return fmt.Errorf("model: sliding_window = %d is out of range [1, %d]", s.Window, maxWindow)
	case len(s.Sliding) != c.Layers:
		return fmt.Errorf("model: the sliding-layer pattern has %d entries for num_layers %d", len(s.Sliding), c.Layers)
	case !(s.AttnScale >= 0) || math.IsInf(float64(s.AttnScale), 0):
		return fmt.Errorf("model: attention scale %v must be finite and not negative (query_pre_attn_scalar must be positive)", s.AttnScale)
	case !(s.AttnSoftCap >= 0) || math.IsInf(float64(s.AttnSoftCap), 0):
		return fmt.Errorf("model: attn_logit_softcapping = %v must be finite and not negative", s.AttnSoftCap)
	case !(s.FinalSoftCap >= 0) || math.IsInf(float64(s.FinalSoftCap), 0):
		return fmt.Errorf("model: final_logit_softcapping = %v must be finite and not negative", s.FinalSoftCap)
	}
	slides := false
	for _, v := range s.Sliding {
		slides = slides || v
	}
	if !slides {
		return fmt.Errorf("model: sliding_window %d is set but no layer slides", s.Window)
	}
	if r := s.LocalRope; r != nil {
		if r.RotDim <= 0 || r.RotDim > c.HeadDim || r.RotDim%2 != 0 || r.HeadDim != c.HeadDim {
			return fmt.Errorf("model: local rope dimension %d must be even and in [2, head_dim %d]", r.RotDim, c.HeadDim)
		}
		if !(r.Theta > 0) {
			return fmt.Errorf("model: rope_local_base_freq %v must be positive", r.Theta)
		}
	}
	if m := s.MoE; m != nil {
		switch {
		case m.Experts < 1 || m.Experts > 1024:
			return fmt.Errorf("model: num_local_experts = %d is out of range [1, 1024]", m.Experts)
		case m.TopK < 1 || m.TopK > m.Experts:
			return fmt.Errorf("model: num_experts_per_tok = %d is out of range [1, num_local_experts %d]", m.TopK, m.Experts)
		case !(m.Limit > 0) || math.IsInf(float64(m.Limit), 0):
			return fmt.Errorf("model: swiglu_limit = %v must be positive and finite", m.Limit)
		case !(m.Alpha > 0) || math.IsInf(float64(m.Alpha), 0):
			return fmt.Errorf("model: swiglu alpha = %v must be positive and finite", m.Alpha)
		}
	}
	return nil
}

// SWAOf is c's sliding-window parameters, nil for a model without them.
func SWAOf(c Config) *SWAConfig {
	s, _ := c.Ext.(*SWAConfig)
	return s
}

// LayerWindow is layer l's attention window (0: full attention).
func (c Config) LayerWindow(l int) int {
	s := SWAOf(c)
	if s == nil || l < 0 || l >= len(s.Sliding) || !s.Sliding[l] {
		return 0
	}
	return s.Window
}

// AttnOpts is layer l's attention options: the scale, the window, the
// soft cap (sinks are a weight the layer adds).
func (c Config) AttnOpts(l int) device.AttnOpts {
	o := device.AttnOpts{Scale: float32(1 / math.Sqrt(float64(c.HeadDim)))}
	if s := SWAOf(c); s != nil {
		if s.AttnScale > 0 {
			o.Scale = s.AttnScale
		}
		o.SoftCap = s.AttnSoftCap
		o.Window = c.LayerWindow(l)
	}
	return o
}

// slidingPattern lays out which of n layers slide: every layer when every
// is set, else layer i slides unless (i+1) % period == 0 (Gemma 2 and
// gpt-oss: period 2, the first layer slides; Gemma 3: period 6).
func slidingPattern(n, period int, every bool) []bool {
	out := make([]bool, n)
	for i := range out {
		out[i] = every || (i+1)%period != 0
	}
	return out
}

// gemmaScale is the attention scale llama.cpp applies to Gemma GGUFs,
// which do not carry query_pre_attn_scalar: 1/√(hidden/heads) where that
// differs from head_dim (Gemma-2 27B, Gemma-3 27B), else 1/√head_dim —
// the released configs' values (docs/architectures/gemma2.md).
func gemmaScale(c Config) float32 {
	if c.Heads > 0 && c.Hidden/c.Heads != c.HeadDim {
		return float32(1 / math.Sqrt(float64(c.Hidden/c.Heads)))
	}
	return float32(1 / math.Sqrt(float64(c.HeadDim)))
}

// swaFromGGUF fills c.Ext (and the rope details) for the sliding-window
// GGUF architectures. A llama/mistral file with a window key slides on every
// layer; llama.cpp's converter writes none, so a published Mistral GGUF
// stays full attention, as llama.cpp runs it (docs/architectures/mistral.md).
func swaFromGGUF(g ggufMeta, c *Config) error {
	a := g.arch + "."
	window, err := g.int(a+"attention.sliding_window", 0, false)
	if err != nil {
		return err
	}
	switch g.arch {
	case "gemma2", "gemma3", "gpt-oss":
	case "llama", "mistral":
		if window > 0 {
			c.Ext = &SWAConfig{Window: window, Sliding: slidingPattern(c.Layers, 1, true)}
		}
		return nil
	default:
		return nil // Qwen's windows are off in their configs (use_sliding_window)
	}
	s := &SWAConfig{Window: window}
	period := 2
	if g.arch == "gemma3" {
		period = 6
	}
	if period, err = g.int(a+"attention.sliding_window_pattern", period, false); err != nil {
		return err
	}
	if period < 1 {
		return fmt.Errorf("model: %s: %sattention.sliding_window_pattern = %d must be at least 1", g.f.Path, a, period)
	}
	s.Sliding = slidingPattern(c.Layers, period, period == 1)
	switch g.arch {
	case "gemma2":
		if s.Window == 0 {
			s.Window = 4096 // llama.cpp's default when the key is absent
		}
		s.Gemma, s.AttnScale = true, gemmaScale(*c)
		sc, err := g.float(a+"attn_logit_softcapping", 50)
		if err != nil {
			return err
		}
		fc, err := g.float(a+"final_logit_softcapping", 30)
		if err != nil {
			return err
		}
		s.AttnSoftCap, s.FinalSoftCap = float32(sc), float32(fc)
	case "gemma3":
		if s.Window == 0 {
			return fmt.Errorf("model: %s: gemma3 without %sattention.sliding_window is full attention; kvhost serves Gemma 3 with its window only", g.f.Path, a)
		}
		s.Gemma, s.AttnScale = true, gemmaScale(*c)
		fc, err := g.float(a+"final_logit_softcapping", 0)
		if err != nil {
			return err
		}
		s.FinalSoftCap = float32(fc)
		local, err := g.float(a+"rope.freq_base_swa", 10000)
		if err != nil {
			return err
		}
		s.LocalRope = &device.RopeSpec{HeadDim: c.HeadDim, RotDim: c.Rope.RotDim, Theta: local, Neox: true}
	case "gpt-oss":
		if s.Window == 0 {
			return fmt.Errorf("model: %s: %sattention.sliding_window is missing", g.f.Path, a)
		}
		m := &OSSMoE{Alpha: 1.702, Limit: 7}
		if m.Experts, err = g.int(a+"expert_count", 0, true); err != nil {
			return err
		}
		if m.TopK, err = g.int(a+"expert_used_count", 0, true); err != nil {
			return err
		}
		if c.Intermediate, err = g.int(a+"expert_feed_forward_length", c.Intermediate, false); err != nil {
			return err
		}
		// The YaRN ramp stays truncated as llama.cpp computes it: GGUF has no
		// key for transformers' truncate (false in gpt-oss's config.json),
		// and a GGUF means what llama.cpp runs (gpt-oss.md;
		// TestSWAMatchesLlamaCpp). An HF directory follows its config.
		s.MoE = m
	}
	c.Ext = s
	return nil
}

// hfSWAFields are the config.json keys of the sliding-window family.
type hfSWAFields struct {
	SlidingWindow        *int     `json:"sliding_window"`
	LayerTypes           []string `json:"layer_types"`
	SlidingWindowPattern *int     `json:"sliding_window_pattern"`
	QueryPreAttnScalar   *float64 `json:"query_pre_attn_scalar"`
	AttnSoftCap          *float64 `json:"attn_logit_softcapping"`
	FinalSoftCap         *float64 `json:"final_logit_softcapping"`
	HiddenActivation     string   `json:"hidden_activation"`
	RopeLocalBaseFreq    *float64 `json:"rope_local_base_freq"`
	NumLocalExperts      int      `json:"num_local_experts"`
	ExpertsPerTok        int      `json:"num_experts_per_tok"`
	ExpertsPerToken      int      `json:"experts_per_token"`
	SwigluLimit          *float64 `json:"swiglu_limit"`
	TieWordEmbeddings    *bool    `json:"tie_word_embeddings"`
	RopeScaling          *struct {
		BetaFast float64 `json:"beta_fast"`
		BetaSlow float64 `json:"beta_slow"`
		Truncate *bool   `json:"truncate"`
		Factor   float64 `json:"factor"`
		Type     string  `json:"rope_type"`
		Legacy   string  `json:"type"`
	} `json:"rope_scaling"`
}

// swaFromHF fills c.Ext from config.json's raw bytes for the architectures
// that slide (hfArch is architectures[0]).
func swaFromHF(raw []byte, hfArch string, c *Config, path string) error {
	var f hfSWAFields
	if err := json.Unmarshal(raw, &f); err != nil {
		return fmt.Errorf("model: %s: %w", path, err)
	}
	family := map[string]bool{"Gemma2ForCausalLM": true, "Gemma3ForCausalLM": true, "GptOssForCausalLM": true}[hfArch]
	if f.SlidingWindow == nil || *f.SlidingWindow == 0 {
		if family && hfArch != "Gemma3ForCausalLM" {
			return fmt.Errorf("model: %s: %s needs sliding_window", path, hfArch)
		}
		return nil // Mistral v0.2+: null window, full attention
	}
	w := *f.SlidingWindow
	if w < 0 || w > maxWindow {
		return fmt.Errorf("model: %s: sliding_window = %d is out of range [1, %d]", path, w, maxWindow)
	}
	if !family {
		if hfArch == "MistralForCausalLM" && w < c.ContextLen {
			c.Ext = &SWAConfig{Window: w, Sliding: slidingPattern(c.Layers, 1, true)}
		}
		return nil // Qwen2 and others carry a window they do not use
	}
	s := &SWAConfig{Window: w}
	switch {
	case f.LayerTypes != nil:
		if len(f.LayerTypes) != c.Layers {
			return fmt.Errorf("model: %s: layer_types has %d entries for num_hidden_layers %d", path, len(f.LayerTypes), c.Layers)
		}
		s.Sliding = make([]bool, c.Layers)
		for i, t := range f.LayerTypes {
			switch t {
			case "sliding_attention":
				s.Sliding[i] = true
			case "full_attention":
			default:
				return fmt.Errorf("model: %s: layer_types[%d] = %q: want sliding_attention or full_attention", path, i, t)
			}
		}
	default:
		period := 2
		if hfArch == "Gemma3ForCausalLM" {
			period = 6
		}
		if f.SlidingWindowPattern != nil {
			period = *f.SlidingWindowPattern
		}
		if period < 1 {
			return fmt.Errorf("model: %s: sliding_window_pattern = %d must be at least 1", path, period)
		}
		s.Sliding = slidingPattern(c.Layers, period, period == 1)
	}
	if hfArch != "GptOssForCausalLM" {
		s.Gemma = true
		// Gemma2Config/Gemma3TextConfig default tie_word_embeddings to true
		// (the published configs leave it out and ship no lm_head).
		c.Tied = f.TieWordEmbeddings == nil || *f.TieWordEmbeddings
		if f.HiddenActivation != "" && f.HiddenActivation != "gelu_pytorch_tanh" {
			return fmt.Errorf("model: %s: hidden_activation %q is not supported (gelu_pytorch_tanh)", path, f.HiddenActivation)
		}
		qpas := float64(c.HeadDim)
		if f.QueryPreAttnScalar != nil {
			qpas = *f.QueryPreAttnScalar
		}
		if !(qpas > 0) {
			return fmt.Errorf("model: %s: query_pre_attn_scalar = %v must be positive", path, qpas)
		}
		s.AttnScale = float32(1 / math.Sqrt(qpas))
		if f.AttnSoftCap != nil {
			s.AttnSoftCap = float32(*f.AttnSoftCap)
		}
		if f.FinalSoftCap != nil {
			s.FinalSoftCap = float32(*f.FinalSoftCap)
		}
	}
	if hfArch == "Gemma3ForCausalLM" {
		local := 10000.0
		if f.RopeLocalBaseFreq != nil {
			local = *f.RopeLocalBaseFreq
		}
		s.LocalRope = &device.RopeSpec{HeadDim: c.HeadDim, RotDim: c.HeadDim, Theta: local, Neox: true}
	}
	if hfArch == "GptOssForCausalLM" {
		m := &OSSMoE{Experts: f.NumLocalExperts, TopK: f.ExpertsPerTok, Alpha: 1.702, Limit: 7}
		if m.TopK == 0 {
			m.TopK = f.ExpertsPerToken
		}
		if f.SwigluLimit != nil {
			m.Limit = float32(*f.SwigluLimit)
		}
		s.MoE = m
		if rs := f.RopeScaling; rs != nil && (rs.Type == "yarn" || rs.Legacy == "yarn") {
			c.Rope.BetaFast, c.Rope.BetaSlow = rs.BetaFast, rs.BetaSlow
			c.Rope.NoTruncate = rs.Truncate != nil && !*rs.Truncate
		}
	}
	c.Ext = s
	return nil
}
