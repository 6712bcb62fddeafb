package model

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/kvhost/kvhost/host/alloc"
	"github.com/kvhost/kvhost/host/device"
	"github.com/kvhost/kvhost/host/device/cpu"
	"github.com/kvhost/kvhost/host/model/gguf"
	"github.com/kvhost/kvhost/host/model/safetensors"
	"github.com/kvhost/kvhost/host/model/synth"
)

func writeTiny(t testing.TB, dtype string) string {
	t.Helper()
	spec, err := synth.Preset("tiny", dtype)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "tiny-"+dtype+".gguf")
	var buf bytes.Buffer
	if err := synth.Write(&buf, spec, nil); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestBatchEqualsSingle: sequences batched together (a prefill chunk next to
// decodes) get the same logits as each run alone.
func TestBatchEqualsSingle(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping in -short mode: batched-vs-alone logits for three weight types")
	}
	for _, dtype := range []string{"f32", "f16", "q8_0"} {
		t.Run(dtype, func(t *testing.T) {
			path := writeTiny(t, dtype)
			r := load(t, path, 64)
			prompts := [][]int32{{1, 50, 60, 70, 80, 90}, {1, 400}, {1, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23}}
			V := r.m.Config.Vocab
			var single [][]float32
			for _, p := range prompts {
				var pages []int32
				single = append(single, r.run(t, &pages, p, 0, 1))
				r.pool.Release(pages)
			}
			seqs := make([]Seq, len(prompts))
			for i, p := range prompts {
				pages, err := r.pool.Grow(nil, len(p))
				if err != nil {
					t.Fatal(err)
				}
				seqs[i] = Seq{Tokens: p, Pages: one(pages), LogitRows: 1}
			}
			batched := make([]float32, len(prompts)*V)
			if err := r.m.Forward(r.pools, seqs, batched); err != nil {
				t.Fatal(err)
			}
			for i := range prompts {
				var d float64
				for j := 0; j < V; j++ {
					d = math.Max(d, math.Abs(float64(batched[i*V+j]-single[i][j])))
				}
				if d > 1e-4 {
					t.Fatalf("sequence %d: batched logits differ by %g", i, d)
				}
			}
			// Greedy output depends on context: different prompts ending in the
			// same token disagree.
			a, b := argmax32(single[0]), argmax32(single[1])
			c := argmax32(single[2])
			if a == b && b == c {
				t.Fatalf("greedy next token %d is the same for every context", a)
			}
			// The activation peak is released: nothing is left allocated.
			if st := r.act.Stats(); st.ByCategory[alloc.Activations] != 0 || st.Allocated != st.ByCategory[alloc.Workspace] {
				t.Fatalf("forward leaked activations: %+v", st)
			}
		})
	}
}

func argmax32(x []float32) int {
	b := 0
	for i, v := range x {
		if v > x[b] {
			b = i
		}
	}
	return b
}

// rewrite parses a GGUF, lets edit change it, and writes it back.
func rewrite(t *testing.T, src string, edit func(kvs []gguf.KV, ts []gguf.TensorSpec) ([]gguf.KV, []gguf.TensorSpec)) string {
	t.Helper()
	f, err := gguf.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	kvs := append([]gguf.KV(nil), f.KVs...)
	var ts []gguf.TensorSpec
	for _, ti := range f.Tensors {
		_, raw, err := f.Tensor(ti.Name)
		if err != nil {
			t.Fatal(err)
		}
		ts = append(ts, gguf.TensorSpec{Name: ti.Name, Dims: ti.Dims, Type: ti.Type, Data: append([]byte(nil), raw...)})
	}
	kvs, ts = edit(kvs, ts)
	var buf bytes.Buffer
	if err := gguf.Write(&buf, kvs, ts, 0); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "edited.gguf")
	if err := os.WriteFile(out, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return out
}

func setKV(kvs []gguf.KV, key string, v gguf.Value) []gguf.KV {
	for i := range kvs {
		if kvs[i].Key == key {
			kvs[i].Value = v
			return kvs
		}
	}
	return append(kvs, gguf.KV{Key: key, Value: v})
}

func TestLoadRejectsBadModels(t *testing.T) {
	src := writeTiny(t, "f32")
	raw, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	trunc := filepath.Join(t.TempDir(), "truncated.gguf")
	if err := os.WriteFile(trunc, raw[:len(raw)/2], 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		path string
		want []string
	}{
		{"truncated file", trunc, []string{"truncated.gguf", "offset"}},
		{"missing file", filepath.Join(t.TempDir(), "nope.gguf"), []string{"nope.gguf"}},
		{"unknown architecture", rewrite(t, src, func(kvs []gguf.KV, ts []gguf.TensorSpec) ([]gguf.KV, []gguf.TensorSpec) {
			return setKV(kvs, "general.architecture", gguf.NewString("gpt-j")), ts
		}), []string{"edited.gguf", `"gpt-j"`, "not supported"}},
		{"absurd layer count", rewrite(t, src, func(kvs []gguf.KV, ts []gguf.TensorSpec) ([]gguf.KV, []gguf.TensorSpec) {
			return setKV(kvs, "llama.block_count", gguf.NewUint32(1<<30)), ts
		}), []string{"edited.gguf", "num_layers"}},
		{"heads do not divide", rewrite(t, src, func(kvs []gguf.KV, ts []gguf.TensorSpec) ([]gguf.KV, []gguf.TensorSpec) {
			return setKV(kvs, "llama.attention.head_count_kv", gguf.NewUint32(3)), ts
		}), []string{"edited.gguf", "num_kv_heads"}},
		{"wrong tensor shape", rewrite(t, src, func(kvs []gguf.KV, ts []gguf.TensorSpec) ([]gguf.KV, []gguf.TensorSpec) {
			return setKV(kvs, "llama.feed_forward_length", gguf.NewUint32(200)), ts
		}), []string{"blk.0.ffn_gate.weight", "shape"}},
		{"missing tensor", rewrite(t, src, func(kvs []gguf.KV, ts []gguf.TensorSpec) ([]gguf.KV, []gguf.TensorSpec) {
			out := ts[:0]
			for _, x := range ts {
				if x.Name != "blk.1.attn_v.weight" {
					out = append(out, x)
				}
			}
			return kvs, out
		}), []string{"blk.1.attn_v.weight", "missing"}},
		{"unsupported tensor type", rewrite(t, src, func(kvs []gguf.KV, ts []gguf.TensorSpec) ([]gguf.KV, []gguf.TensorSpec) {
			for i := range ts {
				if ts[i].Name == "blk.0.attn_q.weight" {
					ts[i].Type = gguf.TypeF64
					ts[i].Data = append(ts[i].Data, ts[i].Data...)
				}
			}
			return kvs, ts
		}), []string{"blk.0.attn_q.weight", "F64", "supported"}},
		{"tokenizer and embedding disagree", rewrite(t, src, func(kvs []gguf.KV, ts []gguf.TensorSpec) ([]gguf.KV, []gguf.TensorSpec) {
			for i := range kvs {
				if kvs[i].Key == "tokenizer.ggml.tokens" {
					toks, _ := kvs[i].Value.Strings()
					kvs[i].Value = gguf.NewStringArray(toks[:1000])
				}
				if kvs[i].Key == "tokenizer.ggml.scores" {
					s, _ := kvs[i].Value.Floats()
					kvs[i].Value = gguf.NewFloat32Array(s[:1000])
				}
				if kvs[i].Key == "tokenizer.ggml.token_type" {
					s, _ := kvs[i].Value.Ints()
					ints := make([]int32, 1000)
					for j := range ints {
						ints[j] = int32(s[j])
					}
					kvs[i].Value = gguf.NewInt32Array(ints)
				}
			}
			return kvs, ts
		}), []string{"tokenizer has 1000 tokens"}},
		{"quantized type without a kernel", rewrite(t, src, func(kvs []gguf.KV, ts []gguf.TensorSpec) ([]gguf.KV, []gguf.TensorSpec) {
			for i := range ts {
				if ts[i].Name == "blk.0.ffn_down.weight" {
					ts[i].Type, ts[i].Data = gguf.TypeQ8_1, make([]byte, ts[i].Dims[0]*ts[i].Dims[1]/32*36)
				}
			}
			return kvs, ts
		}), []string{"blk.0.ffn_down.weight", "Q8_1", "q4_k", "iq4_xs", "mxfp4"}},
		{"rope_freqs of the wrong length", withRopeFreqs(t, src, gguf.TypeF32, f32Bytes(1, 2, 3)), []string{"rope_freqs.weight", "want [8]"}},
		{"rope_freqs not F32", withRopeFreqs(t, src, gguf.TypeF16, make([]byte, 16)), []string{"rope_freqs.weight", "want F32"}},
		{"rope_freqs with a zero factor", withRopeFreqs(t, src, gguf.TypeF32, f32Bytes(1, 1, 1, 0, 2, 2, 2, 2)), []string{"rope_freqs.weight[3]", "positive"}},
		{"rope_freqs with NaN", withRopeFreqs(t, src, gguf.TypeF32, f32Bytes(1, 1, 1, 1, 2, 2, 2, float32(math.NaN()))), []string{"rope_freqs.weight[7]", "positive"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dev, err := cpu.New(device.Options{MemoryBytes: 1 << 30, Threads: 1})
			if err != nil {
				t.Fatal(err)
			}
			defer dev.Close()
			w := alloc.NewDirect("weights", dev)
			_, err = Load(tt.path, Options{Device: dev, Weights: w, Activations: alloc.New("caching", dev)})
			if err == nil {
				t.Fatal("loaded a bad model")
			}
			for _, s := range tt.want {
				if !strings.Contains(err.Error(), s) {
					t.Fatalf("error %q does not mention %q", err, s)
				}
			}
			if _, held := w.Bytes(); held != 0 {
				t.Fatalf("a failed load left %d bytes of weights allocated", held)
			}
			if free, total := dev.MemGetInfo(); free != total {
				t.Fatalf("a failed load left %d bytes of device memory in use", total-free)
			}
		})
	}
}

func TestLoadOutOfDeviceMemory(t *testing.T) {
	src := writeTiny(t, "f32")
	dev, err := cpu.New(device.Options{MemoryBytes: 4 << 20, Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	_, err = Load(src, Options{Device: dev, Weights: alloc.NewDirect("weights", dev), Activations: alloc.New("caching", dev)})
	if err == nil || !strings.Contains(err.Error(), "out of memory") {
		t.Fatalf("want an out-of-memory error naming the tensor, got %v", err)
	}
	if free, total := dev.MemGetInfo(); free != total {
		t.Fatal("partial upload not freed")
	}
}

// TestHFMatchesGGUF converts GGUF models into Hugging Face directories —
// safetensors with q/k rows un-permuted to the half-split layout HF uses —
// and checks the HF loader (NeoX rope) gives the GGUF loader's logits. The
// Llama-3.1 cases give the GGUF llama.cpp's rope_freqs.weight table (built
// the way its converter builds it, in float32) and the HF copy the
// rope_scaling rule: both must rotate alike, and differently from no scaling.
func TestHFMatchesGGUF(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping in -short mode: HF-vs-GGUF logits over converted models")
	}
	// original 1024, low 1, high 8 puts the synthetic models' frequencies in
	// all three of the rule's regions (kept, smoothed, divided).
	const scaling = `{"rope_type":"llama3","factor":8,"low_freq_factor":1,"high_freq_factor":8,"original_max_position_embeddings":1024}`
	tokens := make([]int32, 48)
	for i := range tokens {
		tokens[i] = int32(1 + (i*37)%250)
	}
	cases := []struct {
		name, path, ropeScaling string
	}{
		{"tiny", writeTiny(t, "f32"), ""},
		{"tiny-llama3.1", writeTiny(t, "f32"), scaling},
	}
	p := storiesPath(t)
	cases = append(cases, struct{ name, path, ropeScaling string }{"stories260K", p, ""},
		struct{ name, path, ropeScaling string }{"stories260K-llama3.1", p, scaling})
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			plain := load(t, tc.path, 16)
			gpath := tc.path
			if tc.ropeScaling != "" {
				c := plain.m.Config
				gpath = withRopeFreqs(t, tc.path, gguf.TypeF32, f32Bytes(llamaCppRopeFactors(c.Rope.RotDim, c.Rope.Theta, 8, 1, 8, 1024)...))
			}
			g := load(t, gpath, 16)
			h := load(t, hfCopy(t, tc.path, g.m.Config, tc.ropeScaling), 16)
			var gp, hp, pp []int32
			a := g.run(t, &gp, tokens, 0, len(tokens))
			b := h.run(t, &hp, tokens, 0, len(tokens))
			if d := maxAbsDiff(a, b); d > 1e-4 {
				t.Fatalf("HF and GGUF logits differ by %g", d)
			}
			if tc.ropeScaling != "" {
				u := plain.run(t, &pp, tokens, 0, len(tokens))
				if d := maxAbsDiff(a, u); d < 1e-3 {
					t.Fatalf("scaled and unscaled rope give logits within %g: the scaling was not exercised", d)
				}
			}
		})
	}
}

func maxAbsDiff(a, b []float32) float64 {
	var d float64
	for i := range a {
		d = math.Max(d, math.Abs(float64(a[i]-b[i])))
	}
	return d
}

// llamaCppRopeFactors is the table llama.cpp's converter writes as
// rope_freqs.weight for rope_type llama3, computed as it does in float32.
func llamaCppRopeFactors(dim int, base, factor, low, high float64, orig int) []float32 {
	var out []float32
	lowWavelen := float32(orig) / float32(low)
	highWavelen := float32(orig) / float32(high)
	for i := 0; i < dim; i += 2 {
		freq := 1 / float32(math.Pow(base, float64(i)/float64(dim)))
		wavelen := 2 * math.Pi / freq
		switch {
		case wavelen < highWavelen:
			out = append(out, 1)
		case wavelen > lowWavelen:
			out = append(out, float32(factor))
		default:
			smooth := (float32(orig)/wavelen - float32(low)) / float32(high-low)
			out = append(out, 1/((1-smooth)/float32(factor)+smooth))
		}
	}
	return out
}

// withRopeFreqs copies a GGUF with a rope_freqs.weight tensor added.
func withRopeFreqs(t *testing.T, src string, typ gguf.TensorType, data []byte) string {
	t.Helper()
	n := uint64(len(data) / 4)
	if typ == gguf.TypeF16 {
		n = uint64(len(data) / 2)
	}
	return rewrite(t, src, func(kvs []gguf.KV, ts []gguf.TensorSpec) ([]gguf.KV, []gguf.TensorSpec) {
		return kvs, append(ts, gguf.TensorSpec{Name: "rope_freqs.weight", Dims: []uint64{n}, Type: typ, Data: data})
	})
}

func f32Bytes(v ...float32) []byte {
	out := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(out[4*i:], math.Float32bits(x))
	}
	return out
}

// hfCopy writes an F32 GGUF as a Hugging Face directory with config.json
// from c (and rope_scaling, when given) and a byte-level tokenizer.json.
func hfCopy(t *testing.T, path string, c Config, ropeScaling string) string {
	t.Helper()
	f, err := gguf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	dir := t.TempDir()
	names := map[string]string{"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight"}
	var tensors []safetensors.Tensor
	for _, ti := range f.Tensors {
		if ti.Name == "rope_freqs.weight" {
			continue
		}
		if ti.Type != gguf.TypeF32 {
			t.Fatalf("%s is %v; hfCopy converts F32 models", ti.Name, ti.Type)
		}
		_, raw, _ := f.Tensor(ti.Name)
		name := names[ti.Name]
		if name == "" {
			name = hfName(ti.Name)
		}
		data := append([]byte(nil), raw...)
		shape := []uint64{ti.Dims[0]}
		if len(ti.Dims) == 2 {
			shape = []uint64{ti.Dims[1], ti.Dims[0]}
		}
		if strings.HasSuffix(ti.Name, "attn_q.weight") {
			data = halfSplit(data, c.Heads, c.HeadDim, 4*c.Hidden)
		}
		if strings.HasSuffix(ti.Name, "attn_k.weight") {
			data = halfSplit(data, c.KVHeads, c.HeadDim, 4*c.Hidden)
		}
		tensors = append(tensors, safetensors.Tensor{Name: name, DType: safetensors.F32, Shape: shape, Data: data})
	}
	var buf bytes.Buffer
	if err := safetensors.Write(&buf, tensors, nil); err != nil {
		t.Fatal(err)
	}
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	cfg := map[string]any{
		"architectures": []string{"LlamaForCausalLM"}, "hidden_size": c.Hidden, "num_hidden_layers": c.Layers,
		"num_attention_heads": c.Heads, "num_key_value_heads": c.KVHeads, "intermediate_size": c.Intermediate,
		"vocab_size": c.Vocab, "rms_norm_eps": c.RMSEps, "rope_theta": c.Rope.Theta,
		"max_position_embeddings": c.ContextLen, "tie_word_embeddings": c.Tied, "eos_token_id": 2,
	}
	if ropeScaling != "" {
		cfg["rope_scaling"] = json.RawMessage(ropeScaling)
	}
	js, err := json.Marshal(cfg)
	must(err)
	must(os.WriteFile(filepath.Join(dir, "model.safetensors"), buf.Bytes(), 0o644))
	must(os.WriteFile(filepath.Join(dir, "config.json"), js, 0o644))
	must(os.WriteFile(filepath.Join(dir, "tokenizer.json"), byteLevelTokenizerJSON(), 0o644))
	return dir
}

// byteLevelTokenizerJSON is a minimal byte-level BPE tokenizer.json with
// 256 byte tokens and one merge (enough to load; the test feeds ids).
func byteLevelTokenizerJSON() []byte {
	var b strings.Builder
	b.WriteString(`{"model":{"type":"BPE","vocab":{`)
	for i, r := range gpt2Alphabet() {
		if i > 0 {
			b.WriteString(",")
		}
		b.WriteString(`"` + escapeJSON(string(r)) + `":` + itoa(i))
	}
	b.WriteString(`},"merges":[]},"pre_tokenizer":{"type":"ByteLevel","add_prefix_space":false},"added_tokens":[]}`)
	return []byte(b.String())
}

func gpt2Alphabet() []rune {
	var rs []rune
	n := 0
	for b := 0; b < 256; b++ {
		if b >= '!' && b <= '~' || b >= 0xA1 && b <= 0xAC || b >= 0xAE && b <= 0xFF {
			rs = append(rs, rune(b))
		} else {
			rs = append(rs, rune(256+n))
			n++
		}
	}
	return rs
}

func escapeJSON(s string) string {
	switch s {
	case `"`:
		return `\"`
	case `\`:
		return `\\`
	}
	return s
}

func itoa(i int) string { return strconv.Itoa(i) }
