package model

import (
	"encoding/json"
	"fmt"
	"math"

	"github.com/kvhost/kvhost/host/model/gguf"
	kcpu "github.com/kvhost/kvhost/kernels/cpu"
)

// torchDType is config.json's torch_dtype of a GGUF tensor type.
var torchDType = map[gguf.TensorType]string{gguf.TypeF32: "float32", gguf.TypeF16: "float16", gguf.TypeBF16: "bfloat16"}

// configFiles are config.json and generation_config.json for x's model,
// in the field names transformers writes for the architecture's class.
// config.json is read back through ConfigFromHF and must give the GGUF's
// configuration (hfSameConfig), so the two copies are the same model.
func (x *hfExporter) configFiles() (cfg, gen []byte, err error) {
	c := x.c
	ti, _, err := x.f.Tensor("token_embd.weight")
	if err != nil {
		return nil, nil, err
	}
	dtype, ok := torchDType[ti.Type]
	if !ok {
		return nil, nil, fmt.Errorf("model: export hf: %s: token_embd.weight is %s: a Hugging Face checkpoint holds F32, F16 or BF16 weights; write the model as f32, f16 or bf16", x.f.Path, ti.Type)
	}
	bos, eos := tokenID(x.f, "tokenizer.ggml.bos_token_id"), tokenID(x.f, "tokenizer.ggml.eos_token_id")
	eosIDs := []int{}
	for _, k := range []string{"tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"} {
		if id := tokenID(x.f, k); id >= 0 && (len(eosIDs) == 0 || eosIDs[len(eosIDs)-1] != id) {
			eosIDs = append(eosIDs, id)
		}
	}
	m, err := hfConfigMap(c)
	if err != nil {
		return nil, nil, fmt.Errorf("model: export hf: %s: %w", x.f.Path, err)
	}
	m["torch_dtype"], m["use_cache"] = dtype, true
	if bos >= 0 {
		m["bos_token_id"] = bos
	}
	if len(eosIDs) == 1 {
		m["eos_token_id"] = eosIDs[0]
	} else if len(eosIDs) > 1 {
		m["eos_token_id"] = eosIDs
	}
	if cfg, err = json.MarshalIndent(m, "", "  "); err != nil {
		return nil, nil, err
	}
	back, err := ConfigFromHF(cfg, "config.json")
	if err != nil {
		return nil, nil, fmt.Errorf("model: export hf: %s: the written config.json does not read back: %w", x.f.Path, err)
	}
	if err := hfSameConfig(c, back); err != nil {
		return nil, nil, fmt.Errorf("model: export hf: %s: %w", x.f.Path, err)
	}
	g := map[string]any{"_from_model_config": true}
	if bos >= 0 {
		g["bos_token_id"] = bos
	}
	if eos >= 0 {
		g["eos_token_id"] = m["eos_token_id"]
	}
	gen, err = json.MarshalIndent(g, "", "  ")
	return cfg, gen, err
}

// tokenID is a token id key of the GGUF header, -1 when absent.
func tokenID(f *gguf.File, key string) int {
	v, ok := f.Get(key)
	if !ok {
		return -1
	}
	n, ok := v.Uint()
	if !ok {
		return -1
	}
	return int(n)
}

// hfSameConfig checks that config.json read back gives c, but for what
// the two formats spell differently by design: the architecture's GGUF
// name, Llama's q/k rotation (pairs of permuted rows in GGUF, halves in
// HF: the same rotation) and DeepSeek's kv_b (split in GGUF, fused in HF).
func hfSameConfig(c, back Config) error {
	if c.Arch == "llama" && SWAOf(c) != nil {
		c.Arch = "mistral" // a llama-named GGUF with a window is a Mistral
	}
	back.Rope.Neox = c.Rope.Neox
	if a, b := c.mla(), back.mla(); a != nil && b != nil {
		cp := *b
		cp.FusedKVB = a.FusedKVB
		back.Ext = &moeParams{MoE: back.moe(), MLA: &cp}
	}
	if e, b := c.moe(), back.moe(); e != nil && b != nil {
		cp := *b
		switch {
		case e.Router.Groups <= 1 && cp.Router.Groups <= 1:
			// one group or none: no group limit (GGUF writes 1, HF's
			// greedy routing reads no n_group)
			cp.Router.Groups, cp.Router.TopKGroups = e.Router.Groups, e.Router.TopKGroups
		case e.Router.Scoring == kcpu.ScoreSoftmax:
			// llama.cpp ranks softmax groups by their two best scores, HF
			// DeepSeek-V2's group_limited_greedy by the best one: the same
			// weights route alike unless a group's runner-up decides.
			cp.Router.GroupScoring = e.Router.GroupScoring
		}
		back.Ext = &moeParams{MoE: &cp, MLA: back.mla()}
	}
	a, _ := json.Marshal(c)
	b, _ := json.Marshal(back)
	if string(a) != string(b) {
		return fmt.Errorf("the Hugging Face config.json cannot express this model:\ngguf %s\nhf   %s", a, b)
	}
	return nil
}

// hfConfigMap is config.json's fields for c, by architecture.
func hfConfigMap(c Config) (map[string]any, error) {
	if c.Hybrid() != nil {
		m := c.HybridHF()
		if c.Arch == "granitehybrid" {
			m["hidden_act"], m["position_embedding_type"], m["attention_bias"] = "silu", "nope", false
		} else {
			m["mlp_hidden_act"] = "relu2"
		}
		return m, nil
	}
	m := map[string]any{
		"hidden_size": c.Hidden, "num_hidden_layers": c.Layers, "num_attention_heads": c.Heads,
		"num_key_value_heads": c.KVHeads, "head_dim": c.HeadDim, "intermediate_size": c.Intermediate,
		"vocab_size": c.Vocab, "max_position_embeddings": c.ContextLen, "rms_norm_eps": c.RMSEps,
		"rope_theta": c.Rope.Theta, "tie_word_embeddings": c.Tied, "attention_bias": c.QKVBias,
		"hidden_act": "silu", "initializer_range": 0.02, "attention_dropout": 0.0,
	}
	if rs := hfRopeScaling(c); rs != nil {
		m["rope_scaling"] = rs
	}
	class := map[string][2]string{
		"llama": {"LlamaForCausalLM", "llama"}, "mistral": {"MistralForCausalLM", "mistral"},
		"qwen2": {"Qwen2ForCausalLM", "qwen2"}, "qwen3": {"Qwen3ForCausalLM", "qwen3"},
		"gemma2": {"Gemma2ForCausalLM", "gemma2"}, "gemma3": {"Gemma3ForCausalLM", "gemma3_text"},
		"gpt-oss": {"GptOssForCausalLM", "gpt_oss"}, "qwen3moe": {"Qwen3MoeForCausalLM", "qwen3_moe"},
	}
	arch := c.Arch
	s := SWAOf(c)
	if arch == "llama" && s != nil {
		arch = "mistral"
	}
	if s != nil {
		m["sliding_window"] = s.Window
		types := make([]string, len(s.Sliding))
		for i, sl := range s.Sliding {
			types[i] = map[bool]string{true: "sliding_attention", false: "full_attention"}[sl]
		}
		if arch != "mistral" {
			m["layer_types"] = types
		}
		if s.Gemma {
			delete(m, "hidden_act")
			m["hidden_activation"] = "gelu_pytorch_tanh"
			scale := float64(s.AttnScale)
			if scale == 0 {
				scale = 1 / math.Sqrt(float64(c.HeadDim))
			}
			m["query_pre_attn_scalar"] = 1 / (scale * scale)
			m["attn_logit_softcapping"], m["final_logit_softcapping"] = nil, nil
			if s.AttnSoftCap > 0 {
				m["attn_logit_softcapping"] = s.AttnSoftCap
			}
			if s.FinalSoftCap > 0 {
				m["final_logit_softcapping"] = s.FinalSoftCap
			}
		}
		if s.LocalRope != nil {
			m["rope_local_base_freq"] = s.LocalRope.Theta
		}
		if e := s.MoE; e != nil {
			m["num_local_experts"], m["num_experts_per_tok"], m["experts_per_token"] = e.Experts, e.TopK, e.TopK
			m["swiglu_limit"] = e.Limit
			m["router_aux_loss_coef"], m["output_router_logits"] = 0.9, false
			// transformers dequantizes *_blocks/*_scales by this entry.
			m["quantization_config"] = map[string]any{"quant_method": "mxfp4",
				"modules_to_not_convert": []string{"model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"}}
		}
	}
	if e := c.moe(); e != nil {
		m["num_experts_per_tok"], m["moe_intermediate_size"], m["norm_topk_prob"] = e.Router.TopK, e.Intermediate, e.Router.NormTopK
		if a := c.mla(); a != nil {
			v3 := e.SelectionBias
			if v3 {
				class["deepseek2"] = [2]string{"DeepseekV3ForCausalLM", "deepseek_v3"}
			} else {
				class["deepseek2"] = [2]string{"DeepseekV2ForCausalLM", "deepseek_v2"}
			}
			delete(m, "head_dim")
			m["kv_lora_rank"], m["qk_nope_head_dim"], m["qk_rope_head_dim"], m["v_head_dim"] = a.KVLoraRank, a.NopeDim, a.RopeDim, a.VHeadDim
			m["q_lora_rank"] = nil
			if a.QLoraRank > 0 {
				m["q_lora_rank"] = a.QLoraRank
			}
			m["n_routed_experts"], m["n_shared_experts"], m["first_k_dense_replace"] = e.Router.Experts, e.Shared/max(e.Intermediate, 1), e.FirstDense
			m["moe_layer_freq"], m["n_group"], m["topk_group"] = 1, max(e.Router.Groups, 1), max(e.Router.TopKGroups, 1)
			scale := e.Router.Scale
			if scale == 0 {
				scale = 1
			}
			m["routed_scaling_factor"] = scale
			m["num_nextn_predict_layers"] = a.MTPLayers
			switch {
			case v3:
				m["topk_method"] = "noaux_tc"
				if e.Router.Scoring != kcpu.ScoreSigmoid {
					return nil, fmt.Errorf("a selection bias (noaux_tc) with softmax scores has no DeepSeek config.json spelling")
				}
				m["scoring_func"] = "sigmoid"
			case e.Router.Groups > 1:
				m["topk_method"], m["scoring_func"] = "group_limited_greedy", "softmax"
			default:
				m["topk_method"], m["scoring_func"] = "greedy", "softmax"
			}
		} else {
			m["num_experts"], m["decoder_sparse_step"], m["mlp_only_layers"] = e.Router.Experts, 1, []int{}
		}
	}
	cl, ok := class[arch]
	if !ok {
		return nil, fmt.Errorf("architecture %s has no Hugging Face config.json writer", c.Arch)
	}
	m["architectures"], m["model_type"] = []string{cl[0]}, cl[1]
	return m, nil
}

// hfRopeScaling is config.json's rope_scaling for c's rope, nil when
// unscaled.
func hfRopeScaling(c Config) map[string]any {
	r := c.Rope
	switch r.Scaling {
	case "":
		return nil
	case "linear":
		return map[string]any{"rope_type": "linear", "factor": r.Factor}
	case "llama3":
		return map[string]any{"rope_type": "llama3", "factor": r.Factor, "low_freq_factor": r.LowFreqFactor,
			"high_freq_factor": r.HighFreqFactor, "original_max_position_embeddings": r.OriginalMaxPos}
	}
	m := map[string]any{"rope_type": "yarn", "factor": r.Factor, "original_max_position_embeddings": r.OriginalMaxPos,
		"beta_fast": orDefault(r.BetaFast, 32), "beta_slow": orDefault(r.BetaSlow, 1)}
	if r.Scaling == "deepseek_yarn" {
		m["mscale"], m["mscale_all_dim"] = r.Mscale, r.MscaleAllDim
	} else {
		m["truncate"] = !r.NoTruncate
	}
	if r.AttnFactor != 0 {
		m["attention_factor"] = r.AttnFactor
	}
	return m
}

func orDefault(v, d float64) float64 {
	if v == 0 {
		return d
	}
	return v
}
