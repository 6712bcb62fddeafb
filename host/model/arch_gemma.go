package model

import (
	"fmt"
	"math"
	"strings"

	"github.com/kvhost/kvhost/host/device"
	"github.com/kvhost/kvhost/host/kv"
	"github.com/kvhost/kvhost/host/model/hf"
)

// The sliding-window family's registry entries: Gemma 2, Gemma 3 text and
// gpt-oss (arch_swa.go holds their configuration; a Mistral with a window
// is the Llama entry with SWAConfig set).
func init() {
	for _, e := range []struct {
		name         string
		hf           []string // [0] is the class swaFromHF reads the config as
		defaults     map[string]any
		qkNorm, bias bool
		hfName       func(string) string
		read         func(hfSource, string) ([]byte, device.DType, []int, bool, error)
		layers       func(*Builder) ([]Layer, error)
	}{
		{name: "gemma2", hf: []string{"Gemma2ForCausalLM"}, hfName: gemmaHFName, read: gemmaHFRead, layers: swaLayers},
		// Gemma3ForConditionalGeneration: the text model of the multimodal
		// checkpoints (hf.Normalize, load_hf_wrapped.go)
		{name: "gemma3", hf: []string{"Gemma3ForCausalLM", "Gemma3ForConditionalGeneration"}, defaults: gemma3TextDefaults, qkNorm: true, hfName: gemmaHFName, read: gemmaHFRead, layers: swaLayers},
		{name: "gpt-oss", hf: []string{"GptOssForCausalLM"}, bias: true, hfName: hfName, read: hfSource.ossTensor, layers: swaLayers},
	} {
		register(&Arch{
			Name: e.name, HF: e.hf,
			FromGGUF: func(g ggufMeta) (Config, error) {
				c, err := g.common(true)
				if err != nil {
					return Config{}, err
				}
				c.QKNorm, c.QKVBias = e.qkNorm, e.bias
				return c, swaFromGGUF(g, &c)
			},
			FromHF: func(hc hf.Config, raw []byte, path string) (Config, error) {
				if e.defaults != nil {
					var err error
					if raw, err = hf.WithDefaults(raw, e.defaults); err == nil {
						hc, err = hf.ParseConfig(raw)
					}
					if err != nil {
						return Config{}, fmt.Errorf("model: %s: %w", path, err)
					}
				}
				c, err := hfCommon(hc, path)
				if err != nil {
					return Config{}, err
				}
				c.QKNorm, c.QKVBias = e.qkNorm, c.QKVBias || e.bias
				return c, swaFromHF(raw, e.hf[0], &c, path)
			},
			HFTensor: e.hfName, HFRead: e.read,
			ConfigJSON: swaConfigJSON,
			Layers:     e.layers,
			KVNeeds:    swaKVNeeds,
			Params:     swaParams,
		})
	}
}

// gemma3TextDefaults are transformers' Gemma3TextConfig defaults, which
// the published multimodal configs' text_config leaves out (gemma-3-12b-it
// gives only the sizes, rope_scaling and sliding_window).
var gemma3TextDefaults = map[string]any{
	"vocab_size": 262208, "hidden_size": 2304, "intermediate_size": 9216, "num_hidden_layers": 26,
	"num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256, "hidden_activation": "gelu_pytorch_tanh",
	"max_position_embeddings": 131072, "rms_norm_eps": 1e-6, "rope_theta": 1e6, "query_pre_attn_scalar": 256,
	"sliding_window": 4096, "rope_local_base_freq": 1e4, "sliding_window_pattern": 6,
}

// swaConfigJSON adds a sliding-window model's keys to its config.json
// equivalent (a GGUF model): the window and the per-layer pattern the swa
// configurator assigns pools by, and gpt-oss's experts.
func swaConfigJSON(c Config, m map[string]any) {
	s := SWAOf(c)
	if s == nil {
		return
	}
	m["sliding_window"] = s.Window
	types := make([]string, len(s.Sliding))
	for i, sl := range s.Sliding {
		types[i] = "full_attention"
		if sl {
			types[i] = "sliding_attention"
		}
	}
	m["layer_types"] = types
	if e := s.MoE; e != nil {
		m["num_local_experts"], m["num_experts_per_tok"] = e.Experts, e.TopK
	}
}

// swaKVNeeds: every layer keeps K and V rows of KVHeads × HeadDim; a
// sliding layer only its window's (kv.LayerNeed.Window).
func swaKVNeeds(c Config) []kv.LayerNeed {
	out := make([]kv.LayerNeed, c.Layers)
	for i := range out {
		out[i] = kv.LayerNeed{KVHeads: c.KVHeads, HeadDim: c.HeadDim, VHeadDim: c.HeadDim, Window: c.LayerWindow(i)}
	}
	return out
}

// swaParams counts the family's parameters: Llama's attention (with
// biases, q/k norms), Gemma's extra norms and GeGLU, gpt-oss's router,
// sinks, output bias and experts with their biases.
func swaParams(c Config) int64 {
	s := SWAOf(c)
	h, q, kv, i := int64(c.Hidden), int64(c.QRow()), int64(c.KVRow()), int64(c.Intermediate)
	per := h + h*q + 2*h*kv + q*h
	if c.QKVBias {
		per += q + 2*kv
	}
	if c.QKNorm {
		per += 2 * int64(c.HeadDim)
	}
	if s != nil && s.MoE != nil {
		e := int64(s.MoE.Experts)
		per += h + int64(c.Heads) + h + e*h + e + e*(3*h*i+2*i+h)
	} else {
		per += h + 3*h*i
		if s != nil && s.Gemma {
			per += 2 * h
		}
	}
	n := int64(c.Layers)*per + int64(c.Vocab)*h + h
	if !c.Tied {
		n += int64(c.Vocab) * h
	}
	return n
}

// gemmaHFRead reads a Gemma checkpoint's tensor, turning its norms w into
// the 1 + w the forward multiplies by (as the GGUF converter bakes in).
func gemmaHFRead(s hfSource, canon string) ([]byte, device.DType, []int, bool, error) {
	raw, typ, dims, ok, err := s.named(gemmaHFName(canon))
	if ok && strings.HasSuffix(canon, "norm.weight") {
		raw, typ = plusOne(raw, typ)
	}
	return raw, typ, dims, ok, err
}

// swaLayers builds the family's layers: attention with the layer's window,
// scale, soft-cap and rope (Gemma 3's sliding layers have their own), its
// sinks and output bias (gpt-oss) or post-norm (Gemma); then Gemma's
// GeGLU MLP with its post-norm, or gpt-oss's experts. The model-level
// extras (Gemma's √hidden embedding scale, the final soft-cap) go to the
// model's heads.
func swaLayers(b *Builder) ([]Layer, error) {
	c := b.C
	s := SWAOf(c)
	var ew device.Elementwise
	if s.Gemma || s.MoE != nil {
		var ok bool
		if ew, ok = b.Kernels().(device.Elementwise); !ok {
			return nil, fmt.Errorf("model: %s needs the device's Elementwise kernels, which it lacks", c.Arch)
		}
	}
	t := Trunk{LogitSoftCap: s.FinalSoftCap}
	if s.Gemma {
		// √hidden in f32, as llama.cpp (HF rounds it to the activation
		// dtype first: docs/architectures/gemma2.md).
		t.EmbedScale = float32(math.Sqrt(float64(c.Hidden)))
	}
	if err := b.SetTrunk(t); err != nil {
		return nil, err
	}
	global, err := b.Rope(c.Rope)
	if err != nil {
		return nil, err
	}
	local := global
	if s.LocalRope != nil {
		if local, err = b.Rope(*s.LocalRope); err != nil {
			return nil, err
		}
	}
	b.AttnShape(c.AttnShape())
	var ones device.Weight
	if s.MoE != nil {
		if ones, err = b.ones(); err != nil {
			return nil, err
		}
	}
	out := make([]Layer, c.Layers)
	for i := range out {
		p := fmt.Sprintf("blk.%d.", i)
		rope := global
		if c.LayerWindow(i) > 0 {
			rope = local
		}
		a := &attention{rope: rope, heads: c.Heads, kvHeads: c.KVHeads, headDim: c.HeadDim, vHeadDim: c.HeadDim, eps: c.RMSEps, opts: c.AttnOpts(i)}
		steps := []weightStep{
			{&a.norm, "attn_norm.weight", 1, c.Hidden, true, true},
			{&a.wq, "attn_q.weight", c.QRow(), c.Hidden, false, true},
			{&a.wk, "attn_k.weight", c.KVRow(), c.Hidden, false, true},
			{&a.wv, "attn_v.weight", c.KVRow(), c.Hidden, false, true},
			{&a.wo, "attn_output.weight", c.Hidden, c.QRow(), false, true},
			{&a.bq, "attn_q.bias", 1, c.QRow(), true, c.QKVBias},
			{&a.bk, "attn_k.bias", 1, c.KVRow(), true, c.QKVBias},
			{&a.bv, "attn_v.bias", 1, c.KVRow(), true, c.QKVBias},
			{&a.bo, "attn_output.bias", 1, c.Hidden, true, s.MoE != nil},
			{&a.opts.Sinks, "attn_sinks.weight", 1, c.Heads, true, s.MoE != nil},
			{&a.qNorm, "attn_q_norm.weight", 1, c.HeadDim, true, c.QKNorm},
			{&a.kNorm, "attn_k_norm.weight", 1, c.HeadDim, true, c.QKNorm},
			{&a.post, "post_attention_norm.weight", 1, c.Hidden, true, s.Gemma},
		}
		if err := b.load(p, steps); err != nil {
			return nil, err
		}
		if s.MoE != nil {
			f, err := ossExperts(b, p, ew, ones)
			if err != nil {
				return nil, err
			}
			out[i] = Layer{Mixer: a, FFN: f}
			continue
		}
		f := &denseFFN{inter: c.Intermediate, eps: c.RMSEps, geglu: ew}
		if err := b.load(p, []weightStep{
			{&f.norm, "ffn_norm.weight", 1, c.Hidden, true, true},
			{&f.gate, "ffn_gate.weight", c.Intermediate, c.Hidden, false, true},
			{&f.up, "ffn_up.weight", c.Intermediate, c.Hidden, false, true},
			{&f.down, "ffn_down.weight", c.Hidden, c.Intermediate, false, true},
			{&f.post, "post_ffw_norm.weight", 1, c.Hidden, true, true},
		}); err != nil {
			return nil, err
		}
		out[i] = Layer{Mixer: a, FFN: f}
	}
	return out, nil
}

// weightStep is one weight of a layer to load: into dst, named name under
// the layer's prefix, a vector of cols values (converted to F32) or a
// rows×cols matrix (as stored), loaded only when need is set.
type weightStep struct {
	dst        *device.Weight
	name       string
	rows, cols int
	vec, need  bool
}

// load reads each needed weight of layer prefix p, in order.
func (b *Builder) load(p string, steps []weightStep) error {
	for _, s := range steps {
		if !s.need {
			continue
		}
		var err error
		if s.vec {
			*s.dst, err = b.Vector(p+s.name, s.cols)
		} else {
			*s.dst, err = b.Matrix(p+s.name, s.rows, s.cols)
		}
		if err != nil {
			return err
		}
	}
	return nil
}
