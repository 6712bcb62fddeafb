package model

import (
	"fmt"
	"math"

	kcpu "github.com/kvhost/kvhost/kernels/cpu"
)

// perLayer reads key as one value per layer: an array of n integers, or a
// scalar that every layer shares (llama.cpp accepts both).
func (g ggufMeta) perLayer(key string, n int, required bool) ([]int, error) {
	v, ok := g.f.Get(key)
	if !ok {
		if required {
			return nil, fmt.Errorf("model: %s: metadata key %s is missing", g.f.Path, key)
		}
		return make([]int, n), nil
	}
	if _, isArr := v.Elem(); isArr {
		ints, ok := v.Ints()
		if !ok || len(ints) != n {
			return nil, fmt.Errorf("model: %s: metadata key %s must be %d integers (one per layer), has %d", g.f.Path, key, n, v.Len())
		}
		out := make([]int, n)
		for i, x := range ints {
			if x < 0 || x > maxDim*16 {
				return nil, fmt.Errorf("model: %s: %s[%d] = %d is out of range [0, %d]", g.f.Path, key, i, x, maxDim*16)
			}
			out[i] = int(x)
		}
		return out, nil
	}
	x, err := g.int(key, 0, true)
	if err != nil {
		return nil, err
	}
	out := make([]int, n)
	for i := range out {
		out[i] = x
	}
	return out, nil
}

// hybridFromGGUF derives a hybrid model's Config from its GGUF header. The
// layer kinds follow llama.cpp: a layer with no KV heads and no FFN width
// is recurrent (Nemotron-H; Granite: no KV heads), one with KV heads
// attends, and a Nemotron-H layer with an FFN width is an MLP layer.
func hybridFromGGUF(g ggufMeta) (Config, error) {
	a, path := g.arch+".", g.f.Path
	c := Config{Arch: g.arch}
	var err error
	for _, it := range []struct {
		dst      *int
		key      string
		def      int
		required bool
	}{
		{&c.ContextLen, a + "context_length", 0, true},
		{&c.Hidden, a + "embedding_length", 0, true},
		{&c.Layers, a + "block_count", 0, true},
		{&c.Heads, a + "attention.head_count", 0, true},
	} {
		if *it.dst, err = g.int(it.key, it.def, it.required); err != nil {
			return Config{}, err
		}
	}
	if c.Layers < 1 || c.Layers > 1024 || c.Heads < 1 {
		return Config{}, fmt.Errorf("model: %s: %sblock_count %d must be in [1, 1024] and %sattention.head_count %d positive", path, a, c.Layers, a, c.Heads)
	}
	// Context: llama.cpp's converter writes 2^20 for a model without RoPE;
	// serve clamps it with --context-length.
	if c.HeadDim, err = g.int(a+"attention.key_length", c.Hidden/c.Heads, false); err != nil {
		return Config{}, err
	}
	kvh, err := g.perLayer(a+"attention.head_count_kv", c.Layers, true)
	if err != nil {
		return Config{}, err
	}
	ff, err := g.perLayer(a+"feed_forward_length", c.Layers, g.arch == "nemotron_h")
	if err != nil {
		return Config{}, err
	}
	eps, err := g.float(a+"attention.layer_norm_rms_epsilon", math.NaN())
	if err != nil {
		return Config{}, err
	}
	if math.IsNaN(eps) {
		if eps, err = g.float(a+"attention.layer_norm_epsilon", 1e-5); err != nil {
			return Config{}, err
		}
	}
	c.RMSEps = float32(eps)
	var s kcpu.Mamba2
	var inner int
	for _, it := range []struct {
		dst *int
		key string
	}{{&s.ConvKernel, "ssm.conv_kernel"}, {&s.State, "ssm.state_size"}, {&s.Groups, "ssm.group_count"}, {&inner, "ssm.inner_size"}, {&s.Heads, "ssm.time_step_rank"}} {
		if *it.dst, err = g.int(a+it.key, 0, true); err != nil {
			return Config{}, err
		}
	}
	if s.Heads < 1 || inner%s.Heads != 0 {
		return Config{}, fmt.Errorf("model: %s: %sssm.inner_size %d is not a multiple of %sssm.time_step_rank (the mamba heads) %d", path, a, inner, a, s.Heads)
	}
	s.HeadDim, s.DtMax = inner/s.Heads, float32(math.Inf(1)) // time_step_limit is not in GGUF: (0, inf)
	h := &Hybrid{Mamba: s, NormGroup: nemotronNormGroup(s), EmbedMult: 1, ResidualScale: 1, LogitDiv: 1,
		AttnScale: float32(1 / math.Sqrt(float64(c.HeadDim)))}
	if _, _, err := g.f.Tensor("blk.0.ssm_conv1d.bias"); err == nil {
		h.ConvBias = true
	}
	c.Ext = h
	kvHeads := 0
	for i := range c.Layers {
		var l HybridLayer
		switch {
		case kvh[i] > 0:
			l.Mixer = MixerAttention
			if kvHeads != 0 && kvh[i] != kvHeads {
				return Config{}, fmt.Errorf("model: %s: attention layers with %d and %d KV heads: kvhost needs one count", path, kvHeads, kvh[i])
			}
			kvHeads = kvh[i]
		case g.arch == "granitehybrid" || ff[i] == 0:
			l.Mixer = MixerMamba
		}
		if g.arch == "nemotron_h" {
			if l.Mixer == MixerAttention && ff[i] != 0 {
				return Config{}, fmt.Errorf("model: %s: nemotron_h layer %d has both KV heads and an FFN width", path, i)
			}
			if l.Mixer == MixerNone {
				l.FFN = FFNReLU2
				c.Intermediate = max(c.Intermediate, ff[i])
			}
		}
		h.Layers = append(h.Layers, l)
	}
	c.KVHeads = max(kvHeads, 1) // a model without attention layers keeps no KV
	if g.arch == "granitehybrid" {
		if err := graniteGGUF(g, &c, ff); err != nil {
			return Config{}, err
		}
	}
	if c.Intermediate == 0 {
		c.Intermediate = 1 // no MLP layer: nothing reads it
	}
	if _, _, err := g.f.Tensor("output.weight"); err != nil {
		c.Tied = true
	}
	if ti, _, err := g.f.Tensor("token_embd.weight"); err == nil && len(ti.Dims) == 2 {
		c.Vocab = int(min(ti.Dims[1], 1<<31))
	}
	if err := c.Validate(); err != nil {
		return Config{}, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// graniteGGUF reads Granite's multipliers and FFN shape: every layer has an
// FFN — the shared SwiGLU MLP, plus experts when expert_count > 0.
func graniteGGUF(g ggufMeta, c *Config, ff []int) error {
	a, h := g.arch+".", c.Hybrid()
	if g.boolean(a+"rope.scaling.finetuned", false) {
		return fmt.Errorf("model: %s: %srope.scaling.finetuned is true: a Granite hybrid with rotary embeddings (Bamba) is not supported", g.f.Path, a)
	}
	for _, m := range []struct {
		dst *float32
		key string
		def float64
	}{{&h.EmbedMult, "embedding_scale", 1}, {&h.ResidualScale, "residual_scale", 1}, {&h.LogitDiv, "logit_scale", 1},
		{&h.AttnScale, "attention.scale", float64(h.AttnScale)}} {
		v, err := g.float(a+m.key, m.def)
		if err != nil {
			return err
		}
		if v == 0 { // llama.cpp treats 0 as absent
			v = m.def
		}
		*m.dst = float32(v)
	}
	var err error
	if h.Experts, err = g.int(a+"expert_count", 0, false); err != nil {
		return err
	}
	shared, err := g.int(a+"expert_shared_feed_forward_length", 0, false)
	if err != nil {
		return err
	}
	ffn := FFNSwiGLU
	c.Intermediate = ff[0]
	if h.Experts > 0 {
		ffn = FFNMoE
		if h.ExpertsUsed, err = g.int(a+"expert_used_count", 0, true); err != nil {
			return err
		}
		h.ExpertFF, c.Intermediate = ff[0], shared
	} else if ti, _, err := g.f.Tensor("blk.0.ffn_gate.weight"); err == nil && len(ti.Dims) == 2 {
		c.Intermediate = int(min(ti.Dims[1], 1<<31)) // the dense MLP is shared_intermediate_size wide
	}
	for i := range h.Layers {
		h.Layers[i].FFN = ffn
	}
	return nil
}
