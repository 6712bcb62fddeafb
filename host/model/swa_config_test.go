package model

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvhost/kvhost/internal/testmodels"
)

// readConfig reads a published config.json the configurators test against.
func readConfig(t *testing.T, name string) []byte {
	t.Helper()
	root, err := testmodels.Root()
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(root, "configurators", "testdata", name+".json"))
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// TestSWAConfigs: the published configs of Mistral-7B-v0.1, Gemma-2-9B and
// gpt-oss-20b read to the values docs/architectures/*.md give.
func TestSWAConfigs(t *testing.T) {
	pattern := func(s *SWAConfig) string {
		var b strings.Builder
		for _, v := range s.Sliding {
			b.WriteByte(map[bool]byte{true: 's', false: 'f'}[v])
		}
		return b.String()
	}
	mis, err := ConfigFromHF(readConfig(t, "mistral-7b-v0.1"), "mistral")
	if err != nil {
		t.Fatal(err)
	}
	if s := SWAOf(mis); s == nil || s.Window != 4096 || pattern(s) != strings.Repeat("s", 32) || s.Gemma || s.MoE != nil {
		t.Fatalf("mistral-7b-v0.1: %+v", s)
	}
	if o := mis.AttnOpts(0); o.Window != 4096 || math.Abs(float64(o.Scale)-1/math.Sqrt(128)) > 1e-7 {
		t.Fatalf("mistral layer 0 opts %+v", o)
	}
	gem, err := ConfigFromHF(readConfig(t, "gemma-2-9b-it"), "gemma2")
	if err != nil {
		t.Fatal(err)
	}
	s := SWAOf(gem)
	if s == nil || s.Window != 4096 || pattern(s) != strings.Repeat("sf", 21) || !s.Gemma || s.AttnSoftCap != 50 || s.FinalSoftCap != 30 || s.AttnScale != 1.0/16 || !gem.Tied {
		t.Fatalf("gemma-2-9b: %+v tied %v", s, gem.Tied)
	}
	if o := gem.AttnOpts(1); o.Window != 0 || o.SoftCap != 50 || o.Scale != 1.0/16 {
		t.Fatalf("gemma-2 layer 1 (global) opts %+v", o)
	}
	oss, err := ConfigFromHF(readConfig(t, "gpt-oss-20b"), "gpt-oss")
	if err != nil {
		t.Fatal(err)
	}
	s = SWAOf(oss)
	if s == nil || s.Window != 128 || pattern(s) != strings.Repeat("sf", 12) || s.MoE == nil || s.MoE.Experts != 32 || s.MoE.TopK != 4 ||
		s.MoE.Limit != 7 || s.MoE.Alpha != 1.702 || !oss.QKVBias || oss.Tied {
		t.Fatalf("gpt-oss-20b: %+v %+v", s, s.MoE)
	}
	if r := oss.Rope; r.Scaling != "yarn" || r.Factor != 32 || r.OriginalMaxPos != 4096 || !r.NoTruncate || r.BetaFast != 32 || r.BetaSlow != 1 || r.Theta != 150000 {
		t.Fatalf("gpt-oss-20b rope %+v", r)
	}
	if n := oss.Params(); n < 20e9 || n > 22e9 {
		t.Fatalf("gpt-oss-20b has %d parameters, want about 20.9e9", n)
	}
}

// TestSWAConfigRefusals: a config that cannot describe a working
// sliding-window model is refused naming the field and its range.
func TestSWAConfigRefusals(t *testing.T) {
	gemma := string(readConfig(t, "gemma-2-9b-it"))
	oss := string(readConfig(t, "gpt-oss-20b"))
	set := func(cfg, key, val string) string {
		i := strings.Index(cfg, `"`+key+`"`)
		if i < 0 {
			return strings.Replace(cfg, "{", `{"`+key+`": `+val+`,`, 1)
		}
		j := i + len(key) + 2
		for cfg[j] == ' ' || cfg[j] == ':' {
			j++
		}
		end := j
		depth := 0
		for ; end < len(cfg); end++ {
			switch cfg[end] {
			case '[', '{':
				depth++
			case ']', '}':
				depth--
			}
			if depth < 0 || (depth == 0 && cfg[end] == ',') {
				break
			}
			if depth == 0 && (cfg[end] == ']' || cfg[end] == '}') {
				end++
				break
			}
		}
		return cfg[:j] + val + cfg[end:]
	}
	for _, tc := range []struct{ name, cfg, want string }{
		{"negative window", set(gemma, "sliding_window", "-1"), "sliding_window = -1 is out of range [1, 16777216]"},
		{"gemma without window", set(gemma, "sliding_window", "null"), "Gemma2ForCausalLM needs sliding_window"},
		{"zero scalar", set(gemma, "query_pre_attn_scalar", "0"), "query_pre_attn_scalar = 0 must be positive"},
		{"activation", set(gemma, "hidden_activation", `"relu"`), `hidden_activation "relu" is not supported`},
		{"negative soft cap", set(gemma, "attn_logit_softcapping", "-5"), "attn_logit_softcapping = -5 must be finite and not negative"},
		{"pattern", set(gemma, "sliding_window_pattern", "0"), "sliding_window_pattern = 0 must be at least 1"},
		{"layer_types length", set(oss, "layer_types", `["sliding_attention"]`), "layer_types has 1 entries for num_hidden_layers 24"},
		{"layer_types value", set(oss, "layer_types", `["chunked_attention"`+strings.Repeat(`,"full_attention"`, 23)+`]`), `layer_types[0] = "chunked_attention"`},
		{"no sliding layer", set(oss, "layer_types", `[`+strings.Repeat(`"full_attention",`, 23)+`"full_attention"]`), "no layer slides"},
		{"top-k", set(oss, "num_experts_per_tok", "40"), "num_experts_per_tok = 40 is out of range [1, num_local_experts 32]"},
		{"experts", set(oss, "num_local_experts", "0"), "num_local_experts = 0 is out of range [1, 1024]"},
		{"swiglu", set(oss, "swiglu_limit", "0"), "swiglu_limit = 0 must be positive and finite"},
		{"rope_parameters theta", set(oss, "rope_parameters", `{"rope_theta": 50000}`), "rope_theta = 150000 and rope_parameters.rope_theta = 50000 disagree"},
		{"rope_parameters layer type", set(gemma, "rope_parameters", `{"chunked_attention": {"rope_theta": 1e4}, "full_attention": {}}`), "rope_parameters.chunked_attention: layer type not supported (full_attention, sliding_attention)"},
		{"rope_parameters sliding scaled", set(gemma, "rope_parameters", `{"sliding_attention": {"rope_type": "linear", "factor": 8}}`), `rope_parameters.sliding_attention.rope_type "linear"`},
		{"rope_parameters type", set(gemma, "rope_parameters", `{"rope_type": "dynamic", "factor": 2}`), `rope_scaling type "dynamic" is not supported`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ConfigFromHF([]byte(tc.cfg), "config.json")
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
		})
	}
}
