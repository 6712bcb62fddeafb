package model

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/kvhost/kvhost/host/device"
	"github.com/kvhost/kvhost/host/model/hf"
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
func (c Config) MoELayer(l int) bool { return c.MoE != nil && l >= c.MoE.FirstDense }

// moeParams counts one MoE layer's parameters (router, experts, shared
// expert, selection bias) and its dense replacement's, to correct Params.
func (e *MoEConfig) params(h int64) int64 {
	n := h*int64(e.Router.Experts) + 3*h*int64(e.Intermediate)*int64(e.Router.Experts) + 3*h*int64(e.Shared)
	if e.SelectionBias {
		n += int64(e.Router.Experts)
	}
	return n
}

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

// moeLayer is one MoE block's weights: the router (F32 logits from any
// stored type), the stacked experts (Rows = experts × width, as a GGUF
// {in, out, E} tensor is stored) and the optional shared expert and
// selection bias.
type moeLayer struct {
	router, bias                    device.Weight
	gateExps, upExps, downExps      device.Weight
	gateShared, upShared, downShare device.Weight
}

func (w *moeLayer) weights() []device.Weight {
	return []device.Weight{w.router, w.bias, w.gateExps, w.upExps, w.downExps, w.gateShared, w.upShared, w.downShare}
}

// loadMoE uploads layer p's MoE weights.
func (u *uploader) loadMoE(p string, c Config) (*moeLayer, error) {
	e, w := c.MoE, &moeLayer{}
	E, f, d := e.Router.Experts, e.Intermediate, c.Hidden
	var err error
	if w.router, err = u.matrix(p+"ffn_gate_inp.weight", E, d, true); err != nil {
		return nil, err
	}
	if e.SelectionBias {
		if w.bias, err = u.vector(p+"exp_probs_b.bias", E, true); err != nil {
			return nil, err
		}
	}
	for _, s := range []struct {
		dst        *device.Weight
		name       string
		rows, cols int
	}{{&w.gateExps, "ffn_gate_exps.weight", f, d}, {&w.upExps, "ffn_up_exps.weight", f, d}, {&w.downExps, "ffn_down_exps.weight", d, f}} {
		if *s.dst, err = u.stacked(p+s.name, E, s.rows, s.cols); err != nil {
			return nil, err
		}
	}
	if e.Shared > 0 {
		for _, s := range []struct {
			dst        *device.Weight
			name       string
			rows, cols int
		}{{&w.gateShared, "ffn_gate_shexp.weight", e.Shared, d}, {&w.upShared, "ffn_up_shexp.weight", e.Shared, d}, {&w.downShare, "ffn_down_shexp.weight", d, e.Shared}} {
			if *s.dst, err = u.matrix(p+s.name, s.rows, s.cols, true); err != nil {
				return nil, err
			}
		}
	}
	return w, nil
}

// stacked uploads a 3-D tensor {cols, rows, n} (GGUF order) as one matrix
// of n·rows rows: n matrices of rows×cols one after another.
func (u *uploader) stacked(name string, n, rows, cols int) (device.Weight, error) {
	raw, typ, dims, ok, err := u.src.tensor(name)
	if err != nil {
		return device.Weight{}, err
	}
	if !ok {
		return device.Weight{}, fmt.Errorf("model: tensor %s is missing", name)
	}
	if len(dims) != 3 || dims[0] != cols || dims[1] != rows || dims[2] != n {
		return device.Weight{}, fmt.Errorf("model: tensor %s has shape %v, want [%d %d %d] (row length first)", name, dims, cols, rows, n)
	}
	return u.place(name, raw, typ, n*rows, cols)
}

// moeFFN runs the routed experts on the normed rows h ([rows, Hidden]) and
// adds their output (with the shared expert's) to x: route in float32,
// group the rows by expert so each expert's matrices are read once for all
// its rows, gather, grouped SwiGLU, weighted scatter-add.
func (m *Model) moeFFN(sc *scope, w *moeLayer, x, h device.Buf, rows int) error {
	c, k := m.Config, m.k
	ek, ok := k.(device.Experts)
	if !ok {
		return fmt.Errorf("model: %s needs the device's Experts capability", c.Arch)
	}
	e := c.MoE
	E, K, d, f := e.Router.Experts, e.Router.TopK, c.Hidden, e.Intermediate
	if m.ungroupedExperts && rows > 1 {
		for i := range rows {
			if err := m.moeFFN(sc, w, x.Slice(i*d, d), h.Slice(i*d, d), 1); err != nil {
				return err
			}
		}
		return nil
	}
	n := rows * K
	ints := func(k int) (device.Span, device.Buf, error) {
		b, err := sc.buf(k)
		return device.Span{Ptr: b.Ptr, Bytes: 4 * int64(max(k, 1))}, b, err
	}
	logits, err := sc.buf(rows * E)
	if err != nil {
		return err
	}
	if err := k.MatMul(logits, h, rows, w.router); err != nil {
		return err
	}
	ids, idsBuf, err := ints(n)
	if err != nil {
		return err
	}
	wts, err := sc.buf(n)
	if err != nil {
		return err
	}
	if err := ek.RouteExperts(e.Router, logits, rows, w.bias, ids, wts); err != nil {
		return err
	}
	sc.free(logits)
	g := device.ExpertGroups{Experts: E, K: K}
	var gb [3]device.Buf
	for i, s := range []*device.Span{&g.Offsets, &g.Tokens, &g.Slots} {
		want := n
		if i == 0 {
			want = E + 1
		}
		if *s, gb[i], err = ints(want); err != nil {
			return err
		}
	}
	if g.Weights, err = sc.buf(n); err != nil {
		return err
	}
	if err := ek.GroupExperts(ids, wts, rows, g); err != nil {
		return err
	}
	sc.free(idsBuf)
	sc.free(wts)
	xs, err := sc.buf(n * d)
	if err != nil {
		return err
	}
	if err := ek.GatherRowsAt(xs, h, d, g.Tokens, n); err != nil {
		return err
	}
	gate, err := sc.buf(n * f)
	if err != nil {
		return err
	}
	up, err := sc.buf(n * f)
	if err != nil {
		return err
	}
	if err := ek.ExpertMatMul(gate, xs, rows, w.gateExps, g); err != nil {
		return err
	}
	if err := ek.ExpertMatMul(up, xs, rows, w.upExps, g); err != nil {
		return err
	}
	if err := k.SiLUMul(gate, gate, up); err != nil {
		return err
	}
	sc.free(up)
	if err := ek.ExpertMatMul(xs, gate, rows, w.downExps, g); err != nil {
		return err
	}
	sc.free(gate)
	shared := e.Shared > 0
	if shared {
		// The shared expert writes h's rows into h itself once read: its
		// output is where the routed sum accumulates.
		if err := m.swiGLU(sc, h, h, rows, e.Shared, w.gateShared, w.upShared, w.downShare); err != nil {
			return err
		}
	}
	if err := ek.ScatterAdd(h, xs, d, g, rows, shared); err != nil {
		return err
	}
	sc.free(xs)
	for _, b := range gb {
		sc.free(b)
	}
	sc.free(g.Weights)
	return k.Add(x, x, h)
}

// swiGLU computes out = down(silu(gate(h))·up(h)) for rows of width inter;
// out may be h (h is read before out is written).
func (m *Model) swiGLU(sc *scope, out, h device.Buf, rows, inter int, gw, uw, dw device.Weight) error {
	k := m.k
	g, err := sc.buf(rows * inter)
	if err != nil {
		return err
	}
	u, err := sc.buf(rows * inter)
	if err != nil {
		return err
	}
	if err := k.MatMul(g, h, rows, gw); err != nil {
		return err
	}
	if err := k.MatMul(u, h, rows, uw); err != nil {
		return err
	}
	if err := k.SiLUMul(g, g, u); err != nil {
		return err
	}
	sc.free(u)
	if err := k.MatMul(out, g, rows, dw); err != nil {
		return err
	}
	sc.free(g)
	return nil
}

// archFromGGUF reads the parts of a qwen3moe or deepseek2 header beyond
// the Llama family's.
func archFromGGUF(g ggufMeta, c *Config) error {
	var err error
	switch g.arch {
	case "qwen3moe":
		// llama.cpp's qwen3moe graph always normalises the top-k weights
		// (the converter writes no expert_weights_norm).
		if c.MoE, err = moeFromGGUF(g, "qwen3moe.", true, *c); err == nil {
			c.MoE.Router.NormTopK = true
		}
	case "deepseek2":
		err = deepseekFromGGUF(g, c)
	}
	return err
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
	if s.BetaFast, err = g.float(a+"rope.scaling.yarn_beta_fast", 0); err != nil {
		return err
	}
	if s.BetaSlow, err = g.float(a+"rope.scaling.yarn_beta_slow", 0); err != nil {
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

// archFromHF reads the expert and latent-attention fields of a Qwen3-MoE
// or DeepSeek config.json.
func archFromHF(hc hf.Config, path string, c *Config) error {
	mt := hc.ModelType
	var err error
	switch c.Arch {
	case "qwen3moe":
		c.MoE, err = moeFromHF(hc.Raw, "qwen3_moe", path)
	case "deepseek2":
		if mt == "" {
			mt = "deepseek_v3"
			if len(hc.Architectures) > 0 && hc.Architectures[0] == "DeepseekV2ForCausalLM" {
				mt = "deepseek_v2"
			}
		}
		err = deepseekFromHF(hc.Raw, mt, path, c)
	}
	return err
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
