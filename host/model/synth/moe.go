package synth

import (
	"fmt"
	"math"
	"strings"

	"github.com/kvhost/kvhost/host/model/gguf"
)

// MoESpec is a generated model's experts: layers below FirstDense keep the
// dense MLP of Spec.Intermediate, the others route each token to TopK of
// Experts experts of width ExpertFF plus Shared shared experts (deepseek2).
// Groups > 1 limits routing to TopKGroups groups; Sigmoid selects
// DeepSeek-V3's sigmoid scores with a selection bias (exp_probs_b),
// normalised top-k weights and Scale.
type MoESpec struct {
	Experts, TopK, ExpertFF, Shared, FirstDense int
	Groups, TopKGroups                          int
	Sigmoid                                     bool
	Scale                                       float32
}

// MLASpec is a generated deepseek2 model's latent attention (QLora 0: the
// query projected directly, V2-Lite's form).
type MLASpec struct {
	QLora, KVLora, Nope, Rope, V int
}

// HeadDim is the qwen3moe head width of a spec (hidden / heads).
func (s Spec) headDim() int { return s.Hidden / s.Heads }

// ArchSizes are gen-model's presets for the architectures beyond Llama;
// "deepseek3" is a deepseek2 file with V3's q_lora and sigmoid routing.
var ArchSizes = map[string]map[string]Spec{
	"qwen3moe": {
		"tiny":   {Hidden: 64, Layers: 2, Heads: 4, KVHeads: 2, Intermediate: 128, Vocab: 32000, ContextLen: 2048, MoE: &MoESpec{Experts: 8, TopK: 2, ExpertFF: 32}},
		"small":  {Hidden: 512, Layers: 8, Heads: 8, KVHeads: 4, Intermediate: 1024, Vocab: 32000, ContextLen: 2048, MoE: &MoESpec{Experts: 16, TopK: 4, ExpertFF: 256}},
		"medium": {Hidden: 1024, Layers: 12, Heads: 16, KVHeads: 4, Intermediate: 2048, Vocab: 32000, ContextLen: 2048, MoE: &MoESpec{Experts: 32, TopK: 8, ExpertFF: 384}},
	},
	"deepseek2": {
		"tiny": {Hidden: 64, Layers: 3, Heads: 4, KVHeads: 1, Intermediate: 128, Vocab: 32000, ContextLen: 2048,
			MoE: &MoESpec{Experts: 8, TopK: 2, ExpertFF: 32, Shared: 1, FirstDense: 1}, MLA: &MLASpec{KVLora: 32, Nope: 16, Rope: 8, V: 16}},
		"small": {Hidden: 512, Layers: 8, Heads: 8, KVHeads: 1, Intermediate: 1024, Vocab: 32000, ContextLen: 2048,
			MoE: &MoESpec{Experts: 16, TopK: 4, ExpertFF: 256, Shared: 2, FirstDense: 1, Groups: 4, TopKGroups: 2}, MLA: &MLASpec{KVLora: 128, Nope: 64, Rope: 32, V: 64}},
		"medium": {Hidden: 1024, Layers: 12, Heads: 16, KVHeads: 1, Intermediate: 2816, Vocab: 32000, ContextLen: 2048,
			MoE: &MoESpec{Experts: 32, TopK: 6, ExpertFF: 352, Shared: 2, FirstDense: 1, Groups: 4, TopKGroups: 2}, MLA: &MLASpec{KVLora: 256, Nope: 64, Rope: 32, V: 64}},
	},
	"deepseek3": {
		"tiny": {Hidden: 64, Layers: 3, Heads: 4, KVHeads: 1, Intermediate: 128, Vocab: 32000, ContextLen: 2048,
			MoE: &MoESpec{Experts: 8, TopK: 2, ExpertFF: 32, Shared: 1, FirstDense: 1, Groups: 4, TopKGroups: 2, Sigmoid: true, Scale: 2.5},
			MLA: &MLASpec{QLora: 48, KVLora: 32, Nope: 16, Rope: 8, V: 16}},
		"small": {Hidden: 512, Layers: 8, Heads: 8, KVHeads: 1, Intermediate: 1024, Vocab: 32000, ContextLen: 2048,
			MoE: &MoESpec{Experts: 16, TopK: 4, ExpertFF: 256, Shared: 1, FirstDense: 1, Groups: 4, TopKGroups: 2, Sigmoid: true, Scale: 2.5},
			MLA: &MLASpec{QLora: 192, KVLora: 128, Nope: 64, Rope: 32, V: 64}},
		"medium": {Hidden: 1024, Layers: 12, Heads: 16, KVHeads: 1, Intermediate: 2816, Vocab: 32000, ContextLen: 2048,
			MoE: &MoESpec{Experts: 32, TopK: 8, ExpertFF: 352, Shared: 1, FirstDense: 2, Groups: 8, TopKGroups: 4, Sigmoid: true, Scale: 2.5},
			MLA: &MLASpec{QLora: 384, KVLora: 256, Nope: 64, Rope: 32, V: 64}},
	},
}

// Architectures are what ArchPreset (and gen-model --arch) writes, as
// llama.cpp's converter writes them (docs/architectures/*.md): llama; the
// sliding-window family (swa.go): mistral (Llama tensors and a window on
// every layer), gemma2 (1:1 local/global, soft-caps, sandwich norms, tied
// output), gemma3 (5:1 with q/k norms and a local rope base), gpt-oss (1:1,
// sinks, biases, MXFP4 experts, YaRN); the expert family (this file):
// qwen3moe, deepseek2 (V2-Lite's form) and deepseek3 (V3's q_lora and
// sigmoid routing in a deepseek2 file).
var Architectures = []string{"llama", "mistral", "gemma2", "gemma3", "gpt-oss", "qwen3moe", "deepseek2", "deepseek3"}

// ArchPreset is Preset for arch, one of Architectures.
func ArchPreset(arch, size, dtype string) (Spec, error) {
	if arch == "" || arch == "llama" {
		return Preset(size, dtype)
	}
	if swaArch(arch) {
		return swaPreset(arch, size, dtype)
	}
	sizes, ok := ArchSizes[arch]
	if !ok {
		return Spec{}, fmt.Errorf("synth: unknown architecture %q (%s)", arch, strings.Join(Architectures, ", "))
	}
	s, ok := sizes[size]
	if !ok {
		return Spec{}, fmt.Errorf("synth: unknown size %q for %s (tiny, small, medium)", size, arch)
	}
	name, _, err := lookupFType(dtype)
	if err != nil {
		return Spec{}, err
	}
	moe, mla := *s.MoE, s.MLA
	s.MoE = &moe
	if mla != nil {
		c := *mla
		s.MLA = &c
	}
	s.Arch, s.DType, s.Name, s.Seed = arch, name, "kvhost-demo-"+arch+"-"+size+"-"+name, 0x6b76686f7374
	if arch == "deepseek3" {
		s.Arch = "deepseek2"
	}
	return s, nil
}

// archParams counts a qwen3moe or deepseek2 spec's parameters.
func (s Spec) archParams() int64 {
	h, e := int64(s.Hidden), s.MoE
	var attn int64
	if a := s.MLA; a != nil {
		H, qk := int64(s.Heads), int64(a.Nope+a.Rope)
		attn = h*int64(a.KVLora+a.Rope) + int64(a.KVLora) + H*int64(a.Nope+a.V)*int64(a.KVLora) + H*int64(a.V)*h
		if a.QLora > 0 {
			attn += h*int64(a.QLora) + int64(a.QLora) + int64(a.QLora)*H*qk
		} else {
			attn += h * H * qk
		}
	} else {
		hd := int64(s.headDim())
		attn = 2*h*int64(s.Heads)*hd + 2*h*int64(s.KVHeads)*hd + 2*hd
	}
	moe := h*int64(e.Experts) + 3*h*int64(e.ExpertFF)*int64(e.Experts+e.Shared)
	dense := 3 * h * int64(s.Intermediate)
	return int64(s.Layers)*(attn+2*h) + int64(e.FirstDense)*dense + int64(s.Layers-e.FirstDense)*moe + 2*int64(s.Vocab)*h + h
}

// archLayout is layout for qwen3moe and deepseek2: llama.cpp's converter's
// metadata keys and tensor names (docs/architectures/{qwen3moe,deepseek2}.md),
// the split attn_k_b/attn_v_b form of newer deepseek2 conversions.
func archLayout(s Spec) ([]gguf.KV, []tensorPlan, error) {
	e := s.MoE
	if e == nil || s.Heads <= 0 || s.Hidden%s.Heads != 0 || s.KVHeads <= 0 || s.Heads%s.KVHeads != 0 {
		return nil, nil, fmt.Errorf("synth: %s needs experts and heads %d / kv heads %d dividing hidden %d", s.Arch, s.Heads, s.KVHeads, s.Hidden)
	}
	if (s.Arch == "deepseek2") != (s.MLA != nil) || (s.Arch != "deepseek2" && s.Arch != "qwen3moe") {
		return nil, nil, fmt.Errorf("synth: architecture %q with latent attention %v: want qwen3moe, or deepseek2 with MLA", s.Arch, s.MLA != nil)
	}
	tok, err := tokenizerKVs(s)
	if err != nil {
		return nil, nil, err
	}
	_, ft, err := lookupFType(s.DType)
	if err != nil {
		return nil, nil, err
	}
	theta := s.RopeTheta
	if theta == 0 {
		theta = 10000
	}
	a := s.Arch + "."
	u32 := func(k string, v int) gguf.KV { return gguf.KV{Key: a + k, Value: gguf.NewUint32(uint32(v))} }
	kvs := []gguf.KV{
		{Key: "general.architecture", Value: gguf.NewString(s.Arch)},
		{Key: "general.name", Value: gguf.NewString(s.Name)},
		{Key: "general.file_type", Value: gguf.NewUint32(ft.id)},
		u32("context_length", s.ContextLen), u32("embedding_length", s.Hidden), u32("block_count", s.Layers),
		u32("feed_forward_length", s.Intermediate), u32("attention.head_count", s.Heads),
		u32("attention.head_count_kv", s.KVHeads), u32("vocab_size", s.Vocab),
		u32("expert_count", e.Experts), u32("expert_used_count", e.TopK), u32("expert_feed_forward_length", e.ExpertFF),
		{Key: a + "rope.freq_base", Value: gguf.NewFloat32(theta)},
		{Key: a + "attention.layer_norm_rms_epsilon", Value: gguf.NewFloat32(1e-6)},
	}
	if m := s.MLA; m != nil {
		gating := 1
		if e.Sigmoid {
			gating = 2
		}
		scale := e.Scale
		if scale == 0 {
			scale = 1
		}
		kvs = append(kvs, u32("rope.dimension_count", m.Rope), u32("attention.kv_lora_rank", m.KVLora),
			u32("attention.key_length", m.KVLora+m.Rope), u32("attention.value_length", m.KVLora),
			u32("attention.key_length_mla", m.Nope+m.Rope), u32("attention.value_length_mla", m.V),
			u32("leading_dense_block_count", e.FirstDense), u32("expert_shared_count", e.Shared),
			u32("expert_gating_func", gating), u32("expert_group_count", max(e.Groups, 1)), u32("expert_group_used_count", max(e.TopKGroups, 1)),
			gguf.KV{Key: a + "expert_weights_scale", Value: gguf.NewFloat32(scale)},
			gguf.KV{Key: a + "expert_weights_norm", Value: gguf.NewBool(e.Sigmoid)})
		if m.QLora > 0 {
			kvs = append(kvs, u32("attention.q_lora_rank", m.QLora))
		}
	} else {
		kvs = append(kvs, u32("rope.dimension_count", s.headDim()), u32("attention.key_length", s.headDim()), u32("attention.value_length", s.headDim()))
	}
	kvs = append(kvs, tok...)
	if ft.base.Dequantizable() {
		kvs = append(kvs, gguf.KV{Key: "general.quantization_version", Value: gguf.NewUint32(2)})
	}
	d := s.Hidden
	std := func(n int) float64 { return 1 / math.Sqrt(float64(n)) }
	mat := func(name string, rows, cols int, sd float64) tensorPlan {
		return tensorPlan{name: name, rows: rows, cols: cols, std: sd}
	}
	vec := func(name string, n int) tensorPlan { return tensorPlan{name: name, cols: n, vec: true} }
	plans := []tensorPlan{mat("token_embd.weight", s.Vocab, d, 1)}
	for l := 0; l < s.Layers; l++ {
		p := fmt.Sprintf("blk.%d.", l)
		plans = append(plans, vec(p+"attn_norm.weight", d))
		if m := s.MLA; m != nil {
			H, qk := s.Heads, m.Nope+m.Rope
			if m.QLora > 0 {
				plans = append(plans, mat(p+"attn_q_a.weight", m.QLora, d, std(d)), vec(p+"attn_q_a_norm.weight", m.QLora),
					mat(p+"attn_q_b.weight", H*qk, m.QLora, 2/math.Sqrt(float64(m.QLora))))
			} else {
				plans = append(plans, mat(p+"attn_q.weight", H*qk, d, 2*std(d)))
			}
			plans = append(plans, mat(p+"attn_kv_a_mqa.weight", m.KVLora+m.Rope, d, 2*std(d)), vec(p+"attn_kv_a_norm.weight", m.KVLora),
				tensorPlan{name: p + "attn_k_b.weight", rows: m.KVLora, cols: m.Nope, depth: H, std: std(m.KVLora)},
				tensorPlan{name: p + "attn_v_b.weight", rows: m.V, cols: m.KVLora, depth: H, std: std(m.KVLora)},
				mat(p+"attn_output.weight", d, H*m.V, std(H*m.V)))
		} else {
			hd := s.headDim()
			plans = append(plans, mat(p+"attn_q.weight", s.Heads*hd, d, 2*std(d)), mat(p+"attn_k.weight", s.KVHeads*hd, d, 2*std(d)),
				mat(p+"attn_v.weight", s.KVHeads*hd, d, std(d)), mat(p+"attn_output.weight", d, s.Heads*hd, std(s.Heads*hd)),
				vec(p+"attn_q_norm.weight", hd), vec(p+"attn_k_norm.weight", hd))
		}
		plans = append(plans, vec(p+"ffn_norm.weight", d))
		if l < e.FirstDense {
			plans = append(plans, mat(p+"ffn_gate.weight", s.Intermediate, d, std(d)), mat(p+"ffn_up.weight", s.Intermediate, d, std(d)),
				mat(p+"ffn_down.weight", d, s.Intermediate, std(s.Intermediate)))
			continue
		}
		// The router is scaled up so tokens prefer different experts.
		plans = append(plans, tensorPlan{name: p + "ffn_gate_inp.weight", rows: e.Experts, cols: d, std: 4 * std(d), router: true})
		if e.Sigmoid {
			plans = append(plans, tensorPlan{name: p + "exp_probs_b.bias", cols: e.Experts, vec: true, bias: true})
		}
		plans = append(plans,
			tensorPlan{name: p + "ffn_gate_exps.weight", rows: e.ExpertFF, cols: d, depth: e.Experts, std: std(d)},
			tensorPlan{name: p + "ffn_up_exps.weight", rows: e.ExpertFF, cols: d, depth: e.Experts, std: std(d)},
			tensorPlan{name: p + "ffn_down_exps.weight", rows: d, cols: e.ExpertFF, depth: e.Experts, std: std(e.ExpertFF)})
		if e.Shared > 0 {
			f := e.Shared * e.ExpertFF
			plans = append(plans, mat(p+"ffn_gate_shexp.weight", f, d, std(d)), mat(p+"ffn_up_shexp.weight", f, d, std(d)),
				mat(p+"ffn_down_shexp.weight", d, f, std(f)))
		}
	}
	plans = append(plans, vec("output_norm.weight", d), mat("output.weight", s.Vocab, d, std(d)))
	return kvs, plans, nil
}
