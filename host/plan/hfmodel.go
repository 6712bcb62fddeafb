package plan

import (
	"encoding/json"
	"fmt"
	"math"
	"strings"

	"github.com/kvhost/kvhost/host/model/hf"
)

// HFModel is what a GPU plan reads from a Hugging Face config.json besides
// the KV layout, which the configurator plugin reads itself from the same
// bytes: the shapes of the runtime peaks (spec §4) and an estimate of the
// weights. It knows every architecture a built-in configurator claims
// (dense Llama/Qwen/Mistral/Gemma, MoE Mixtral/Qwen-MoE/gpt-oss, MLA
// DeepSeek-V2/V3, hybrid Qwen3-Next and Nemotron-H), whether or not kvhost
// can serve it yet: planning needs only the config.
type HFModel struct {
	Architecture string `json:"architecture"`
	ModelType    string `json:"model_type"`
	Hidden       int    `json:"hidden_size"`
	Layers       int    `json:"num_hidden_layers"`
	Heads        int    `json:"num_attention_heads"`
	KVHeads      int    `json:"num_key_value_heads"`
	HeadDim      int    `json:"head_dim"`
	// Intermediate is the dense MLP width (a MoE model's dense layers; the
	// expert width is MoE.Intermediate).
	Intermediate int  `json:"intermediate_size"`
	Vocab        int  `json:"vocab_size"`
	ContextLen   int  `json:"context_length"`
	Tied         bool `json:"tied_embeddings"`
	// DType is torch_dtype; Quant is quantization_config.quant_method.
	DType string    `json:"torch_dtype,omitempty"`
	Quant string    `json:"quant_method,omitempty"`
	MLA   *MLAShape `json:"mla,omitempty"`
	MoE   *MoEShape `json:"moe,omitempty"`
	// Layer counts by kind (they add up to Layers): attention layers with an
	// MLP or MoE block, GDN (Qwen3-Next linear attention) and Mamba2 mixer
	// layers, and Nemotron-H's attention-only and MLP-only layers.
	AttentionLayers int `json:"attention_layers"`
	GDNLayers       int `json:"gdn_layers,omitempty"`
	Mamba2Layers    int `json:"mamba2_layers,omitempty"`
	MLPOnlyLayers   int `json:"mlp_only_layers,omitempty"`
	// VisionLayers and VisionHidden describe a VLM's vision tower (spec §2
	// VLM adjustment of f); zero for text models.
	VisionLayers int `json:"vision_layers,omitempty"`
	VisionHidden int `json:"vision_hidden,omitempty"`
	// Params is the parameter count and WeightBytes their stored size
	// (torch_dtype, with fp8 or mxfp4 quantized linear layers), estimated
	// from the shapes; exact for the dense architectures.
	Params      int64 `json:"params"`
	WeightBytes int64 `json:"weight_bytes"`

	raw hfFields
}

// MLAShape is DeepSeek's multi-head latent attention.
type MLAShape struct {
	QLoraRank  int `json:"q_lora_rank"` // 0: q projected directly
	KVLoraRank int `json:"kv_lora_rank"`
	RopeDim    int `json:"qk_rope_head_dim"`
	NopeDim    int `json:"qk_nope_head_dim"`
	VHeadDim   int `json:"v_head_dim"`
}

// MoEShape is a mixture-of-experts block (spec §4 "MoE").
type MoEShape struct {
	Experts      int `json:"experts"`
	TopK         int `json:"top_k"`
	Intermediate int `json:"expert_intermediate"`
	// Shared is the shared-expert MLP width (DeepSeek: n_shared_experts ×
	// moe_intermediate_size; Qwen: shared_expert_intermediate_size).
	Shared int `json:"shared_intermediate,omitempty"`
	// Layers is how many layers hold the MoE block; the others hold a
	// dense MLP of Intermediate.
	Layers int `json:"layers"`
}

// hfFields is a config.json object with a nested text_config's keys filling
// the missing top-level ones (multimodal wrappers such as Gemma-3).
type hfFields map[string]json.RawMessage

func parseHFFields(raw []byte) (hfFields, error) {
	raw, err := hf.Spellings(raw) // transformers 5's dtype, rope_parameters
	if err != nil {
		return nil, fmt.Errorf("plan: %w", err)
	}
	var top hfFields
	if err := json.Unmarshal(raw, &top); err != nil {
		return nil, fmt.Errorf("plan: config.json: %w", err)
	}
	if top == nil {
		return nil, fmt.Errorf("plan: config.json: want a JSON object")
	}
	if tc, ok := top["text_config"]; ok && string(tc) != "null" {
		var inner hfFields
		if err := json.Unmarshal(tc, &inner); err != nil {
			return nil, fmt.Errorf("plan: config.json text_config: %w", err)
		}
		for k, v := range inner {
			if _, ok := top[k]; !ok {
				top[k] = v
			}
		}
	}
	return top, nil
}

// maxHFDim bounds every integer read from a config.json (the largest
// published models stay far below it), and maxHFLayers the layer count, so
// a hostile config cannot make the estimate loop or overflow.
const (
	maxHFDim    = 1 << 24
	maxHFLayers = 4096
)

func (f hfFields) has(k string) bool { v, ok := f[k]; return ok && string(v) != "null" }

// int reads the first present key among keys; absent keys give def.
func (f hfFields) int(def int, keys ...string) (int, error) {
	for _, k := range keys {
		if !f.has(k) {
			continue
		}
		var v float64
		if err := json.Unmarshal(f[k], &v); err != nil || v != math.Trunc(v) || v < 0 || v > maxHFDim {
			return 0, fmt.Errorf("plan: config.json %s = %s: want an integer in [0, %d]", k, f[k], maxHFDim)
		}
		return int(v), nil
	}
	return def, nil
}

func (f hfFields) str(k string) string {
	var s string
	if f.has(k) {
		_ = json.Unmarshal(f[k], &s)
	}
	return s
}

func (f hfFields) strs(k string) []string {
	var s []string
	if f.has(k) {
		_ = json.Unmarshal(f[k], &s)
	}
	return s
}

func (f hfFields) bool(def bool, k string) bool {
	var b bool
	if f.has(k) && json.Unmarshal(f[k], &b) == nil {
		return b
	}
	return def
}

// archDefaults are transformers' config defaults for keys that published
// config.json files of these model types leave out (Gemma-3's text config
// carries only what differs from them).
var archDefaults = map[string]struct {
	vocab, context, headDim int
	tied                    bool
}{
	"gemma":       {256000, 8192, 256, true},
	"gemma2":      {256000, 8192, 256, true},
	"gemma3":      {262208, 131072, 256, true},
	"gemma3_text": {262208, 131072, 256, true},
}

// ParseHFModel reads the plan's view of a config.json. It refuses a config
// that lacks a shape the peaks need, naming the key.
func ParseHFModel(raw []byte) (HFModel, error) {
	f, err := parseHFFields(raw)
	if err != nil {
		return HFModel{}, err
	}
	m := HFModel{raw: f, ModelType: f.str("model_type"), DType: f.str("torch_dtype")}
	if a := f.strs("architectures"); len(a) > 0 {
		m.Architecture = a[0]
	}
	if m.Architecture == "" {
		return HFModel{}, fmt.Errorf("plan: config.json has no architectures entry")
	}
	def := archDefaults[m.ModelType]
	var q struct {
		QuantMethod string `json:"quant_method"`
	}
	if f.has("quantization_config") {
		_ = json.Unmarshal(f["quantization_config"], &q)
	}
	m.Quant = q.QuantMethod
	req := func(dst *int, keys ...string) {
		if err != nil {
			return
		}
		if *dst, err = f.int(0, keys...); err == nil && *dst == 0 {
			err = fmt.Errorf("plan: config.json lacks %s (or it is 0)", keys[0])
		}
	}
	req(&m.Hidden, "hidden_size", "n_embd")
	req(&m.Layers, "num_hidden_layers", "n_layer", "num_layers")
	req(&m.Heads, "num_attention_heads", "n_head")
	if err != nil {
		return HFModel{}, err
	}
	if m.Layers > maxHFLayers {
		return HFModel{}, fmt.Errorf("plan: config.json num_hidden_layers = %d: want at most %d", m.Layers, maxHFLayers)
	}
	if m.KVHeads, err = f.int(m.Heads, "num_key_value_heads", "num_kv_heads"); err != nil {
		return HFModel{}, err
	}
	if m.HeadDim, err = f.int(def.headDim, "head_dim", "attention_head_dim"); err != nil {
		return HFModel{}, err
	}
	if m.HeadDim == 0 {
		m.HeadDim = m.Hidden / m.Heads
	}
	if m.Intermediate, err = f.int(0, "intermediate_size", "n_inner"); err != nil {
		return HFModel{}, err
	}
	if m.Vocab, err = f.int(def.vocab, "vocab_size"); err != nil || m.Vocab == 0 {
		return HFModel{}, fmt.Errorf("plan: config.json lacks vocab_size")
	}
	if m.ContextLen, err = f.int(def.context, "max_position_embeddings", "n_positions", "max_sequence_length", "seq_length"); err != nil || m.ContextLen == 0 {
		return HFModel{}, fmt.Errorf("plan: config.json lacks max_position_embeddings")
	}
	m.Tied = f.bool(def.tied, "tie_word_embeddings")
	if f.has("kv_lora_rank") {
		mla := &MLAShape{}
		for _, x := range []struct {
			dst *int
			key string
		}{{&mla.QLoraRank, "q_lora_rank"}, {&mla.KVLoraRank, "kv_lora_rank"}, {&mla.RopeDim, "qk_rope_head_dim"}, {&mla.NopeDim, "qk_nope_head_dim"}, {&mla.VHeadDim, "v_head_dim"}} {
			if *x.dst, err = f.int(0, x.key); err != nil {
				return HFModel{}, err
			}
		}
		if mla.KVLoraRank == 0 || mla.RopeDim == 0 || mla.NopeDim+mla.RopeDim == 0 || mla.VHeadDim == 0 {
			return HFModel{}, fmt.Errorf("plan: config.json MLA model needs kv_lora_rank, qk_rope_head_dim, qk_nope_head_dim and v_head_dim")
		}
		m.MLA = mla
	}
	if err := m.readLayers(); err != nil {
		return HFModel{}, err
	}
	if err := m.readMoE(); err != nil {
		return HFModel{}, err
	}
	if m.Intermediate == 0 && (m.MoE == nil || m.MoE.Layers < m.Layers-m.GDNLayers-m.Mamba2Layers) {
		return HFModel{}, fmt.Errorf("plan: config.json lacks intermediate_size")
	}
	if vc := f["vision_config"]; len(vc) > 0 && string(vc) != "null" {
		v, err := parseHFFields(vc)
		if err != nil {
			return HFModel{}, err
		}
		if m.VisionLayers, err = v.int(0, "num_hidden_layers"); err != nil {
			return HFModel{}, err
		}
		if m.VisionHidden, err = v.int(0, "hidden_size"); err != nil {
			return HFModel{}, err
		}
	}
	m.Params, m.WeightBytes = m.estimateWeights()
	return m, nil
}

// readLayers assigns layer kinds from layer_types (Qwen3-Next),
// full_attention_interval, or Nemotron-H's hybrid_override_pattern.
func (m *HFModel) readLayers() error {
	f := m.raw
	m.AttentionLayers = m.Layers
	if p := f.str("hybrid_override_pattern"); p != "" {
		if len(p) != m.Layers {
			return fmt.Errorf("plan: config.json hybrid_override_pattern has %d layers, num_hidden_layers is %d", len(p), m.Layers)
		}
		m.AttentionLayers = strings.Count(p, "*")
		m.Mamba2Layers = strings.Count(p, "M")
		m.MLPOnlyLayers = m.Layers - m.AttentionLayers - m.Mamba2Layers
		return nil
	}
	if !f.has("linear_num_value_heads") {
		return nil
	}
	if types := f.strs("layer_types"); len(types) == m.Layers {
		m.AttentionLayers = 0
		for _, t := range types {
			if t == "full_attention" {
				m.AttentionLayers++
			}
		}
	} else if k, err := f.int(0, "full_attention_interval"); err != nil {
		return err
	} else if k > 0 {
		m.AttentionLayers = m.Layers / k
	}
	m.GDNLayers = m.Layers - m.AttentionLayers
	return nil
}

func (m *HFModel) readMoE() error {
	f := m.raw
	experts, err := f.int(0, "n_routed_experts", "num_experts", "num_local_experts")
	if err != nil || experts == 0 {
		return err
	}
	moe := &MoEShape{Experts: experts}
	if moe.TopK, err = f.int(0, "num_experts_per_tok", "experts_per_token", "moe_topk"); err != nil {
		return err
	}
	// gpt-oss and Mixtral give the expert width as intermediate_size.
	if moe.Intermediate, err = f.int(m.Intermediate, "moe_intermediate_size"); err != nil {
		return err
	}
	if n, err := f.int(0, "n_shared_experts"); err != nil {
		return err
	} else if n > 0 {
		moe.Shared = n * moe.Intermediate
	}
	if moe.Shared == 0 {
		if moe.Shared, err = f.int(0, "shared_expert_intermediate_size"); err != nil {
			return err
		}
	}
	first, err := f.int(0, "first_k_dense_replace")
	if err != nil {
		return err
	}
	freq, err := f.int(1, "moe_layer_freq", "decoder_sparse_step")
	if err != nil {
		return err
	}
	var dense []int
	if f.has("mlp_only_layers") {
		_ = json.Unmarshal(f["mlp_only_layers"], &dense)
	}
	for i := range m.Layers {
		if i >= first && (freq <= 1 || (i+1)%freq == 0) && !contains(dense, i) {
			moe.Layers++
		}
	}
	if moe.TopK == 0 || moe.Intermediate == 0 {
		return fmt.Errorf("plan: config.json MoE model needs num_experts_per_tok and moe_intermediate_size")
	}
	m.MoE = moe
	return nil
}

func contains(s []int, v int) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// estimateWeights counts parameters from the shapes and sizes them: the
// serving dtype (torch_dtype; float32 checkpoints are served in bf16, as
// SGLang's dtype "auto" does) for embeddings, norms and routers, and for
// the linear layers fp8 (1 byte plus one FP32 scale per 128×128 block) or
// mxfp4 experts (4 bits plus one E8M0 scale per 32) when the config says so.
func (m *HFModel) estimateWeights() (params, bytes int64) {
	f := m.raw
	h, v := int64(m.Hidden), int64(m.Vocab)
	const elem = 2.0 // bf16 or fp16, also for float32 checkpoints
	lin := elem      // bytes per linear-layer weight
	if m.Quant == "fp8" {
		lin = 1 + 4.0/(128*128)
	}
	var other, linear, experts float64
	add := func(dst *float64, n int64) { *dst += float64(n) }
	add(&other, v*h+h) // embedding, final norm
	if !m.Tied {
		add(&other, v*h)
	}
	qd, kvd := int64(m.Heads*m.HeadDim), int64(m.KVHeads*m.HeadDim)
	attn := func() {
		if a := m.MLA; a != nil {
			qk := int64(m.Heads * (a.NopeDim + a.RopeDim))
			if a.QLoraRank > 0 {
				add(&linear, h*int64(a.QLoraRank)+int64(a.QLoraRank)*qk)
				add(&other, int64(a.QLoraRank))
			} else {
				add(&linear, h*qk)
			}
			add(&linear, h*int64(a.KVLoraRank+a.RopeDim)+int64(a.KVLoraRank)*int64(m.Heads*(a.NopeDim+a.VHeadDim))+int64(m.Heads*a.VHeadDim)*h)
			add(&other, int64(a.KVLoraRank))
			return
		}
		q := qd
		if m.GDNLayers > 0 { // Qwen3-Next: q_proj carries the output gate
			q *= 2
		}
		add(&linear, h*q+2*h*kvd+qd*h)
		if f.bool(false, "attention_bias") || f.bool(false, "qkv_bias") || strings.HasPrefix(m.ModelType, "qwen2") {
			add(&other, q+2*kvd)
		}
		if m.ModelType == "qwen3" || m.ModelType == "qwen3_moe" || m.ModelType == "qwen3_next" {
			add(&other, 2*int64(m.HeadDim)) // q/k norms
		}
		if m.ModelType == "gpt_oss" {
			add(&other, h+int64(m.Heads)) // o_proj bias, sinks
		}
	}
	norms := int64(2)
	if strings.HasPrefix(m.ModelType, "gemma2") || strings.HasPrefix(m.ModelType, "gemma3") {
		norms = 4
	}
	for range m.AttentionLayers {
		attn()
		add(&other, norms*h)
	}
	if m.GDNLayers > 0 {
		kh, _ := f.int(0, "linear_num_key_heads")
		kd, _ := f.int(0, "linear_key_head_dim")
		vh, _ := f.int(0, "linear_num_value_heads")
		vd, _ := f.int(0, "linear_value_head_dim")
		k, _ := f.int(4, "linear_conv_kernel_dim")
		conv := int64(2*kh*kd + vh*vd)
		for range m.GDNLayers {
			add(&linear, h*int64(2*kh*kd+2*vh*vd)+h*int64(2*vh)+int64(vh*vd)*h)
			add(&other, conv*int64(k)+int64(2*vh+vd)+2*h)
		}
	}
	if m.Mamba2Layers > 0 {
		nh, _ := f.int(0, "mamba_num_heads")
		hd, _ := f.int(0, "mamba_head_dim")
		g, _ := f.int(1, "n_groups")
		st, _ := f.int(0, "ssm_state_size")
		k, _ := f.int(4, "conv_kernel")
		inner := int64(nh * hd)
		conv := inner + int64(2*g*st)
		for range m.Mamba2Layers {
			add(&linear, h*(2*inner+int64(2*g*st+nh))+inner*h)
			add(&other, conv*int64(k)+conv+int64(3*nh)+inner+h)
		}
	}
	// MLP blocks: every attention/GDN layer has one (MoE or dense);
	// Nemotron-H's MLP-only layers are ungated (relu²).
	mlpLayers := m.AttentionLayers + m.GDNLayers
	if m.Mamba2Layers > 0 {
		mlpLayers = 0
		for range m.MLPOnlyLayers {
			add(&linear, 2*h*int64(m.Intermediate))
			add(&other, h)
		}
	}
	moeLayers := 0
	if m.MoE != nil {
		moeLayers = min(m.MoE.Layers, mlpLayers)
		e := m.MoE
		for range moeLayers {
			add(&experts, int64(e.Experts)*3*h*int64(e.Intermediate))
			add(&linear, 3*h*int64(e.Shared))
			add(&other, h*int64(e.Experts))
			if m.ModelType == "gpt_oss" {
				add(&other, int64(e.Experts)*(3*int64(e.Intermediate)+h+1)) // expert and router biases
			}
			if e.Shared > 0 && m.ModelType != "deepseek_v2" && m.ModelType != "deepseek_v3" {
				add(&other, h) // Qwen's shared-expert gate
			}
		}
	}
	for range mlpLayers - moeLayers {
		add(&linear, 3*h*int64(m.Intermediate))
	}
	if m.VisionLayers > 0 {
		vh := int64(m.VisionHidden)
		vi, _ := parseVisionIntermediate(f)
		add(&other, int64(m.VisionLayers)*(4*vh*vh+2*vh*vi))
	}
	expBytes := lin
	if m.Quant == "mxfp4" {
		expBytes = 4.25 / 8
	}
	params = int64(other + linear + experts)
	bytes = int64(other*elem + linear*lin + experts*expBytes)
	return params, bytes
}

func parseVisionIntermediate(f hfFields) (int64, error) {
	vc, err := parseHFFields(f["vision_config"])
	if err != nil {
		return 0, err
	}
	n, err := vc.int(0, "intermediate_size")
	return int64(n), err
}
