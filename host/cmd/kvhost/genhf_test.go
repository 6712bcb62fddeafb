package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvhost/kvhost/host/boot"
	"github.com/kvhost/kvhost/host/engine"
	"github.com/kvhost/kvhost/host/model/hf"
)

// genHFCases are every architecture gen-model writes, with the bound on
// how far the Hugging Face copy's log-probabilities may be from the GGUF
// file's, and why it is not 0:
//   - llama, mistral: GGUF rotates llama.cpp's permuted q/k rows in
//     adjacent pairs, HF the unpermuted rows in halves — the same rotation
//     of the same values, summed in another order (a few ulp);
//   - nemotron_h, granitehybrid: GGUF stores A = −exp(A_log), HF A_log; the
//     loader's −exp(log(−A)) is A to within an ulp or two;
//   - deepseek3 in f16: GGUF's split attn_k_b/attn_v_b are served in f16,
//     HF's fused kv_b_proj is split at load into f32 (model splitKVB) — the
//     same values through the f16 and f32 matvec kernels, which sum in
//     different orders with AVX-512 (1.9e-6 measured);
//   - the rest hold the same values in the same order: bit-equal.
var genHFCases = []struct {
	arch string
	args []string
	tol  float64
}{
	{"llama", nil, 1e-4}, {"mistral", nil, 1e-4},
	{"gemma2", nil, 0}, {"gemma3", nil, 0}, {"gpt-oss", nil, 0},
	{"qwen3moe", nil, 0}, {"deepseek2", nil, 0}, {"deepseek3", nil, 0},
	{"nemotron_h", nil, 1e-4}, {"granitehybrid", nil, 1e-4},
	// half-precision files: the stored bytes are copied (or only moved)
	{"gemma2", []string{"--dtype", "bf16"}, 0}, {"deepseek3", []string{"--dtype", "f16"}, 1e-5},
	{"mistral", []string{"--dtype", "bf16"}, 1e-4}, {"granitehybrid", []string{"--dtype", "f16"}, 1e-4},
	// grouped softmax routing (4 groups, top 2): the GGUF and HF readers
	// rank groups by the same rule (DeepSeek-V2's group_limited_greedy)
	{"deepseek2", []string{"--size", "small"}, 0},
}

// genPair runs gen-model with args in both formats (same seed: the
// presets') and returns the GGUF file and the HF directory.
func genPair(t *testing.T, args ...string) (string, string) {
	t.Helper()
	dir := t.TempDir()
	g, h := filepath.Join(dir, "m.gguf"), filepath.Join(dir, "hf")
	base := append([]string{"--size", "tiny"}, args...)
	var so, se bytes.Buffer
	if err := genModel(append(base, "--out", g, "--tokenizer", "bpe"), &so, &se); err != nil {
		t.Fatalf("gen-model %v: %v", args, err)
	}
	if err := genModel(append(base, "--out", h, "--format", "hf"), &so, &se); err != nil {
		t.Fatalf("gen-model --format hf %v: %v", args, err)
	}
	return g, h
}

// logprobRun is what the engine reports for one greedy request: each
// prompt position's top log-probabilities, then each decoded token's.
type logprobRun struct {
	tokens []int32
	rows   [][]engine.TokenLogprob
}

// serveLogprobs builds path's serving stack on the CPU (the
// configurator's pools, graphs off so both copies take the same path) and
// runs prompt with prompt logprobs and 6 greedy decode steps, the top 20
// of every row.
func serveLogprobs(t *testing.T, path string, prompt []int32) logprobRun {
	t.Helper()
	cfg := boot.Config{Model: path, Device: "cpu", DeviceMemory: 512 << 20, Threads: 2, MaxRunning: 4, MaxQueue: 8,
		ChunkedPrefill: 256, PageSize: 16, GraphMaxBS: -1}
	st, err := boot.Build(cfg, nil, io.Discard)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	defer st.Close(context.Background())
	s, err := st.Engine.Submit(context.Background(), engine.Request{Prompt: prompt, MaxTokens: 6, Logprobs: true, TopLogprobs: 20,
		PromptLogprobs: true, PromptLogprobStart: 1, PromptTopLogprobs: 20, IgnoreEOS: true})
	if err != nil {
		t.Fatal(err)
	}
	var r logprobRun
	for ev := range s.Events {
		if ev.Err != nil {
			t.Fatal(ev.Err)
		}
		for _, p := range ev.Prompt {
			r.rows = append(r.rows, p.Top)
		}
		if !ev.Done || ev.TopLogprobs != nil {
			r.tokens = append(r.tokens, ev.Token)
			r.rows = append(r.rows, ev.TopLogprobs)
		}
	}
	return r
}

// TestGenModelHFMatchesGGUF: for every architecture gen-model writes,
// the Hugging Face directory and the GGUF file of the same flags serve
// the same model — the same greedy tokens, and every prompt row's and
// decode step's top-20 log-probabilities equal (bit for bit where the
// layouts hold the same values in the same order, else within the case's
// stated bound).
func TestGenModelHFMatchesGGUF(t *testing.T) {
	prompt := []int32{1, 450, 996, 17, 300, 511, 808, 9, 77, 403, 12, 260, 99, 31, 7, 64, 128, 256, 3, 5} // < every preset vocabulary
	for _, tc := range genHFCases {
		t.Run(strings.Join(append([]string{tc.arch}, tc.args...), ""), func(t *testing.T) {
			g, h := genPair(t, append([]string{"--arch", tc.arch}, tc.args...)...)
			a, b := serveLogprobs(t, g, prompt), serveLogprobs(t, h, prompt)
			if len(a.rows) != len(prompt)-1+6 || len(b.rows) != len(a.rows) {
				t.Fatalf("rows: gguf %d, hf %d, want %d", len(a.rows), len(b.rows), len(prompt)-1+6)
			}
			if tc.tol == 0 && !equalTokens(a.tokens, b.tokens) {
				t.Fatalf("greedy tokens: gguf %v, hf %v", a.tokens, b.tokens)
			}
			worst := 0.0
			for i := range a.rows {
				ra, rb := a.rows[i], b.rows[i]
				if len(ra) != 20 || len(rb) != 20 {
					t.Fatalf("row %d: %d and %d candidates", i, len(ra), len(rb))
				}
				want := map[int32]float32{}
				for _, c := range ra {
					want[c.Token] = c.Logprob
				}
				for _, c := range rb {
					w, ok := want[c.Token]
					if !ok {
						if tc.tol == 0 {
							t.Fatalf("row %d: token %d in the HF top 20, not in the GGUF's", i, c.Token)
						}
						continue // a near-tie at the 20th place
					}
					worst = math.Max(worst, math.Abs(float64(w-c.Logprob)))
				}
			}
			if worst > tc.tol {
				t.Fatalf("log-probabilities differ by %g (bound %g)", worst, tc.tol)
			}
			t.Logf("%s: %d rows, largest log-probability difference %.3g", tc.arch, len(a.rows), worst)
		})
	}
}

func equalTokens(a, b []int32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestGenModelHFDirectory: the directory holds what transformers writes
// (config.json with the class's own fields, safetensors, the tokenizer
// files with the chat template, generation_config.json), shards with an
// index under --split-max-size, and `kvhost plan` and `kvhost serve` take
// it as --model.
func TestGenModelHFDirectory(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "gemma3")
	var so, se bytes.Buffer
	if err := genModel([]string{"--arch", "gemma3", "--size", "tiny", "--dtype", "bf16", "--format", "hf", "--out", out, "--split-max-size", "1M"}, &so, &se); err != nil {
		t.Fatal(err)
	}
	m, err := hf.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	if m.IndexPath == "" || len(m.WeightFiles) < 2 {
		t.Fatalf("--split-max-size 1M gave %d weight files, index %q", len(m.WeightFiles), m.IndexPath)
	}
	var cfg map[string]any
	if err := json.Unmarshal(m.ConfigJSON, &cfg); err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]any{"model_type": "gemma3_text", "torch_dtype": "bfloat16", "sliding_window": 16.0, "hidden_activation": "gelu_pytorch_tanh"} {
		if cfg[k] != want {
			t.Errorf("config.json %s = %v, want %v", k, cfg[k], want)
		}
	}
	if _, ok := cfg["layer_types"].([]any); !ok {
		t.Errorf("config.json has no layer_types: %v", cfg)
	}
	if !strings.Contains(m.ChatTemplate, "<|im_start|>") {
		t.Errorf("tokenizer_config.json chat template %q", m.ChatTemplate)
	}
	if _, err := os.Stat(filepath.Join(out, "generation_config.json")); err != nil {
		t.Error(err)
	}

	so.Reset()
	if err := run(context.Background(), []string{"plan", "--model", out, "--device-memory", "256MiB"}, &so, &se); err != nil {
		t.Fatalf("plan: %v\n%s", err, se.String())
	}
	if !strings.Contains(so.String(), "Gemma3ForCausalLM") && !strings.Contains(so.String(), "gemma3") {
		t.Errorf("plan output does not name the model:\n%s", so.String())
	}
	url, _ := serveModelForTest(t, out)
	texts, err := chatStream(url, "Hello", 1, 5)
	if err != nil || len(texts) != 1 {
		t.Fatalf("serve --model %s: %v %v", out, texts, err)
	}
}

// TestGenModelHFRefusals: flags --format hf cannot honour are refused
// naming the flag and what it accepts; a quantized GGUF does not export.
func TestGenModelHFRefusals(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--dtype", "q8_0"}, "--dtype q8_0 with --format hf: a Hugging Face checkpoint is written as f32, f16 or bf16"},
		{[]string{"--dtype", "q4_k_m", "--arch", "qwen3moe"}, "--dtype q4_k_m with --format hf"},
		{[]string{"--tokenizer", "spm"}, "--tokenizer spm with --format hf"},
		{[]string{"--split-max-tensors", "3"}, "--split-max-tensors splits GGUF files"},
		{[]string{"--format", "safetensors"}, `--format "safetensors": use gguf or hf`},
	} {
		args := append([]string{"--size", "tiny", "--out", filepath.Join(dir, "x"), "--format", "hf"}, tc.args...)
		err := genModel(args, io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want %q", tc.args, err, tc.want)
		}
	}
	// An existing, non-empty directory is not overwritten.
	full := filepath.Join(dir, "full")
	if err := os.MkdirAll(full, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(full, "keep"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	err := genModel([]string{"--size", "tiny", "--out", full, "--format", "hf"}, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "exists and is not empty") {
		t.Errorf("non-empty --out: %v", err)
	}
	if _, err := os.Stat(filepath.Join(full, "keep")); err != nil {
		t.Errorf("the existing file was lost: %v", err)
	}
}
