package model

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/kvhost/kvhost/host/device"
	kcpu "github.com/kvhost/kvhost/kernels/cpu"
)

// MoEConfig is a mixture-of-experts FFN (Qwen3-MoE, DeepSeek-V2/V3; names
// and sources in docs/architectures/{qwen3moe,deepseek2}.md). Layers below
// FirstDense keep the dense SwiGLU MLP of Config.Intermediate; every other
// layer routes each token to Router.TopK of Router.Experts SwiGLU experts
// of width Intermediate, plus a shared expert of width Shared (0: none)
// that every token passes through.
type MoEConfig struct {
	Router       device.Router `json:"router"`
	Intermediate int           `json:"expert_intermediate_size"`
	Shared       int           `json:"shared_intermediate_size,omitempty"`
	FirstDense   int           `json:"first_dense_layers,omitempty"`
	// SelectionBias: the router adds a per-expert bias (DeepSeek-V3's
	// e_score_correction_bias, GGUF exp_probs_b) to the scores it selects by.
	SelectionBias bool `json:"selection_bias,omitempty"`
}

// validate names the first field out of range.
func (e *MoEConfig) validate(c Config) error {
	switch {
	case e.Intermediate <= 0 || e.Intermediate > maxDim:
		return fmt.Errorf("model: moe_intermediate_size = %d is out of range [1, %d]", e.Intermediate, maxDim)
	case e.Shared < 0 || e.Shared > maxDim*16:
		return fmt.Errorf("model: shared expert width = %d is out of range [0, %d]", e.Shared, maxDim*16)
	case e.FirstDense < 0 || e.FirstDense > c.Layers:
		return fmt.Errorf("model: first_k_dense_replace = %d is out of range [0, num_layers %d]", e.FirstDense, c.Layers)
	}
	if err := e.Router.Validate(); err != nil {
		return fmt.Errorf("model: moe router (n_routed_experts %d, num_experts_per_tok %d, n_group %d, topk_group %d): %w",
			e.Router.Experts, e.Router.TopK, e.Router.Groups, e.Router.TopKGroups, err)
	}
	return nil
}

// MoELayer reports whether layer l holds the routed experts.
func (c Config) MoELayer(l int) bool { e := c.moe(); return e != nil && l >= e.FirstDense }

// moeFromGGUF reads the expert metadata llama.cpp's converter writes
// (prefix a = "<arch>."). defaultNorm is what the architecture's graph does
// when expert_weights_norm is absent (qwen3moe always normalises).
func moeFromGGUF(g ggufMeta, a string, defaultNorm bool, c Config) (*MoEConfig, error) {
	e := &MoEConfig{}
	r := &e.Router
	ints := []struct {
		dst      *int
		key      string
		def      int
		required bool
	}{
		{&r.Experts, "expert_count", 0, true},
		{&r.TopK, "expert_used_count", 0, true},
		{&e.Intermediate, "expert_feed_forward_length", 0, false},
		{&e.Shared, "expert_shared_count", 0, false},
		{&e.FirstDense, "leading_dense_block_count", 0, false},
		{&r.Groups, "expert_group_count", 0, false},
		{&r.TopKGroups, "expert_group_used_count", 0, false},
	}
	for _, it := range ints {
		var err error
		if *it.dst, err = g.int(a+it.key, it.def, it.required); err != nil {
			return nil, err
		}
	}
	if e.Intermediate == 0 && r.TopK > 0 { // llama.cpp's fallback
		e.Intermediate = c.Intermediate / r.TopK
	}
	e.Shared *= e.Intermediate
	scale, err := g.float(a+"expert_weights_scale", 0)
	if err != nil {
		return nil, err
	}
	r.Scale = float32(scale)
	r.NormTopK = g.boolean(a+"expert_weights_norm", defaultNorm)
	gating, err := g.int(a+"expert_gating_func", 1, false)
	if err != nil {
		return nil, err
	}
	switch gating {
	case 1:
		r.Scoring = kcpu.ScoreSoftmax
	case 2:
		r.Scoring = kcpu.ScoreSigmoid
	default:
		return nil, fmt.Errorf("model: %s: %sexpert_gating_func = %d is not supported (1 softmax, 2 sigmoid)", g.f.Path, a, gating)
	}
	// llama.cpp ranks groups by their two best biased scores for every
	// grouped model; kvhost follows the file's runtime.
	if r.Groups > 1 {
		r.GroupScoring = kcpu.GroupTop2Sum
	}
	return e, nil
}

// hfMoE is the expert part of a config.json (Qwen3-MoE and DeepSeek names).
type hfMoE struct {
	NumExperts          int      `json:"num_experts"`      // qwen3_moe
	NRoutedExperts      int      `json:"n_routed_experts"` // deepseek
	NumExpertsPerTok    int      `json:"num_experts_per_tok"`
	MoEIntermediateSize int      `json:"moe_intermediate_size"`
	NSharedExperts      int      `json:"n_shared_experts"`
	FirstKDenseReplace  int      `json:"first_k_dense_replace"`
	MoELayerFreq        *int     `json:"moe_layer_freq"`
	DecoderSparseStep   *int     `json:"decoder_sparse_step"`
	MLPOnlyLayers       []int    `json:"mlp_only_layers"`
	NormTopKProb        bool     `json:"norm_topk_prob"`
	RoutedScalingFactor *float64 `json:"routed_scaling_factor"`
	ScoringFunc         string   `json:"scoring_func"`
	TopKMethod          string   `json:"topk_method"`
	NGroup              int      `json:"n_group"`
	TopKGroup           int      `json:"topk_group"`
}

// moeFromHF reads the expert fields of config.json for model type mt.
func moeFromHF(raw []byte, mt, path string) (*MoEConfig, error) {
	var h hfMoE
	if err := json.Unmarshal(raw, &h); err != nil {
		return nil, fmt.Errorf("model: %s: %w", path, err)
	}
	for _, f := range []struct {
		name string
		v    *int
	}{{"moe_layer_freq", h.MoELayerFreq}, {"decoder_sparse_step", h.DecoderSparseStep}} {
		if f.v != nil && *f.v != 1 {
			return nil, fmt.Errorf("model: %s: %s = %d is not supported (only 1: every layer past the dense ones is MoE)", path, f.name, *f.v)
		}
	}
	if len(h.MLPOnlyLayers) > 0 {
		return nil, fmt.Errorf("model: %s: mlp_only_layers %v is not supported (only an empty list)", path, h.MLPOnlyLayers)
	}
	e := &MoEConfig{Intermediate: h.MoEIntermediateSize, Shared: h.NSharedExperts * h.MoEIntermediateSize, FirstDense: h.FirstKDenseReplace}
	r := &e.Router
	r.Experts, r.TopK, r.NormTopK = h.NRoutedExperts, h.NumExpertsPerTok, h.NormTopKProb
	if mt == "qwen3_moe" {
		r.Experts = h.NumExperts
	}
	if h.RoutedScalingFactor != nil {
		r.Scale = float32(*h.RoutedScalingFactor)
	}
	switch h.ScoringFunc {
	case "", "softmax":
		r.Scoring = kcpu.ScoreSoftmax
	case "sigmoid":
		r.Scoring = kcpu.ScoreSigmoid
	default:
		return nil, fmt.Errorf("model: %s: scoring_func %q is not supported (softmax, sigmoid)", path, h.ScoringFunc)
	}
	switch h.TopKMethod {
	case "", "greedy":
	case "group_limited_greedy":
		r.Groups, r.TopKGroups, r.GroupScoring = h.NGroup, h.TopKGroup, kcpu.GroupMax
	case "noaux_tc":
		r.Groups, r.TopKGroups, r.GroupScoring = h.NGroup, h.TopKGroup, kcpu.GroupTop2Sum
		e.SelectionBias = true
	default:
		return nil, fmt.Errorf("model: %s: topk_method %q is not supported (greedy, group_limited_greedy, noaux_tc)", path, h.TopKMethod)
	}
	if mt == "deepseek_v2" && r.NormTopK {
		// DeepSeek-V2's code scales by routed_scaling_factor only when it
		// does not normalise (kcpu.Router).
		r.Scale = 1
	}
	return e, nil
}

// moeParams is Config.Ext of the architectures with experts: qwen3moe
// (MoE) and deepseek2 (MoE and MLA).
type moeParams struct {
	MoE *MoEConfig `json:"moe"`
	MLA *MLAConfig `json:"mla,omitempty"`
}

// Validate implements ArchParams.
func (p *moeParams) Validate(c Config) error {
	if p.MoE == nil {
		return fmt.Errorf("model: %s has no experts configured", c.Arch)
	}
	if err := p.MoE.validate(c); err != nil {
		return err
	}
	if p.MLA != nil {
		return p.MLA.validate(c)
	}
	return nil
}

// moe and mla are c's experts and latent attention (nil when it has none).
func (c Config) moe() *MoEConfig {
	if p, ok := c.Ext.(*moeParams); ok {
		return p.MoE
	}
	return nil
}

func (c Config) mla() *MLAConfig {
	if p, ok := c.Ext.(*moeParams); ok {
		return p.MLA
	}
	return nil
}

// loadMoE loads layer p's experts (Qwen3-MoE, DeepSeek-V2/V3) through b
// as the MoE part: ffn_norm, a router without logit bias (DeepSeek-V3's
// selection bias when configured), SwiGLU experts, the shared expert when
// the model has one.
func loadMoE(b *Builder, p string) (*moePart, error) {
	c := b.C
	e := c.moe()
	f := &moePart{r: e.Router, width: e.Intermediate, act: actSwiGLU, shared: e.Shared, eps: c.RMSEps}
	if err := f.moeKernels(b); err != nil {
		return nil, err
	}
	E, w, d := e.Router.Experts, e.Intermediate, c.Hidden
	var err error
	if f.norm, err = b.Vector(p+"ffn_norm.weight", d); err != nil {
		return nil, err
	}
	if f.router, err = b.Matrix(p+"ffn_gate_inp.weight", E, d); err != nil {
		return nil, err
	}
	if e.SelectionBias {
		if f.selBias, err = b.Vector(p+"exp_probs_b.bias", E); err != nil {
			return nil, err
		}
	}
	for _, s := range []struct {
		dst        *device.Weight
		name       string
		rows, cols int
	}{{&f.gate, "ffn_gate_exps.weight", w, d}, {&f.up, "ffn_up_exps.weight", w, d}, {&f.down, "ffn_down_exps.weight", d, w}} {
		if *s.dst, err = b.Stacked(p+s.name, E, s.rows, s.cols); err != nil {
			return nil, err
		}
	}
	if e.Shared > 0 {
		for _, s := range []struct {
			dst        *device.Weight
			name       string
			rows, cols int
		}{{&f.shGate, "ffn_gate_shexp.weight", e.Shared, d}, {&f.shUp, "ffn_up_shexp.weight", e.Shared, d}, {&f.shDown, "ffn_down_shexp.weight", d, e.Shared}} {
			if *s.dst, err = b.Matrix(p+s.name, s.rows, s.cols); err != nil {
				return nil, err
			}
		}
	}
	return f, nil
}

// moeHFNames are the Hugging Face names of the expert and latent-attention
// tensors (per layer part); the rest are the Llama family's (hfName).
var moeHFNames = map[string]string{
	"ffn_gate_inp.weight": "mlp.gate.weight", "exp_probs_b.bias": "mlp.gate.e_score_correction_bias",
	"ffn_gate_shexp.weight": "mlp.shared_experts.gate_proj.weight", "ffn_up_shexp.weight": "mlp.shared_experts.up_proj.weight",
	"ffn_down_shexp.weight": "mlp.shared_experts.down_proj.weight",
	"attn_q_a.weight":       "self_attn.q_a_proj.weight", "attn_q_a_norm.weight": "self_attn.q_a_layernorm.weight",
	"attn_q_b.weight": "self_attn.q_b_proj.weight", "attn_kv_a_mqa.weight": "self_attn.kv_a_proj_with_mqa.weight",
	"attn_kv_a_norm.weight": "self_attn.kv_a_layernorm.weight", "attn_kv_b.weight": "self_attn.kv_b_proj.weight",
}

// moeHFName is Arch.HFTensor of qwen3moe and deepseek2.
func moeHFName(canon string) string {
	if rest, ok := strings.CutPrefix(canon, "blk."); ok {
		layer, part, _ := strings.Cut(rest, ".")
		if n, ok := moeHFNames[part]; ok {
			return "model.layers." + layer + "." + n
		}
	}
	return hfName(canon)
}

// moeParamsOf counts a layer stack's parameters: attn per layer, the dense
// MLP on the first FirstDense layers, the experts (router, all experts,
// shared expert, selection bias) on the others, embeddings and head.
func moeParamsOf(c Config, attn int64) int64 {
	e, h := c.moe(), int64(c.Hidden)
	moe := h*int64(e.Router.Experts) + 3*h*int64(e.Intermediate)*int64(e.Router.Experts) + 3*h*int64(e.Shared)
	if e.SelectionBias {
		moe += int64(e.Router.Experts)
	}
	n := int64(c.Layers)*(attn+2*h) + int64(e.FirstDense)*3*h*int64(c.Intermediate) + int64(c.Layers-e.FirstDense)*moe + int64(c.Vocab)*h + h
	if !c.Tied {
		n += int64(c.Vocab) * h
	}
	return n
}

// ggufYarn reads YaRN rope scaling (prefix a): deepseek2 stores
// mscale_all_dim as yarn_log_multiplier = 0.1·mscale_all_dim and no mscale,
// which llama.cpp takes equal to it (attention factor 1, as every release).
func ggufYarn(g ggufMeta, a string, s *device.RopeSpec) error {
	var err error
	s.Scaling = "yarn"
	if s.Factor, err = g.float(a+"rope.scaling.factor", 1); err != nil {
		return err
	}
	if s.OriginalMaxPos, err = g.int(a+"rope.scaling.original_context_length", 0, true); err != nil {
		return err
	}
	if s.BetaFast, err = g.float(a+"rope.scaling.yarn_beta_fast", 32); err != nil {
		return err
	}
	if s.BetaSlow, err = g.float(a+"rope.scaling.yarn_beta_slow", 1); err != nil {
		return err
	}
	if g.arch == "deepseek2" {
		mul, err := g.float(a+"rope.scaling.yarn_log_multiplier", 0)
		if err != nil {
			return err
		}
		s.Scaling, s.MscaleAllDim = "deepseek_yarn", mul/0.1
		s.Mscale = s.MscaleAllDim
	}
	return nil
}

// hfExpertProj names the per-expert Hugging Face projection of a stacked
// GGUF expert tensor.
var hfExpertProj = map[string]string{"ffn_gate_exps.weight": "gate_proj", "ffn_up_exps.weight": "up_proj", "ffn_down_exps.weight": "down_proj"}

// experts stacks a Hugging Face checkpoint's per-expert matrices
// (model.layers.N.mlp.experts.J.*_proj.weight, J = 0, 1, …) into the GGUF
// form {cols, rows, experts}.
func (s hfSource) experts(canon string) ([]byte, device.DType, []int, bool, error) {
	rest, _ := strings.CutPrefix(canon, "blk.")
	layer, part, _ := strings.Cut(rest, ".")
	proj, ok := hfExpertProj[part]
	if !ok {
		return nil, 0, nil, false, nil
	}
	var out []byte
	var typ device.DType
	var dims []int
	for j := 0; ; j++ {
		name := fmt.Sprintf("model.layers.%s.mlp.experts.%d.%s.weight", layer, j, proj)
		if _, ok := s.set.Info(name); !ok {
			if j == 0 {
				return nil, 0, nil, false, nil
			}
			return out, typ, append(dims, j), true, nil
		}
		ti, raw, err := s.set.Tensor(name)
		if err != nil {
			return nil, 0, nil, false, fmt.Errorf("model: %s: %w", s.path, err)
		}
		t, ok := stTypes[ti.DType]
		if !ok || len(ti.Shape) != 2 {
			return nil, 0, nil, false, fmt.Errorf("model: %s: tensor %s is %s %v; want a 2-D F32, F16 or BF16 matrix", s.path, name, ti.DType, ti.Shape)
		}
		d := []int{int(ti.Shape[1]), int(ti.Shape[0])}
		if j == 0 {
			typ, dims = t, d
		} else if t != typ || d[0] != dims[0] || d[1] != dims[1] {
			return nil, 0, nil, false, fmt.Errorf("model: %s: tensor %s is %s %v, expert 0 was %s %v", s.path, name, t, d, typ, dims)
		}
		out = append(out, raw...)
	}
}
