package hf

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// TestNormalizeRopeParameters: transformers 5's rope_parameters (flat, and
// per layer type) and dtype read as the fields they replaced.
func TestNormalizeRopeParameters(t *testing.T) {
	for _, tc := range []struct{ name, v5, v4 string }{
		{"llama3",
			`{"architectures": ["LlamaForCausalLM"], "dtype": "bfloat16", "rope_parameters": {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}}`,
			`{"architectures": ["LlamaForCausalLM"], "torch_dtype": "bfloat16", "rope_theta": 500000.0, "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}}`},
		{"default", `{"rope_parameters": {"rope_type": "default", "rope_theta": 1e6, "partial_rotary_factor": 0.5}}`,
			`{"rope_theta": 1e6, "partial_rotary_factor": 0.5}`},
		{"legacy type key", `{"rope_parameters": {"type": "linear", "factor": 2, "rope_theta": 1e4}}`,
			`{"rope_theta": 1e4, "rope_scaling": {"rope_type": "linear", "factor": 2}}`},
		{"both spellings agree", `{"rope_theta": 1e4, "rope_scaling": {"type": "linear", "factor": 2}, "rope_parameters": {"rope_type": "linear", "factor": 2, "rope_theta": 1e4}}`,
			`{"rope_theta": 1e4, "rope_scaling": {"type": "linear", "factor": 2}}`},
		{"gemma3 per layer type",
			`{"rope_parameters": {"full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1000000.0}, "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}}}`,
			`{"rope_theta": 1000000.0, "rope_scaling": {"rope_type": "linear", "factor": 8.0}, "rope_local_base_freq": 10000.0}`},
		{"null", `{"rope_parameters": null, "rope_theta": 5}`, `{"rope_theta": 5}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n, err := Normalize([]byte(tc.v5))
			if err != nil {
				t.Fatal(err)
			}
			var got, want map[string]any
			if err := json.Unmarshal(n.JSON, &got); err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal([]byte(tc.v4), &want); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("got %s\nwant %s", n.JSON, tc.v4)
			}
			c5, err := ParseConfig([]byte(tc.v5))
			if err != nil {
				t.Fatal(err)
			}
			c4, err := ParseConfig([]byte(tc.v4))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(c5, c4) {
				t.Fatalf("ParseConfig: %+v, want %+v", c5, c4)
			}
		})
	}
}

// TestNormalizeRefusals: the two spellings disagreeing, a layer type or a
// scaled sliding rope nobody serves, and malformed values name the field.
func TestNormalizeRefusals(t *testing.T) {
	for _, tc := range []struct{ cfg, want string }{
		{`{"rope_theta": 1e4, "rope_parameters": {"rope_theta": 5e5}}`, "rope_theta = 1e4 and rope_parameters.rope_theta = 5e5 disagree"},
		{`{"rope_scaling": {"rope_type": "linear", "factor": 4}, "rope_parameters": {"rope_type": "linear", "factor": 2}}`, `rope_scaling = {"rope_type":"linear","factor":4} and rope_parameters = {"factor":2,"rope_type":"linear"} disagree`},
		{`{"torch_dtype": "float32", "dtype": "bfloat16"}`, `torch_dtype = "float32" and dtype = "bfloat16" disagree`},
		{`{"rope_parameters": {"full_attention": {"rope_theta": 1}, "chunked_attention": {}}}`, "rope_parameters.chunked_attention: layer type not supported"},
		{`{"rope_parameters": {"sliding_attention": {"rope_type": "yarn", "factor": 4}}}`, `rope_parameters.sliding_attention.rope_type "yarn"`},
		{`{"rope_parameters": 3}`, "rope_parameters: json"},
		{`{"rope_parameters": {"full_attention": []}}`, "rope_parameters.full_attention: json"},
		{`{"architectures": ["Gemma3ForConditionalGeneration"], "text_config": 7}`, "text_config: json"},
	} {
		_, err := Normalize([]byte(tc.cfg))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want %q", tc.cfg, err, tc.want)
		}
	}
}

// TestNormalizeWrapper: a multimodal wrapper's text_config is the config,
// the wrapper's keys filling what it lacks; a plain config is returned as
// is, byte for byte.
func TestNormalizeWrapper(t *testing.T) {
	raw := `{"architectures": ["Gemma3ForConditionalGeneration"], "model_type": "gemma3", "eos_token_id": [1, 106], "dtype": "bfloat16",
		"text_config": {"model_type": "gemma3_text", "hidden_size": 3840, "rope_parameters": {"full_attention": {"rope_type": "default", "rope_theta": 1e6}, "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}}},
		"vision_config": {"hidden_size": 1152}}`
	n, err := Normalize([]byte(raw))
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(n.JSON, &got); err != nil {
		t.Fatal(err)
	}
	if n.Wrapper != "Gemma3ForConditionalGeneration" || !n.Vision || got["model_type"] != "gemma3_text" || got["hidden_size"] != 3840.0 ||
		got["torch_dtype"] != "bfloat16" || got["rope_theta"] != 1e6 || got["rope_local_base_freq"] != 1e4 || got["text_config"] != nil {
		t.Fatalf("%+v: %s", n, n.JSON)
	}
	c, err := ParseConfig([]byte(raw))
	if err != nil || c.HiddenSize != 3840 || c.Architectures[0] != "Gemma3ForConditionalGeneration" || len(c.EOSTokenID) != 2 {
		t.Fatalf("ParseConfig: %+v %v", c, err)
	}
	// A causal LM carrying a text_config is not a wrapper; plain configs
	// pass through untouched.
	for _, plain := range []string{`{"architectures": ["LlamaForCausalLM"], "text_config": {"hidden_size": 1}, "hidden_size": 2}`, `{"rope_theta": 1e4}`} {
		n, err := Normalize([]byte(plain))
		if err != nil || string(n.JSON) != plain || n.Wrapper != "" {
			t.Fatalf("%s: %s %+v %v", plain, n.JSON, n, err)
		}
	}
}

// TestWithDefaults: absent and null keys take the default, present ones
// stay.
func TestWithDefaults(t *testing.T) {
	out, err := WithDefaults([]byte(`{"a": 1, "b": null}`), map[string]any{"a": 5, "b": 6, "c": "x"})
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	_ = json.Unmarshal(out, &got)
	if !reflect.DeepEqual(got, map[string]any{"a": 1.0, "b": 6.0, "c": "x"}) {
		t.Fatalf("%s", out)
	}
}
