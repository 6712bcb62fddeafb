package hf

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/kvhost/kvhost/host/model/safetensors"
)

const llama3Config = `{
  "architectures": ["LlamaForCausalLM"],
  "attention_bias": false,
  "bos_token_id": 128000,
  "eos_token_id": [128001, 128008, 128009],
  "head_dim": 64,
  "hidden_size": 2048,
  "intermediate_size": 8192,
  "max_position_embeddings": 131072,
  "model_type": "llama",
  "num_attention_heads": 32,
  "num_hidden_layers": 16,
  "num_key_value_heads": 8,
  "rms_norm_eps": 1e-05,
  "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                   "original_max_position_embeddings": 8192, "rope_type": "llama3"},
  "rope_theta": 500000.0,
  "tie_word_embeddings": true,
  "torch_dtype": "bfloat16",
  "vocab_size": 128256
}`

const qwen2Config = `{
  "architectures": ["Qwen2ForCausalLM"],
  "bos_token_id": null,
  "eos_token_id": [151645, 151643],
  "hidden_size": 896,
  "intermediate_size": 4864,
  "max_position_embeddings": 32768,
  "model_type": "qwen2",
  "num_attention_heads": 14,
  "num_hidden_layers": 24,
  "num_key_value_heads": 2,
  "rms_norm_eps": 1e-06,
  "rope_scaling": {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768},
  "rope_theta": 1000000.0,
  "sliding_window": 32768,
  "tie_word_embeddings": true,
  "torch_dtype": "bfloat16",
  "use_sliding_window": false,
  "vocab_size": 151936
}`

func writeFile(t *testing.T, dir, name string, data []byte) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
		t.Fatal(err)
	}
}

func safetensorsBytes(t *testing.T, ts []safetensors.Tensor) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := safetensors.Write(&buf, ts, map[string]string{"format": "pt"}); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestOpenLlama3Single(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, ConfigFile, []byte(llama3Config))
	writeFile(t, dir, SingleWeightsFile, safetensorsBytes(t, []safetensors.Tensor{
		{Name: "model.norm.weight", DType: safetensors.BF16, Shape: []uint64{2}, Data: []byte{1, 2, 3, 4}},
	}))
	tok := []byte(`{"model":{"type":"BPE"}}`)
	writeFile(t, dir, TokenizerFile, tok)
	writeFile(t, dir, TokenizerConfigFile, []byte(`{"bos_token":"<|begin_of_text|>","chat_template":"{{ bos_token }}{% for m in messages %}{{ m.content }}{% endfor %}"}`))

	m, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := Config{
		Architectures: []string{"LlamaForCausalLM"}, ModelType: "llama", HiddenSize: 2048, NumHiddenLayers: 16,
		NumAttentionHeads: 32, NumKeyValueHeads: 8, HeadDim: 64, IntermediateSize: 8192, VocabSize: 128256,
		RMSNormEps: 1e-5, RopeTheta: 500000,
		RopeScaling:           &RopeScaling{Type: "llama3", Factor: 32, LowFreqFactor: 1, HighFreqFactor: 4, OriginalMaxPositionEmbeddings: 8192},
		MaxPositionEmbeddings: 131072, TieWordEmbeddings: true, TorchDType: "bfloat16",
		BOSTokenID: TokenIDs{128000}, EOSTokenID: TokenIDs{128001, 128008, 128009},
	}
	if !reflect.DeepEqual(m.Config, want) {
		t.Fatalf("config\n got %+v\nwant %+v", m.Config, want)
	}
	if err := m.Config.Validate(); err != nil {
		t.Fatal(err)
	}
	if string(m.ConfigJSON) != llama3Config || !bytes.Equal(m.TokenizerJSON, tok) {
		t.Fatal("raw bytes not kept")
	}
	if !strings.HasPrefix(m.ChatTemplate, "{{ bos_token }}") {
		t.Fatalf("chat template %q", m.ChatTemplate)
	}
	if m.IndexPath != "" || !reflect.DeepEqual(m.WeightFiles, []string{filepath.Join(dir, SingleWeightsFile)}) {
		t.Fatalf("weights %v %q", m.WeightFiles, m.IndexPath)
	}
	ws, err := m.OpenWeights()
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	if _, b, err := ws.Tensor("model.norm.weight"); err != nil || !bytes.Equal(b, []byte{1, 2, 3, 4}) {
		t.Fatalf("tensor: %v", err)
	}
}

func TestOpenQwen2Sharded(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, ConfigFile, []byte(qwen2Config))
	writeFile(t, dir, "model-00001-of-00002.safetensors", safetensorsBytes(t, []safetensors.Tensor{
		{Name: "model.embed_tokens.weight", DType: safetensors.F32, Shape: []uint64{1}, Data: []byte{1, 2, 3, 4}},
		{Name: "model.layers.0.self_attn.q_proj.bias", DType: safetensors.BF16, Shape: []uint64{1}, Data: []byte{5, 6}},
	}))
	writeFile(t, dir, "model-00002-of-00002.safetensors", safetensorsBytes(t, []safetensors.Tensor{
		{Name: "model.norm.weight", DType: safetensors.F16, Shape: []uint64{1}, Data: []byte{7, 8}},
	}))
	writeFile(t, dir, safetensors.IndexFileName, []byte(`{"metadata":{"total_size":8},"weight_map":{
		"model.embed_tokens.weight":"model-00001-of-00002.safetensors",
		"model.layers.0.self_attn.q_proj.bias":"model-00001-of-00002.safetensors",
		"model.norm.weight":"model-00002-of-00002.safetensors"}}`))
	writeFile(t, dir, TokenizerConfigFile, []byte(`{"chat_template":[{"name":"tool_use","template":"T"},{"name":"default","template":"D"}]}`))

	m, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	c := m.Config
	if c.ModelType != "qwen2" || c.HeadDimension() != 64 || c.KVHeads() != 2 || c.BOSTokenID != nil ||
		!reflect.DeepEqual(c.EOSTokenID, TokenIDs{151645, 151643}) || c.RopeScaling == nil || c.RopeScaling.Type != "yarn" ||
		c.RopeScaling.Factor != 4 || c.RMSNormEps != 1e-6 || c.RopeTheta != 1e6 {
		t.Fatalf("config %+v", c)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if m.TokenizerJSON != nil || m.ChatTemplate != "D" {
		t.Fatalf("tokenizer %v template %q", m.TokenizerJSON, m.ChatTemplate)
	}
	wantFiles := []string{filepath.Join(dir, "model-00001-of-00002.safetensors"), filepath.Join(dir, "model-00002-of-00002.safetensors")}
	if !reflect.DeepEqual(m.WeightFiles, wantFiles) || m.IndexPath != filepath.Join(dir, safetensors.IndexFileName) {
		t.Fatalf("weights %v index %q", m.WeightFiles, m.IndexPath)
	}
	ws, err := m.OpenWeights()
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	if len(ws.Names()) != 3 {
		t.Fatalf("names %v", ws.Names())
	}
	if _, b, err := ws.Tensor("model.norm.weight"); err != nil || !bytes.Equal(b, []byte{7, 8}) {
		t.Fatalf("norm: %v", err)
	}
}

func TestOpenErrors(t *testing.T) {
	dir := t.TempDir()
	if _, err := Open(dir); err == nil || !strings.Contains(err.Error(), ConfigFile) {
		t.Fatalf("missing config: %v", err)
	}
	writeFile(t, dir, ConfigFile, []byte(`{"hidden_size": "big"}`))
	if _, err := Open(dir); err == nil || !strings.Contains(err.Error(), "hidden_size") {
		t.Fatalf("bad config: %v", err)
	}
	writeFile(t, dir, ConfigFile, []byte(llama3Config))
	if _, err := Open(dir); !errors.Is(err, ErrNoWeights) {
		t.Fatalf("no weights: %v", err)
	}
	writeFile(t, dir, safetensors.IndexFileName, []byte(`{"weight_map":{"w":"../evil.safetensors"}}`))
	if _, err := Open(dir); err == nil || !strings.Contains(err.Error(), "not a plain file name") {
		t.Fatalf("traversal: %v", err)
	}
	os.Remove(filepath.Join(dir, safetensors.IndexFileName))
	writeFile(t, dir, SingleWeightsFile, []byte("garbage!"))
	m, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	var fe *safetensors.FormatError
	if _, err := m.OpenWeights(); !errors.As(err, &fe) {
		t.Fatalf("corrupt weights: %v", err)
	}
	writeFile(t, dir, TokenizerConfigFile, []byte(`{"chat_template": 5}`))
	if _, err := Open(dir); err == nil || !strings.Contains(err.Error(), "chat_template") {
		t.Fatalf("bad template: %v", err)
	}
	writeFile(t, dir, TokenizerConfigFile, []byte(`{}`))
	writeFile(t, dir, ChatTemplateFile, []byte("{{ messages }}"))
	if m, err := Open(dir); err != nil || m.ChatTemplate != "{{ messages }}" {
		t.Fatalf("jinja template: %v", err)
	}
}

func TestChatTemplate(t *testing.T) {
	cases := []struct{ in, want string }{
		{`{}`, ""},
		{`{"chat_template": null}`, ""},
		{`{"chat_template": "x"}`, "x"},
		{`{"chat_template": []}`, ""},
		{`{"chat_template": [{"name":"a","template":"A"},{"name":"b","template":"B"}]}`, "A"},
		{`{"chat_template": [{"name":"rag","template":"R"},{"name":"default","template":"D"}]}`, "D"},
	}
	for _, c := range cases {
		got, err := ChatTemplate([]byte(c.in))
		if err != nil || got != c.want {
			t.Errorf("%s: %q %v, want %q", c.in, got, err, c.want)
		}
	}
	for _, bad := range []string{`[`, `{"chat_template": {"a":1}}`, `{"chat_template": [1]}`} {
		if _, err := ChatTemplate([]byte(bad)); err == nil {
			t.Errorf("%s accepted", bad)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	good, err := ParseConfig([]byte(llama3Config))
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name  string
		edit  func(*Config)
		field string
	}{
		{"zero hidden", func(c *Config) { c.HiddenSize = 0 }, "hidden_size"},
		{"zero layers", func(c *Config) { c.NumHiddenLayers = 0 }, "num_hidden_layers"},
		{"gqa mismatch", func(c *Config) { c.NumKeyValueHeads = 5 }, "num_key_value_heads 5"},
		{"uneven heads", func(c *Config) { c.HeadDim = 0; c.HiddenSize = 2050 }, "not a multiple of num_attention_heads"},
		{"negative eps", func(c *Config) { c.RMSNormEps = -1 }, "rms_norm_eps"},
		{"negative head dim", func(c *Config) { c.HeadDim = -1 }, "head_dim -1"},
	}
	for _, c := range cases {
		cfg := good
		c.edit(&cfg)
		err := cfg.Validate()
		if err == nil || !strings.Contains(err.Error(), c.field) || !strings.HasPrefix(err.Error(), "hf: ") {
			t.Errorf("%s: %v", c.name, err)
		}
	}
	var ids TokenIDs
	for in, want := range map[string]TokenIDs{`7`: {7}, `[1,2]`: {1, 2}, `null`: nil, `[]`: {}} {
		if err := ids.UnmarshalJSON([]byte(in)); err != nil || !reflect.DeepEqual(ids, want) {
			t.Errorf("TokenIDs %s = %v %v", in, ids, err)
		}
	}
	if err := ids.UnmarshalJSON([]byte(`"x"`)); err == nil {
		t.Error("string token id accepted")
	}
}

// FuzzParse fuzzes the two JSON parsers of this package; neither may panic.
func FuzzParse(f *testing.F) {
	f.Add([]byte(llama3Config))
	f.Add([]byte(qwen2Config))
	f.Add([]byte(`{"chat_template":[{"name":"default","template":"D"}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		if c, err := ParseConfig(data); err == nil {
			_ = c.Validate()
			_, _ = c.HeadDimension(), c.KVHeads()
		}
		_, _ = ChatTemplate(data)
	})
}
