package model

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/kvhost/kvhost/host/model/safetensors"
)

// writeHFModel writes a small random Hugging Face checkpoint of arch
// ("Qwen2ForCausalLM": q/k/v biases; "Qwen3ForCausalLM": q/k norms) and
// returns its directory and the weights by canonical (GGUF) name for the
// float64 reference.
func writeHFModel(t *testing.T, arch string) (string, *refModel) {
	t.Helper()
	const hidden, layers, heads, kvHeads, headDim, inter, vocab = 32, 2, 4, 2, 8, 48, 300
	bias, qkNorm := arch == "Qwen2ForCausalLM", arch == "Qwen3ForCausalLM"
	ref := &refModel{dim: hidden, hidden: inter, layers: layers, heads: heads, kvHeads: kvHeads, vocab: vocab,
		eps: 1e-6, theta: 1e6, neox: true, bias: bias, qkNorm: qkNorm, w: map[string][]float64{},
		kcache: make([][][]float64, layers), vcache: make([][][]float64, layers)}
	seed := uint64(12345)
	rnd := func(n int, std float64) []float64 {
		out := make([]float64, n)
		for i := range out {
			seed = seed*6364136223846793005 + 1442695040888963407
			// uniform in [-std·√3, std·√3): variance std²
			u := float64(seed>>11)/(1<<53)*2 - 1
			out[i] = float64(float32(u * std * math.Sqrt(3)))
		}
		return out
	}
	var tensors []safetensors.Tensor
	add := func(canon string, shape []uint64, vals []float64) {
		ref.w[canon] = vals
		data := make([]byte, 4*len(vals))
		for i, v := range vals {
			binary.LittleEndian.PutUint32(data[4*i:], math.Float32bits(float32(v)))
		}
		name := hfName(canon)
		if canon == "token_embd.weight" {
			name = "model.embed_tokens.weight"
		}
		tensors = append(tensors, safetensors.Tensor{Name: name, DType: safetensors.F32, Shape: shape, Data: data})
	}
	ones := func(n int) []float64 {
		v := rnd(n, 0.1)
		for i := range v {
			v[i] += 1
		}
		return v
	}
	add("token_embd.weight", []uint64{vocab, hidden}, rnd(vocab*hidden, 1))
	for l := 0; l < layers; l++ {
		p := fmt.Sprintf("blk.%d.", l)
		add(p+"attn_norm.weight", []uint64{hidden}, ones(hidden))
		add(p+"attn_q.weight", []uint64{heads * headDim, hidden}, rnd(heads*headDim*hidden, 0.4))
		add(p+"attn_k.weight", []uint64{kvHeads * headDim, hidden}, rnd(kvHeads*headDim*hidden, 0.4))
		add(p+"attn_v.weight", []uint64{kvHeads * headDim, hidden}, rnd(kvHeads*headDim*hidden, 0.2))
		add(p+"attn_output.weight", []uint64{hidden, heads * headDim}, rnd(hidden*heads*headDim, 0.2))
		if bias {
			add(p+"attn_q.bias", []uint64{heads * headDim}, rnd(heads*headDim, 0.5))
			add(p+"attn_k.bias", []uint64{kvHeads * headDim}, rnd(kvHeads*headDim, 0.5))
			add(p+"attn_v.bias", []uint64{kvHeads * headDim}, rnd(kvHeads*headDim, 0.5))
		}
		if qkNorm {
			add(p+"attn_q_norm.weight", []uint64{headDim}, ones(headDim))
			add(p+"attn_k_norm.weight", []uint64{headDim}, ones(headDim))
		}
		add(p+"ffn_norm.weight", []uint64{hidden}, ones(hidden))
		add(p+"ffn_gate.weight", []uint64{inter, hidden}, rnd(inter*hidden, 0.2))
		add(p+"ffn_up.weight", []uint64{inter, hidden}, rnd(inter*hidden, 0.2))
		add(p+"ffn_down.weight", []uint64{hidden, inter}, rnd(hidden*inter, 0.15))
	}
	add("output_norm.weight", []uint64{hidden}, ones(hidden))
	add("output.weight", []uint64{vocab, hidden}, rnd(vocab*hidden, 0.3))
	dir := t.TempDir()
	var buf bytes.Buffer
	if err := safetensors.Write(&buf, tensors, nil); err != nil {
		t.Fatal(err)
	}
	cfg := fmt.Sprintf(`{"architectures":[%q],"hidden_size":%d,"num_hidden_layers":%d,"num_attention_heads":%d,
		"num_key_value_heads":%d,"head_dim":%d,"intermediate_size":%d,"vocab_size":%d,"rms_norm_eps":1e-6,
		"rope_theta":1000000,"max_position_embeddings":256,"tie_word_embeddings":false}`, arch, hidden, layers, heads, kvHeads, headDim, inter, vocab)
	for name, data := range map[string][]byte{"model.safetensors": buf.Bytes(), "config.json": []byte(cfg), "tokenizer.json": byteLevelTokenizerJSON()} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir, ref
}

// TestQwenMatchesFloat64Reference: Qwen2 (q/k/v biases) and Qwen3 (q/k
// RMSNorm per head) checkpoints loaded from Hugging Face directories give
// the float64 reference's logits, row for row, through a chunked prefill
// and decode steps.
func TestQwenMatchesFloat64Reference(t *testing.T) {
	for _, arch := range []string{"Qwen2ForCausalLM", "Qwen3ForCausalLM"} {
		t.Run(arch, func(t *testing.T) {
			dir, ref := writeHFModel(t, arch)
			r := load(t, dir, 16)
			c := r.m.Config
			if c.QKVBias != ref.bias || c.QKNorm != ref.qkNorm || !c.Rope.Neox {
				t.Fatalf("config %+v", c)
			}
			tokens := []int32{5, 77, 200, 13, 299, 1, 64, 128, 9}
			var pages []int32
			got := r.run(t, &pages, tokens[:5], 0, 5)
			got = append(got, r.run(t, &pages, tokens[5:], 5, 4)...)
			worst := 0.0
			for i, tok := range tokens {
				want := ref.step(tok)
				worst = math.Max(worst, maxDiff(got[i*c.Vocab:(i+1)*c.Vocab], want))
			}
			if worst > 1e-4 {
				t.Fatalf("logits differ from the float64 reference by %g", worst)
			}
			t.Logf("%s: max |logit − reference| = %.2g over %d rows", arch, worst, len(tokens))
		})
	}
}
