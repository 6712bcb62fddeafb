package model

import (
	"encoding/json"
	"math"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/kvhost/kvhost/host/model/gguf"
	"github.com/kvhost/kvhost/host/model/hf"
)

// TestNemotronH8BConfig reads the published Nemotron-H-8B config.json
// (configurators/testdata): its 52-layer pattern, Mamba-2 shape and
// parameter count (8.1e9, the model card's).
func TestNemotronH8BConfig(t *testing.T) {
	raw, err := os.ReadFile("../../configurators/testdata/nemotron-h-8b.json")
	if err != nil {
		t.Fatal(err)
	}
	c, err := ConfigFromHF(raw, "nemotron-h-8b.json")
	if err != nil {
		t.Fatal(err)
	}
	h := c.Hybrid()
	got := []int{c.Layers, h.Count(MixerMamba), h.Count(MixerAttention), h.CountFFN(FFNReLU2), h.Mamba.Heads, h.Mamba.HeadDim,
		h.Mamba.Groups, h.Mamba.State, h.Mamba.ConvKernel, h.NormGroup, c.HeadDim, c.KVHeads, c.Intermediate}
	want := []int{52, 24, 4, 24, 128, 64, 8, 128, 4, 1024, 128, 8, 21504}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("layers, mamba, attention, mlp, heads, head dim, groups, state, conv, norm group, attn head dim, kv heads, ff = %v, want %v", got, want)
	}
	if !h.ConvBias || h.Mamba.DtMin != 0 || !math.IsInf(float64(h.Mamba.DtMax), 1) || c.Tied {
		t.Fatalf("conv bias %v, dt limit [%v, %v], tied %v", h.ConvBias, h.Mamba.DtMin, h.Mamba.DtMax, c.Tied)
	}
	if p := c.Params(); p < 8.0e9 || p > 8.2e9 {
		t.Fatalf("%d parameters, want about 8.1e9", p)
	}
	need := c.KVNeeds()
	if !need[0].State || need[1].State || need[1].KVHeads != 0 || need[7].KVHeads != 8 {
		t.Fatalf("layer needs %+v", need[:8])
	}
}

// TestHybridConfigRoundTrip: a generated model's config, written as its
// config.json equivalent (what the configurator reads), reads back equal.
func TestHybridConfigRoundTrip(t *testing.T) {
	for _, arch := range hybridArchs {
		f, err := gguf.Open(writeHybrid(t, arch, "tiny"))
		if err != nil {
			t.Fatal(err)
		}
		c, err := ConfigFromGGUF(f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		raw, err := json.Marshal(c.HybridHF())
		if err != nil {
			t.Fatal(err)
		}
		back, err := ConfigFromHF(raw, "config.json")
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(c, back) {
			t.Fatalf("%s: GGUF %+v (%+v)\nHF   %+v (%+v)", arch, c, *c.Hybrid(), back, *back.Hybrid())
		}
	}
}

// TestTimeStepLimitSpellings: the dt clamp as Python's json writes
// infinity (a bare token), as a string, as transformers 5's object, and as
// finite numbers.
func TestTimeStepLimitSpellings(t *testing.T) {
	base := `{"architectures":["NemotronHForCausalLM"],"hybrid_override_pattern":"M*-","hidden_size":64,"num_attention_heads":4,"num_key_value_heads":2,"head_dim":16,"intermediate_size":32,"vocab_size":100,"mamba_num_heads":4,"mamba_head_dim":8,"n_groups":2,"ssm_state_size":8,"conv_kernel":4,"name":"Infinity inside a string stays","time_step_limit":`
	for _, tc := range []struct {
		lim      string
		min, max float64
	}{
		{`[0.0, Infinity]`, 0, math.Inf(1)}, {`[0.0, "Infinity"]`, 0, math.Inf(1)},
		{`[0.0, {"__float__": "Infinity"}]`, 0, math.Inf(1)}, {`[0.001, 0.1]`, 0.001, 0.1}, {`[-Infinity, 100]`, 0, 100},
	} {
		c, err := ConfigFromHF([]byte(base+tc.lim+"}"), "config.json")
		if err != nil {
			t.Fatalf("%s: %v", tc.lim, err)
		}
		if s := c.Hybrid().Mamba; s.DtMin != float32(tc.min) || s.DtMax != float32(tc.max) {
			t.Fatalf("%s: dt limit [%v, %v], want [%v, %v]", tc.lim, s.DtMin, s.DtMax, tc.min, tc.max)
		}
	}
	if got := string(hf.PythonJSON([]byte(`{"a":"NaN and Infinity","b":[NaN]}`))); got != `{"a":"NaN and Infinity","b":["NaN"]}` {
		t.Fatalf("pyJSON: %s", got)
	}
}

// TestHybridConfigErrors: a config that cannot describe a working model is
// refused with an error naming the field and its range.
func TestHybridConfigErrors(t *testing.T) {
	nem := map[string]any{"architectures": []string{"NemotronHForCausalLM"}, "hybrid_override_pattern": "M*-", "hidden_size": 64,
		"num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "intermediate_size": 32, "vocab_size": 100,
		"mamba_num_heads": 4, "mamba_head_dim": 8, "n_groups": 2, "ssm_state_size": 8, "conv_kernel": 4}
	gra := map[string]any{"architectures": []string{"GraniteMoeHybridForCausalLM"}, "layer_types": []string{"mamba", "attention"},
		"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 100,
		"mamba_n_heads": 8, "mamba_d_head": 16, "mamba_expand": 2, "mamba_n_groups": 1, "mamba_d_state": 8, "mamba_d_conv": 4,
		"num_local_experts": 0, "shared_intermediate_size": 32}
	with := func(base map[string]any, k string, v any) map[string]any {
		out := map[string]any{}
		for kk, vv := range base {
			out[kk] = vv
		}
		out[k] = v
		return out
	}
	for _, tc := range []struct {
		name string
		cfg  map[string]any
		want string
	}{
		{"moe layer", with(nem, "hybrid_override_pattern", "M*E"), `layer 2 is a mixture-of-experts layer ("E", nemotron_h_moe)`},
		{"bad letter", with(nem, "hybrid_override_pattern", "M*X"), `layer 2 kind "X": want M (mamba), * (attention) or - (mlp)`},
		{"layer count", with(nem, "num_hidden_layers", 5), "num_hidden_layers 5, but the layer pattern has 3"},
		{"proj bias", with(nem, "mamba_proj_bias", true), "mamba_proj_bias = true is not supported"},
		{"groups", with(nem, "n_groups", 3), "heads 4 not a multiple of groups 3"},
		{"conv kernel", with(nem, "conv_kernel", 1), "ssm conv kernel 1 is out of range [2, 8]"},
		{"act", with(nem, "mlp_hidden_act", "gelu"), `mlp_hidden_act "gelu" is not supported (relu2)`},
		{"dt limit", with(nem, "time_step_limit", []float64{1}), "time_step_limit must be a list of two numbers"},
		{"eps", with(nem, "layer_norm_epsilon", 2), "rms_norm_eps 2 out of range (0, 1)"},
		{"granite types", with(gra, "layer_types", []string{"mamba", "mlp"}), `layer_types[1] = "mlp": want mamba or attention`},
		{"granite type count", with(gra, "layer_types", []string{"mamba"}), "layer_types has 1 entries for num_hidden_layers 2"},
		{"granite head dim", with(gra, "mamba_d_head", 8), "mamba_d_head 8 × mamba_n_heads 8 must equal mamba_expand × hidden_size = 128"},
		{"granite rope", with(gra, "position_embedding_type", "rope"), `position_embedding_type "rope" is not supported`},
		{"granite multiplier", with(gra, "logits_scaling", -1), "logits_scaling = -1 must be positive and finite"},
		{"granite experts", with(with(gra, "num_local_experts", 4), "num_experts_per_tok", 5), "num_experts_per_tok 5 is out of range [1, 4]"},
	} {
		raw, _ := json.Marshal(tc.cfg)
		_, err := ConfigFromHF(raw, "config.json")
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want it to say %q", tc.name, err, tc.want)
		}
	}
}

// TestHybridGGUFErrors: GGUF headers missing or misstating a hybrid's keys
// are refused naming the key.
func TestHybridGGUFErrors(t *testing.T) {
	src := writeHybrid(t, "nemotron_h", "tiny")
	for _, tc := range []struct {
		name string
		edit func([]gguf.KV) []gguf.KV
		want string
	}{
		{"no state size", func(kvs []gguf.KV) []gguf.KV { return dropKV(kvs, "nemotron_h.ssm.state_size") }, "metadata key nemotron_h.ssm.state_size is missing"},
		{"kv heads length", func(kvs []gguf.KV) []gguf.KV {
			return setKV(kvs, "nemotron_h.attention.head_count_kv", gguf.NewInt32Array([]int32{0, 2}))
		}, "nemotron_h.attention.head_count_kv must be 6 integers (one per layer), has 2"},
		{"inner size", func(kvs []gguf.KV) []gguf.KV { return setKV(kvs, "nemotron_h.ssm.inner_size", gguf.NewUint32(100)) },
			"ssm.inner_size 100 is not a multiple of nemotron_h.ssm.time_step_rank (the mamba heads) 8"},
	} {
		path := rewrite(t, src, func(kvs []gguf.KV, ts []gguf.TensorSpec) ([]gguf.KV, []gguf.TensorSpec) { return tc.edit(kvs), ts })
		f, err := gguf.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		_, err = ConfigFromGGUF(f)
		f.Close()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want it to say %q", tc.name, err, tc.want)
		}
	}
}

func dropKV(kvs []gguf.KV, key string) []gguf.KV {
	var out []gguf.KV
	for _, kv := range kvs {
		if kv.Key != key {
			out = append(out, kv)
		}
	}
	return out
}
