package plan

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/kvhost/kvhost/host/budget"
	"github.com/kvhost/kvhost/host/model"
	"github.com/kvhost/kvhost/host/model/synth"
)

// specConfig is a generated expert model's config (gen-model's preset) as
// the Hugging Face config.json of its family, so that the dry run builds
// the model of that preset without writing its weights.
func specConfig(t *testing.T, arch string, s synth.Spec, headDim int) model.Config {
	t.Helper()
	m, e := s.MoE, s.MLA
	raw := map[string]any{"hidden_size": s.Hidden, "num_hidden_layers": s.Layers, "num_attention_heads": s.Heads,
		"num_key_value_heads": s.KVHeads, "intermediate_size": s.Intermediate, "vocab_size": s.Vocab,
		"max_position_embeddings": s.ContextLen, "rms_norm_eps": 1e-6, "rope_theta": 10000, "tie_word_embeddings": false,
		"torch_dtype": "float32", "num_experts_per_tok": m.TopK, "moe_intermediate_size": m.ExpertFF}
	switch arch {
	case "qwen3moe":
		raw["architectures"], raw["model_type"] = []string{"Qwen3MoeForCausalLM"}, "qwen3_moe"
		raw["head_dim"], raw["num_experts"], raw["norm_topk_prob"] = headDim, m.Experts, true
	default:
		raw["architectures"], raw["model_type"] = []string{"DeepseekV2ForCausalLM"}, "deepseek_v2"
		raw["q_lora_rank"], raw["kv_lora_rank"], raw["qk_nope_head_dim"], raw["qk_rope_head_dim"], raw["v_head_dim"] = nil, e.KVLora, e.Nope, e.Rope, e.V
		raw["n_routed_experts"], raw["n_shared_experts"], raw["first_k_dense_replace"] = m.Experts, m.Shared, m.FirstDense
		raw["n_group"], raw["topk_group"], raw["scoring_func"], raw["topk_method"] = max(1, m.Groups), max(1, m.TopKGroups), "softmax", "group_limited_greedy"
		if arch == "deepseek3" {
			raw["architectures"], raw["model_type"] = []string{"DeepseekV3ForCausalLM"}, "deepseek_v3"
			raw["q_lora_rank"], raw["scoring_func"], raw["topk_method"], raw["routed_scaling_factor"], raw["norm_topk_prob"] = e.QLora, "sigmoid", "noaux_tc", m.Scale, true
		}
	}
	b, err := json.Marshal(raw)
	if err != nil {
		t.Fatal(err)
	}
	c, err := model.ConfigFromHF(b, arch+".json")
	if err != nil {
		t.Fatalf("%s: %v", arch, err)
	}
	return c
}

// TestMoEPeakMatchesDryRun checks budget.MoEPeak — the formula GPU plans
// estimate the routed-experts moment with, from config.json — against the
// CPU plan's dry run of the real forward (host/model's grouped experts over
// the caching allocator) for gen-model's qwen3moe, deepseek2 and deepseek3
// presets: one prefill chunk of 512 or 2047 tokens at position 0 with one
// logits row. The forward's peak is its widest instant, which for some
// presets is the attention's (deepseek2 tiny and medium: the absorbed
// query over 4–16 heads); the experts' instant does not depend on the
// attention or the dense layers, so each preset is also run with one
// attention head and dense layers as wide as an expert, where it is the
// widest and the dry run's peak measures it. There the measured peak
// (allocated blocks above the start) equals the formula's tensors charged
// as the allocator charges them (budget.AllocatorBlock) within 0.1 % (the
// margin: a block reused from the free list may be larger than the
// request); on the preset itself the formula never exceeds the peak.
func TestMoEPeakMatchesDryRun(t *testing.T) {
	reg, err := DefaultConfigurators()
	if err != nil {
		t.Fatal(err)
	}
	for _, arch := range []string{"qwen3moe", "deepseek2", "deepseek3"} {
		for _, size := range []string{"tiny", "small", "medium"} {
			s, err := synth.ArchPreset(arch, size, "f32")
			if err != nil {
				t.Fatal(err)
			}
			narrow := s
			narrow.Heads, narrow.KVHeads, narrow.Intermediate = 1, 1, s.MoE.ExpertFF
			for _, v := range []struct {
				name  string
				s     synth.Spec
				exact bool
			}{{"preset", s, false}, {"one head", narrow, true}} {
				c := specConfig(t, arch, v.s, s.Hidden/s.Heads)
				kc, err := ConfigureKV(context.Background(), reg, KVRequest{Config: c, KVDType: "fp32", PageSize: 16})
				if err != nil {
					t.Fatal(err)
				}
				raw, err := ConfigJSON(c)
				if err != nil {
					t.Fatal(err)
				}
				m, err := ParseHFModel(raw)
				if err != nil {
					t.Fatal(err)
				}
				for _, rows := range []int{512, 2047} {
					before, after, err := profileStats(c, kc.Layout, [][]SeqShape{{{N: rows, Start: 0, LogitRows: 1}}}, 1, 0)
					if err != nil {
						t.Fatal(err)
					}
					measured := after.PeakAllocated - before.Allocated
					ts, bytes, err := budget.MoEPeak(shapesOf(m, 1).moePeakInput(rows))
					if err != nil {
						t.Fatal(err)
					}
					var charged int64
					for _, x := range ts {
						b, _, _ := budget.AllocatorBlock(x.Bytes)
						charged += b
					}
					d := float64(measured-charged) / float64(charged)
					t.Logf("%s-%s (%s) %d rows: dry run %d B, formula %d B (%d B charged), %+.3f%%", arch, size, v.name, rows, measured, bytes, charged, 100*d)
					if d < -0.001 || (v.exact && d > 0.001) {
						t.Errorf("%s-%s (%s) %d rows: dry run peak %d B, MoEPeak %d B charged: %+.3f%%", arch, size, v.name, rows, measured, charged, 100*d)
					}
				}
			}
		}
	}
}
