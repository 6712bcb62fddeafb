package model

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/kvhost/kvhost/configurators/layout"
	"github.com/kvhost/kvhost/host/model/gguf"
	"github.com/kvhost/kvhost/host/model/synth"
	"github.com/kvhost/kvhost/internal/testmodels"
	kcpu "github.com/kvhost/kvhost/kernels/cpu"
	"github.com/kvhost/kvhost/sdk"
)

// greedy generates n tokens greedily after prompt (one sequence) and
// returns their text.
func (r *rig) greedy(t *testing.T, prompt string, n int) string {
	t.Helper()
	toks, err := r.m.Tokenizer.Encode(prompt, true)
	if err != nil {
		t.Fatal(err)
	}
	var pages []int32
	logits := r.run(t, &pages, toks, 0, 1)
	pos := len(toks)
	var gen []int32
	for range n {
		next := int32(argmax32(logits))
		gen = append(gen, next)
		logits = r.run(t, &pages, []int32{next}, pos, 1)
		pos++
	}
	text, err := r.m.Tokenizer.Decode(gen)
	if err != nil {
		t.Fatal(err)
	}
	// A sequence's first piece loses its leading space when decoded alone.
	return strings.TrimLeft(text, " ")
}

// TestArchsMatchLlamaCpp: gen-model's qwen3moe and deepseek2 files
// generate, greedily, the text llama.cpp's llama-simple generates from the
// same files. llama.cpp recognises deepseek2 without q_lora (V2-Lite's
// form) by its 27 layers, so that file has 27.
func TestArchsMatchLlamaCpp(t *testing.T) {
	tools, ok := testmodels.LlamaCpp()
	if !ok {
		t.Skip("skipping: ../shared/tools/llama.cpp is absent; this cross-check runs llama-simple")
	}
	for _, c := range []struct {
		arch   string
		layers int
	}{{"qwen3moe", 0}, {"deepseek2", 27}, {"deepseek3", 0}} {
		t.Run(c.arch, func(t *testing.T) {
			path := writeArch(t, c.arch, "tiny", c.layers)
			const prompt, n = "Once upon a time", 32
			out, err := exec.Command(filepath.Join(tools, "run"), "llama-simple", "-m", path, "-n", strconv.Itoa(n), prompt).Output()
			if err != nil {
				t.Fatalf("llama-simple: %v", err)
			}
			want := strings.TrimSpace(string(out))
			got := load(t, path, 16).greedy(t, prompt, n)
			if !strings.Contains(want, prompt) || !strings.HasSuffix(want, got) || len(got) < n {
				t.Fatalf("greedy text differs from llama.cpp's:\nkvhost:    %q\nllama.cpp: %q", got, want)
			}
		})
	}
}

// TestArchBatchEqualsSingle: sequences batched together (prefill chunks
// beside a decode row) get the logits each gets alone — routing, grouping
// and the latent permutations depend on the batch's rows only through
// their count.
func TestArchBatchEqualsSingle(t *testing.T) {
	for _, arch := range []string{"qwen3moe", "deepseek3"} {
		t.Run(arch, func(t *testing.T) {
			r := load(t, writeArch(t, arch, "tiny", 0), 64)
			prompts := [][]int32{{1, 50, 60, 70, 80, 90}, {1, 400}, {1, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18}}
			V := r.m.Config.Vocab
			var single [][]float32
			for _, p := range prompts {
				var pages []int32
				single = append(single, r.run(t, &pages, p, 0, 1))
			}
			var seqs []Seq
			for _, p := range prompts {
				pages, err := r.pool.Grow(nil, len(p))
				if err != nil {
					t.Fatal(err)
				}
				seqs = append(seqs, Seq{Tokens: p, Pages: one(pages), LogitRows: 1})
			}
			logits := make([]float32, len(prompts)*V)
			if err := r.m.Forward(r.pools, seqs, logits); err != nil {
				t.Fatal(err)
			}
			for i := range prompts {
				var d float64
				for j := range V {
					d = math.Max(d, math.Abs(float64(logits[i*V+j]-single[i][j])))
				}
				if d > 1e-4 {
					t.Fatalf("sequence %d: batched logits differ from alone by %g", i, d)
				}
			}
		})
	}
}

// fuseKVB rewrites a deepseek2 file into the older form: one fused
// attn_kv_b per layer ([heads·(nope+v), kv_lora]) instead of attn_k_b and
// attn_v_b, and no *_mla keys (key/value_length the per-head dims).
func fuseKVB(t *testing.T, path string, c Config) string {
	a := c.mla()
	H, r, dn, dv := c.Heads, a.KVLoraRank, a.NopeDim, a.VHeadDim
	return rewrite(t, path, func(kvs []gguf.KV, ts []gguf.TensorSpec) ([]gguf.KV, []gguf.TensorSpec) {
		var out []gguf.KV
		for _, kv := range kvs {
			switch kv.Key {
			case "deepseek2.attention.key_length_mla", "deepseek2.attention.value_length_mla":
				continue
			case "deepseek2.attention.key_length":
				kv.Value = gguf.NewUint32(uint32(dn + a.RopeDim))
			case "deepseek2.attention.value_length":
				kv.Value = gguf.NewUint32(uint32(dv))
			}
			out = append(out, kv)
		}
		byName := map[string][]byte{}
		for _, s := range ts {
			byName[s.Name] = s.Data
		}
		var specs []gguf.TensorSpec
		for _, s := range ts {
			if strings.HasSuffix(s.Name, "attn_v_b.weight") {
				continue
			}
			if p, ok := strings.CutSuffix(s.Name, "attn_k_b.weight"); ok {
				kb, vb := f32s(byName[s.Name]), f32s(byName[p+"attn_v_b.weight"])
				fused := make([]float32, 0, H*(dn+dv)*r)
				for h := range H {
					for j := range dn { // W_UK row j = column j of W_UKᵀ
						for i := range r {
							fused = append(fused, kb[(h*r+i)*dn+j])
						}
					}
					fused = append(fused, vb[h*dv*r:(h+1)*dv*r]...)
				}
				s = gguf.TensorSpec{Name: p + "attn_kv_b.weight", Dims: []uint64{uint64(r), uint64(H * (dn + dv))}, Type: gguf.TypeF32, Data: f32Bytes(fused...)}
			}
			specs = append(specs, s)
		}
		return out, specs
	})
}

func f32s(b []byte) []float32 {
	out := make([]float32, len(b)/4)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return out
}

// logitsOf runs tokens through a fresh sequence and returns every row's
// logits.
func logitsOf(t *testing.T, r *rig, tokens []int32) []float32 {
	var pages []int32
	return r.run(t, &pages, tokens, 0, len(tokens))
}

func closeLogits(t *testing.T, what string, a, b []float32, tol float64) {
	t.Helper()
	var d, scale float64
	for i := range a {
		d = math.Max(d, math.Abs(float64(a[i]-b[i])))
		scale = math.Max(scale, math.Abs(float64(a[i])))
	}
	if d > tol*scale {
		t.Fatalf("%s: logits differ by %g (largest %g, tolerance %g relative)", what, d, scale, tol)
	}
}

var archPrompt = []int32{1, 450, 4996, 17, 2, 31999, 808, 9, 77, 1203}

// TestDeepseekFusedKVBEqualsSplit: an older conversion's fused attn_kv_b
// (split and transposed at load) gives the split form's logits.
func TestDeepseekFusedKVBEqualsSplit(t *testing.T) {
	path := writeArch(t, "deepseek2", "tiny", 0)
	split := load(t, path, 16)
	fused := load(t, fuseKVB(t, path, split.m.Config), 16)
	if fused.m.Config.mla().NopeDim != split.m.Config.mla().NopeDim || fused.m.Config.mla().VHeadDim != split.m.Config.mla().VHeadDim {
		t.Fatalf("old-style header read as %+v, new as %+v", *fused.m.Config.mla(), *split.m.Config.mla())
	}
	closeLogits(t, "fused vs split kv_b", logitsOf(t, fused, archPrompt), logitsOf(t, split, archPrompt), 1e-5)
}

// TestArchHFEqualsGGUF: the Hugging Face copy ExportHF writes of a
// generated model (per-expert tensors stacked at load, DeepSeek's fused
// kv_b_proj split) gives the GGUF file's logits.
func TestArchHFEqualsGGUF(t *testing.T) {
	for _, arch := range []string{"qwen3moe", "deepseek2", "deepseek3"} {
		t.Run(arch, func(t *testing.T) {
			path := writeArchBPE(t, arch)
			g := load(t, path, 16)
			h := load(t, exportHF(t, path), 16)
			ge, he := *g.m.Config.moe(), *h.m.Config.moe()
			for _, e := range []*MoEConfig{&ge, &he} {
				if e.Router.Groups <= 1 { // one group (GGUF) is none (HF greedy)
					e.Router.Groups, e.Router.TopKGroups = 0, 0
				}
			}
			if fmt.Sprint(ge) != fmt.Sprint(he) {
				t.Fatalf("experts: GGUF %+v, HF %+v", ge, he)
			}
			// the same values in the same order: bit-equal
			closeLogits(t, "HF vs GGUF", logitsOf(t, h, archPrompt), logitsOf(t, g, archPrompt), 0)
		})
	}
}

// TestMLAPoolHoldsTheLatentRow: the pool serving a DeepSeek model is the
// mla configurator's latent pool, its bytes per token the configurator's
// cell — layers × (kv_lora_rank + qk_rope_head_dim) elements, not K and V.
func TestMLAPoolHoldsTheLatentRow(t *testing.T) {
	r := load(t, writeArch(t, "deepseek3", "tiny", 0), 16)
	c := r.m.Config
	p := r.pools.Layout().Pools[0]
	want := int64(c.Layers * (c.mla().KVLoraRank + c.mla().RopeDim) * 4)
	if p.Kind != sdk.LatentAttention || p.UnitBytes != want {
		t.Fatalf("pool %s of kind %s holds %d bytes per token, want a latent pool of %d", p.Name, p.Kind, p.UnitBytes, want)
	}
	raw, _ := json.Marshal(map[string]any{"architectures": []string{"DeepseekV3ForCausalLM"}, "num_hidden_layers": c.Layers,
		"kv_lora_rank": c.mla().KVLoraRank, "qk_rope_head_dim": c.mla().RopeDim})
	plan, err := layout.MLA{}.Plan(sdk.ConfigureInput{Model: raw, Host: sdk.HostFacts{KVDType: sdk.KVFP32, PageSize: 16}.WithDefaults()})
	if err != nil {
		t.Fatal(err)
	}
	if cell := plan.Pools()[0].BytesPerUnit; cell != want {
		t.Fatalf("configurator cell %d bytes, pool %d", cell, want)
	}
}

// TestArchConfigErrors: a header or config.json out of range is refused
// with the field and its range named.
func TestArchConfigErrors(t *testing.T) {
	path := writeArch(t, "deepseek3", "tiny", 0)
	for _, c := range []struct {
		key  string
		v    gguf.Value
		want []string
	}{
		{"deepseek2.expert_used_count", gguf.NewUint32(9), []string{"num_experts_per_tok 9", "top-k 9", "experts 8"}},
		{"deepseek2.expert_group_count", gguf.NewUint32(3), []string{"n_group 3", "groups 3 must divide experts 8"}},
		{"deepseek2.leading_dense_block_count", gguf.NewUint32(7), []string{"first_k_dense_replace = 7", "[0, num_layers 3]"}},
		{"deepseek2.attention.kv_lora_rank", gguf.NewUint32(0), []string{"kv_lora_rank = 0", "[1, 65536]"}},
		{"deepseek2.expert_gating_func", gguf.NewUint32(3), []string{"expert_gating_func = 3", "1 softmax, 2 sigmoid"}},
		{"deepseek2.attention.key_length_mla", gguf.NewUint32(8), []string{"key_length 8", "rope dimension 8"}},
	} {
		bad := rewrite(t, path, func(kvs []gguf.KV, ts []gguf.TensorSpec) ([]gguf.KV, []gguf.TensorSpec) {
			return setKV(kvs, c.key, c.v), ts
		})
		f, err := gguf.Open(bad)
		if err != nil {
			t.Fatal(err)
		}
		_, err = ConfigFromGGUF(f)
		f.Close()
		if err == nil {
			t.Fatalf("%s: accepted", c.key)
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Fatalf("%s: error %q does not say %q", c.key, err, w)
			}
		}
	}
}

// TestDeepseekV3ConfigFromHF: DeepSeek-V3's published config.json reads
// as V3 (q_lora, sigmoid noaux_tc routing over 8 groups, 2.5 scale, three
// dense layers, DeepSeek's YaRN scale), its MTP layer named in a startup
// note; V2-Lite's as the q_lora-free softmax form.
func TestDeepseekConfigsFromHF(t *testing.T) {
	root, err := testmodels.Root()
	if err != nil {
		t.Fatal(err)
	}
	read := func(name string) Config {
		raw, err := os.ReadFile(filepath.Join(root, "configurators", "testdata", name+".json"))
		if err != nil {
			t.Fatal(err)
		}
		c, err := ConfigFromHF(raw, name)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	v3 := read("deepseek-v3")
	r := v3.moe().Router
	if v3.mla().QLoraRank != 1536 || v3.mla().LatentRow() != 576 || r.Scoring != kcpu.ScoreSigmoid || r.Groups != 8 || r.TopKGroups != 4 ||
		r.GroupScoring != kcpu.GroupTop2Sum || r.Scale != 2.5 || !r.NormTopK || !v3.moe().SelectionBias || v3.moe().FirstDense != 3 || v3.moe().Shared != 2048 {
		t.Fatalf("V3 read as %+v / %+v", *v3.mla(), *v3.moe())
	}
	if s := float64(v3.mlaScale()) * math.Sqrt(192); math.Abs(s-1.87385) > 1e-4 {
		t.Fatalf("V3 softmax scale × sqrt(192) = %v, want mscale(40, 1)² = 1.87385", s)
	}
	if n := v3.Notes(); len(n) != 1 || !strings.Contains(n[0], "1 multi-token-prediction layer(s) after layer 60") {
		t.Fatalf("V3 notes %q", n)
	}
	lite := read("deepseek-v2-lite")
	if lite.mla().QLoraRank != 0 || lite.moe().Router.Scoring != kcpu.ScoreSoftmax || lite.moe().Router.Groups > 1 || lite.moe().Shared != 2*1408 || lite.Notes() != nil {
		t.Fatalf("V2-Lite read as %+v / %+v", *lite.mla(), *lite.moe())
	}
	if s := float64(lite.mlaScale()) * math.Sqrt(192); math.Abs(s-1.58963) > 1e-4 {
		t.Fatalf("V2-Lite softmax scale × sqrt(192) = %v, want 1.58963", s)
	}
	// 15.7e9 parameters (the model card's 15.7B)
	if p := lite.Params(); p < 15.6e9 || p > 15.8e9 {
		t.Fatalf("V2-Lite params %d", p)
	}
}

// TestArchDecodeGraphsEqualEager: the routed experts and the latent
// attention replay in captured decode graphs (routing, grouping, the
// grouped matmuls and the latent permutations read their per-step inputs
// at replay) and give the eager forward's logits.
func TestArchDecodeGraphsEqualEager(t *testing.T) {
	for _, arch := range []string{"qwen3moe", "deepseek3"} {
		t.Run(arch, func(t *testing.T) {
			r := load(t, writeArch(t, arch, "tiny", 0), 256)
			g, err := r.m.CaptureDecodeGraphs(r.pools, []int{1, 4})
			if err != nil {
				t.Fatal(err)
			}
			defer g.Close()
			V, n := r.m.Config.Vocab, 3
			var sides [2][]Seq
			for s := range sides {
				for i := range n {
					prompt := []int32{1, int32(10 + i*7), int32(300 + i), int32(5000 + 13*i)}
					var pages []int32
					last := r.run(t, &pages, prompt, 0, 1)
					if pages, err = r.pool.Grow(pages, len(prompt)+8); err != nil {
						t.Fatal(err)
					}
					sides[s] = append(sides[s], Seq{Tokens: []int32{int32(argmax32(last))}, Start: len(prompt), Pages: one(pages), LogitRows: 1})
				}
			}
			eager, graph := make([]float32, n*V), make([]float32, n*V)
			for step := range 6 {
				if err := r.m.Forward(r.pools, sides[0], eager); err != nil {
					t.Fatal(err)
				}
				if ok, err := g.Run(sides[1], graph); err != nil || !ok {
					t.Fatalf("graph run %v %v", ok, err)
				}
				closeLogits(t, fmt.Sprintf("step %d: graph vs eager", step), graph, eager, 1e-5)
				for i := range n {
					tok := int32(argmax32(eager[i*V : (i+1)*V]))
					for s := range sides {
						sides[s][i].Tokens[0] = tok
						sides[s][i].Start++
					}
				}
			}
		})
	}
}

// TestArchQuantizedTracksF32: gen-model's q8_0 file is its f32 file's
// weights quantized (same draws), expert stacks included, run as stored and
// mapped from the file; its logits stay within what 8-bit weights allow of
// the f32 logits (measured: 2–4 % of the largest logit).
func TestArchQuantizedTracksF32(t *testing.T) {
	for _, arch := range []string{"qwen3moe", "deepseek3"} {
		f32 := load(t, writeArchType(t, arch, "f32"), 16)
		want := logitsOf(t, f32, archPrompt)
		for _, c := range []struct {
			dtype string
			tol   float64
		}{{"q8_0", 0.06}} {
			q := load(t, writeArchType(t, arch, c.dtype), 16)
			if q.m.MappedBytes == 0 {
				t.Fatalf("%s %s: no weight was served from the file in place", arch, c.dtype)
			}
			got := logitsOf(t, q, archPrompt)
			var d, scale float64
			for i := range got {
				d = math.Max(d, math.Abs(float64(got[i]-want[i])))
				scale = math.Max(scale, math.Abs(float64(want[i])))
			}
			t.Logf("%s %s: logits within %.3g of f32 (largest %.3g)", arch, c.dtype, d, scale)
			if d > c.tol*scale || d == 0 {
				t.Fatalf("%s %s: logits differ from f32 by %g, largest logit %g (tolerance %g relative)", arch, c.dtype, d, scale, c.tol)
			}
		}
	}
}

// writeArchType writes gen-model's tiny arch preset in dtype.
func writeArchType(t *testing.T, arch, dtype string) string {
	t.Helper()
	spec, err := synth.ArchPreset(arch, "tiny", dtype)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := synth.Write(&buf, spec, nil); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), arch+"-"+dtype+".gguf")
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}
