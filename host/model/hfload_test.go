package model

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/kvhost/kvhost/host/alloc"
	"github.com/kvhost/kvhost/host/device"
	"github.com/kvhost/kvhost/host/device/cpu"
	"github.com/kvhost/kvhost/host/model/gguf"
	"github.com/kvhost/kvhost/host/model/hf"
	"github.com/kvhost/kvhost/host/model/safetensors"
	kcpu "github.com/kvhost/kvhost/kernels/cpu"
)

// tf5Config rewrites a config.json as transformers ≥ 5 saves it:
// rope_theta, rope_scaling and partial_rotary_factor moved into
// rope_parameters — one object per attention layer type when the model has
// a local rope base (Gemma 3) —, torch_dtype written as dtype; in a
// wrapper's text_config too.
func tf5Config(t *testing.T, raw []byte) []byte {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(hf.PythonJSON(raw), &m); err != nil {
		t.Fatal(err)
	}
	tf5Keys(m)
	if tc, ok := m["text_config"].(map[string]any); ok {
		tf5Keys(tc)
	}
	out, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func tf5Keys(m map[string]any) {
	if d, ok := m["torch_dtype"]; ok {
		m["dtype"] = d
		delete(m, "torch_dtype")
	}
	theta, hasTheta := m["rope_theta"]
	rs, _ := m["rope_scaling"].(map[string]any)
	local, hasLocal := m["rope_local_base_freq"]
	if !hasTheta && rs == nil && !hasLocal {
		return
	}
	p := map[string]any{"rope_type": "default"}
	for k, v := range rs {
		if k == "type" {
			k = "rope_type"
		}
		p[k] = v
	}
	if hasTheta {
		p["rope_theta"] = theta
	}
	if f, ok := m["partial_rotary_factor"]; ok {
		p["partial_rotary_factor"] = f
		delete(m, "partial_rotary_factor")
	}
	delete(m, "rope_theta")
	delete(m, "rope_scaling")
	delete(m, "rope_local_base_freq")
	m["rope_parameters"] = p
	if hasLocal {
		m["rope_parameters"] = map[string]any{"full_attention": p, "sliding_attention": map[string]any{"rope_type": "default", "rope_theta": local}}
	}
}

// rewriteHF copies the HF directory dir (one model.safetensors, as
// exportHF writes a tiny model) into a new one, each tensor through tensor (which returns what to write in its
// place: nothing, itself, several; get reads any other tensor) and
// config.json through config.
func rewriteHF(t *testing.T, dir string, tensor func(ts safetensors.Tensor, get func(string) safetensors.Tensor) []safetensors.Tensor, config func([]byte) []byte, extra ...safetensors.Tensor) string {
	t.Helper()
	set, err := safetensors.OpenFiles([]string{filepath.Join(dir, "model.safetensors")})
	if err != nil {
		t.Fatal(err)
	}
	defer set.Close()
	get := func(name string) safetensors.Tensor {
		ti, raw, err := set.Tensor(name)
		if err != nil {
			t.Fatal(err)
		}
		return safetensors.Tensor{Name: name, DType: ti.DType, Shape: ti.Shape, Data: append([]byte(nil), raw...)}
	}
	var out []safetensors.Tensor
	for _, name := range set.Names() {
		out = append(out, tensor(get(name), get)...)
	}
	out = append(out, extra...)
	var buf bytes.Buffer
	if err := safetensors.Write(&buf, out, nil); err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{"model.safetensors": buf.Bytes()}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries { // tokenizer and generation files as they are
		if name := e.Name(); name != "model.safetensors" {
			data, err := os.ReadFile(filepath.Join(dir, name))
			if err != nil {
				t.Fatal(err)
			}
			if name == "config.json" {
				data = config(data)
			}
			files[name] = data
		}
	}
	next := t.TempDir()
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(next, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return next
}

// same keeps a tensor (rewriteHF).
func same(ts safetensors.Tensor, _ func(string) safetensors.Tensor) []safetensors.Tensor {
	return []safetensors.Tensor{ts}
}

var perExpert = regexp.MustCompile(`^model\.layers\.(\d+)\.mlp\.experts\.(\d+)\.(gate|up|down)_proj\.weight$`)

// tf5Copy is the HF directory dir (per-expert tensors, rope_theta and
// rope_scaling) as transformers ≥ 5 writes it: each layer's experts fused
// into mlp.experts.gate_up_proj [E, 2·ff, hidden] (each expert's gate rows,
// then its up rows) and mlp.experts.down_proj [E, hidden, ff], and
// tf5Config's config.json.
func tf5Copy(t *testing.T, dir string) string {
	t.Helper()
	type stack struct {
		gate, up, down [][]byte
		ff, hidden     uint64
		dtype          safetensors.DType
	}
	layers := map[string]*stack{}
	var order []string
	dst := rewriteHF(t, dir, func(ts safetensors.Tensor, _ func(string) safetensors.Tensor) []safetensors.Tensor {
		m := perExpert.FindStringSubmatch(ts.Name)
		if m == nil {
			return []safetensors.Tensor{ts}
		}
		shape, data := ts.Shape, ts.Data
		s := layers[m[1]]
		if s == nil {
			s = &stack{}
			layers[m[1]] = s
			order = append(order, m[1])
		}
		var e int
		fmt.Sscan(m[2], &e)
		list := map[string]*[][]byte{"gate": &s.gate, "up": &s.up, "down": &s.down}[m[3]]
		for len(*list) <= e {
			*list = append(*list, nil)
		}
		(*list)[e] = data
		if m[3] == "gate" {
			s.ff, s.hidden, s.dtype = shape[0], shape[1], ts.DType
		}
		return nil
	}, func(raw []byte) []byte { return tf5Config(t, raw) })
	if len(order) == 0 {
		t.Fatalf("%s has no per-expert tensors", dir)
	}
	// rewriteHF wrote the non-expert tensors; add the fused ones to them.
	var fused []safetensors.Tensor
	for _, l := range order {
		s := layers[l]
		var gu, down []byte
		for e := range s.gate {
			gu = append(append(gu, s.gate[e]...), s.up[e]...)
			down = append(down, s.down[e]...)
		}
		E := uint64(len(s.gate))
		p := "model.layers." + l + ".mlp.experts."
		fused = append(fused,
			safetensors.Tensor{Name: p + "gate_up_proj", DType: s.dtype, Shape: []uint64{E, 2 * s.ff, s.hidden}, Data: gu},
			safetensors.Tensor{Name: p + "down_proj", DType: s.dtype, Shape: []uint64{E, s.hidden, s.ff}, Data: down})
	}
	return rewriteHF(t, dst, same, func(raw []byte) []byte { return raw }, fused...)
}

// TestTF5FusedExpertsEqualGGUF: a generated Qwen3-MoE and DeepSeek-V3
// written as transformers ≥ 5 saves them (fused gate_up_proj/down_proj
// experts, rope_parameters, dtype) load to the configuration of the
// per-expert checkpoint ExportHF writes and to the logits of their GGUF
// files, bit for bit (the same values in the same order).
func TestTF5FusedExpertsEqualGGUF(t *testing.T) {
	for _, arch := range []string{"qwen3moe", "deepseek3"} {
		t.Run(arch, func(t *testing.T) {
			// A rope base off the default (10000), so one lost on the way fails.
			path := rewrite(t, writeArchBPE(t, arch), func(kvs []gguf.KV, ts []gguf.TensorSpec) ([]gguf.KV, []gguf.TensorSpec) {
				return setKV(kvs, map[string]string{"qwen3moe": "qwen3moe", "deepseek3": "deepseek2"}[arch]+".rope.freq_base", gguf.NewFloat32(500000)), ts
			})
			g := load(t, path, 16)
			if g.m.Config.Rope.Theta != 500000 {
				t.Fatalf("rope base %v, want 500000", g.m.Config.Rope.Theta)
			}
			v4 := exportHF(t, path)
			dir := tf5Copy(t, v4)
			cfg, err := os.ReadFile(filepath.Join(dir, "config.json"))
			if err != nil {
				t.Fatal(err)
			}
			var keys map[string]any
			if err := json.Unmarshal(cfg, &keys); err != nil || keys["rope_parameters"] == nil || keys["rope_theta"] != nil {
				t.Fatalf("config.json is not in transformers 5's spelling: %s", cfg)
			}
			h4, h5 := load(t, v4, 16), load(t, dir, 16)
			if a, b := mustMarshal(t, h4.m.Config), mustMarshal(t, h5.m.Config); !bytes.Equal(a, b) {
				t.Fatalf("configs differ:\ntransformers 4 %s\ntransformers 5 %s", a, b)
			}
			closeLogits(t, "transformers-5 HF vs GGUF", logitsOf(t, h5, archPrompt), logitsOf(t, g, archPrompt), 0)
		})
	}
}

func mustMarshal(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestTF5ConfigsReadAsBefore: every published config kvhost serves, rewritten
// in transformers 5's spelling (rope_parameters, per layer type for Gemma 3;
// dtype), reads to the same configuration as the original.
func TestTF5ConfigsReadAsBefore(t *testing.T) {
	for _, name := range []string{"llama-3-8b", "mistral-7b-v0.1", "qwen3-8b", "gemma-2-9b-it", "gemma-3-12b-it",
		"gpt-oss-20b", "gpt-oss-120b", "deepseek-v2-lite", "deepseek-v3", "nemotron-h-8b"} {
		t.Run(name, func(t *testing.T) {
			raw := readConfig(t, name)
			want, err := ConfigFromHF(raw, name)
			if err != nil {
				t.Fatal(err)
			}
			v5 := tf5Config(t, raw)
			if bytes.Contains(v5, []byte(`"rope_theta":`)) && !bytes.Contains(v5, []byte(`"rope_parameters"`)) {
				t.Fatalf("tf5Config left rope_theta: %s", v5)
			}
			got, err := ConfigFromHF(v5, name)
			if err != nil {
				t.Fatal(err)
			}
			wj, _ := json.Marshal(want)
			gj, _ := json.Marshal(got)
			if !bytes.Equal(wj, gj) {
				t.Fatalf("configs differ:\nv4 %s\nv5 %s", wj, gj)
			}
		})
	}
}

// TestGemma3ConditionalGenerationConfig: the published gemma-3-12b-it
// config (text_config with only the sizes, rope_scaling and the window)
// reads to Gemma 3 12B's text model with Gemma3TextConfig's defaults.
func TestGemma3ConditionalGenerationConfig(t *testing.T) {
	c, err := ConfigFromHF(readConfig(t, "gemma-3-12b-it"), "gemma-3-12b-it")
	if err != nil {
		t.Fatal(err)
	}
	s := SWAOf(c)
	if c.Arch != "gemma3" || c.Hidden != 3840 || c.Layers != 48 || c.Heads != 16 || c.KVHeads != 8 || c.HeadDim != 256 ||
		c.Intermediate != 15360 || c.Vocab != 262208 || c.ContextLen != 131072 || !c.Tied || !c.QKNorm {
		t.Fatalf("gemma-3-12b-it: %+v", c)
	}
	if r := c.Rope; r.Theta != 1e6 || r.Scaling != "linear" || r.Factor != 8 {
		t.Fatalf("global rope %+v, want theta 1e6, linear × 8", r)
	}
	if s == nil || s.Window != 1024 || s.LocalRope == nil || s.LocalRope.Theta != 1e4 || s.LocalRope.Scaling != "" || s.AttnScale != 1.0/16 || !s.Gemma {
		t.Fatalf("gemma-3-12b-it: %+v", s)
	}
	for i := range c.Layers {
		if want := (i+1)%6 != 0; s.Sliding[i] != want {
			t.Fatalf("layer %d slides %v, want %v (5 local : 1 global)", i, s.Sliding[i], want)
		}
	}
	if n := c.Params(); n < 11.5e9 || n > 12.5e9 {
		t.Fatalf("text model has %d parameters, want about 11.8e9", n)
	}
}

// gemma3Wrapped is the Gemma3ForCausalLM directory dir as the multimodal
// checkpoint holds it: tensors under prefix ("language_model.model." as
// published, "model.language_model." as transformers ≥ 4.52 saves), a
// vision tower and projector beside them, config.json nesting the text
// config under text_config (in transformers 5's spelling when tf5).
func gemma3Wrapped(t *testing.T, dir, prefix string, tf5 bool) string {
	t.Helper()
	top := "" // the vision parts sit beside the language model
	if prefix == "model.language_model." {
		top = "model."
	}
	vision := []safetensors.Tensor{
		{Name: top + "vision_tower.vision_model.embeddings.patch_embedding.weight", DType: safetensors.F32, Shape: []uint64{4, 3}, Data: make([]byte, 48)},
		{Name: top + "multi_modal_projector.mm_input_projection_weight", DType: safetensors.F32, Shape: []uint64{4, 8}, Data: make([]byte, 128)},
	}
	return rewriteHF(t, dir, func(ts safetensors.Tensor, _ func(string) safetensors.Tensor) []safetensors.Tensor {
		if rest, ok := strings.CutPrefix(ts.Name, "model."); ok {
			ts.Name = prefix + rest
		}
		return []safetensors.Tensor{ts}
	}, func(raw []byte) []byte {
		var text map[string]any
		if err := json.Unmarshal(raw, &text); err != nil {
			t.Fatal(err)
		}
		delete(text, "architectures")
		text["model_type"] = "gemma3_text"
		w := map[string]any{"architectures": []string{"Gemma3ForConditionalGeneration"}, "model_type": "gemma3",
			"eos_token_id": []int{1, 106}, "torch_dtype": "float32", "mm_tokens_per_image": 256, "text_config": text,
			"vision_config": map[string]any{"hidden_size": 8, "model_type": "siglip_vision_model", "num_hidden_layers": 1}}
		out, err := json.Marshal(w)
		if err != nil {
			t.Fatal(err)
		}
		if tf5 {
			out = tf5Config(t, out)
		}
		return out
	}, vision...)
}

// TestGemma3ConditionalGenerationServesText: a generated Gemma 3 written as
// the multimodal checkpoint — both tensor layouts, the text config nested,
// in transformers 4's and 5's spellings (rope per layer type) — loads its
// language model with the GGUF's configuration and logits, ignores the
// vision tower and says so. The local rope base is moved off its default
// (10000) so a per-layer-type rope that lost sliding_attention's base fails.
func TestGemma3ConditionalGenerationServesText(t *testing.T) {
	path := rewrite(t, writeBPE(t, "gemma3", "tiny"), func(kvs []gguf.KV, ts []gguf.TensorSpec) ([]gguf.KV, []gguf.TensorSpec) {
		return setKV(kvs, "gemma3.rope.freq_base_swa", gguf.NewFloat32(20000)), ts
	})
	g := loadSWA(t, path, "Gemma3ForCausalLM", 32)
	if s := SWAOf(g.m.Config); s.LocalRope.Theta != 20000 {
		t.Fatalf("local rope base %v, want 20000", s.LocalRope.Theta)
	}
	causal := exportHF(t, path)
	prompt := make([]int32, 40)
	for i := range prompt {
		prompt[i] = int32(3 + i*37%250)
	}
	gs := &swaSeq{r: g}
	defer gs.release()
	want := gs.forward(t, prompt, 0, len(prompt))
	for _, tc := range []struct {
		prefix string
		tf5    bool
	}{{"language_model.model.", false}, {"model.language_model.", true}, {"language_model.model.", true}} {
		t.Run(fmt.Sprintf("%s tf5=%v", tc.prefix, tc.tf5), func(t *testing.T) {
			h := loadSWA(t, gemma3Wrapped(t, causal, tc.prefix, tc.tf5), "Gemma3ForCausalLM", 32)
			gc, hc := g.m.Config, h.m.Config
			gj, _ := json.Marshal(gc)
			hj, _ := json.Marshal(hc)
			if !bytes.Equal(gj, hj) {
				t.Fatalf("configs differ:\ngguf %s\nhf   %s", gj, hj)
			}
			if len(h.m.Notes) != 1 || !strings.Contains(h.m.Notes[0], "Gemma3ForConditionalGeneration: serving its language model only; the vision tower") {
				t.Fatalf("startup notes %q", h.m.Notes)
			}
			for _, ts := range h.m.Tensors() {
				if strings.Contains(ts.Name, "vision") || strings.Contains(ts.Name, "projector") {
					t.Fatalf("loaded %s", ts.Name)
				}
			}
			hs := &swaSeq{r: h}
			defer hs.release()
			got := hs.forward(t, prompt, 0, len(prompt))
			closeLogits(t, "Gemma3ForConditionalGeneration vs GGUF", got, want, 1e-6)
		})
	}
	if g.m.Notes != nil {
		t.Fatalf("a GGUF model has startup notes %q", g.m.Notes)
	}
}

// ossDenseCopy is the gpt-oss HF directory dir (MXFP4 *_blocks/*_scales
// experts) as a dequantized checkpoint holds it, in dtype: gate_up_proj
// [E, hidden, 2·ff] (gate even, up odd columns) and down_proj [E, ff,
// hidden], each expert's nn.Linear matrix transposed.
func ossDenseCopy(t *testing.T, dir string, dtype safetensors.DType) string {
	t.Helper()
	return rewriteHF(t, dir, func(ts safetensors.Tensor, get func(string) safetensors.Tensor) []safetensors.Tensor {
		base, ok := strings.CutSuffix(ts.Name, "_blocks")
		if !ok {
			if strings.HasSuffix(ts.Name, "_scales") {
				return nil
			}
			return []safetensors.Tensor{ts}
		}
		sc := get(base + "_scales")
		E, R, G := int(ts.Shape[0]), int(ts.Shape[1]), int(ts.Shape[2])
		in := 32 * G
		vals := make([]float32, in)
		dense := make([]float32, E*R*in) // [E, in, R]: transposed
		for e := range E {
			for r := range R {
				row := e*R + r
				if err := kcpu.DequantizeMXFP4HF(vals, ts.Data[row*G*16:(row+1)*G*16], sc.Data[row*G:(row+1)*G]); err != nil {
					t.Fatal(err)
				}
				for i, v := range vals {
					dense[(e*in+i)*R+r] = v
				}
			}
		}
		var data []byte
		for _, v := range dense {
			if dtype == safetensors.BF16 {
				data = binary.LittleEndian.AppendUint16(data, kcpu.F32ToBF16(v))
			} else {
				data = binary.LittleEndian.AppendUint32(data, math.Float32bits(v))
			}
		}
		return []safetensors.Tensor{{Name: base, DType: dtype, Shape: []uint64{uint64(E), uint64(in), uint64(R)}, Data: data}}
	}, func(raw []byte) []byte { return raw })
}

// TestOSSDenseExpertsEqualMXFP4: gpt-oss from a dequantized checkpoint
// (transposed, interleaved gate_up_proj; f32 and bf16, both exact for MXFP4
// values) loads the expert matrices of the MXFP4 checkpoint it came from,
// element for element, and gives its logits within what the MXFP4 dot's
// Q8 activation blocks change: the MXFP4 experts quantize their input rows
// to Q8_0 (as ggml does), the dense ones do not, so the logits are not
// bit-equal — the weights are (TestSWAMatchesFloat64Reference bounds the
// Q8 rounding against a float64 reference).
func TestOSSDenseExpertsEqualMXFP4(t *testing.T) {
	path := writeBPE(t, "gpt-oss", "tiny")
	g := loadSWA(t, path, "GptOssForCausalLM", 32)
	mx := exportHF(t, path)
	prompt := make([]int32, 24)
	for i := range prompt {
		prompt[i] = int32(3 + i*37%250)
	}
	gs := &swaSeq{r: g}
	defer gs.release()
	want := gs.forward(t, prompt, 0, len(prompt))
	for _, dt := range []safetensors.DType{safetensors.F32, safetensors.BF16} {
		t.Run(string(dt), func(t *testing.T) {
			h := loadSWA(t, ossDenseCopy(t, mx, dt), "GptOssForCausalLM", 32)
			for l := range g.m.layers {
				gm, hm := g.m.layers[l].FFN.(*moePart), h.m.layers[l].FFN.(*moePart)
				for i, pair := range [][2]device.Weight{{gm.gate, hm.gate}, {gm.up, hm.up}, {gm.down, hm.down}} {
					if pair[0].Type != device.MXFP4 || pair[1].Type == device.MXFP4 {
						t.Fatalf("layer %d matrix %d: types %s and %s, want mxfp4 and dense", l, i, pair[0].Type, pair[1].Type)
					}
					a, b := weightRows(t, g, pair[0]), weightRows(t, h, pair[1])
					for k := range a {
						if a[k] != b[k] {
							t.Fatalf("layer %d matrix %d element %d: dense %g, MXFP4 decodes to %g", l, i, k, b[k], a[k])
						}
					}
				}
			}
			hs := &swaSeq{r: h}
			defer hs.release()
			closeLogits(t, "dequantized gpt-oss vs GGUF MXFP4", hs.forward(t, prompt, 0, len(prompt)), want, 5e-2)
		})
	}
}

// weightRows decodes every row of w, resident on r's CPU device, to float32.
func weightRows(t *testing.T, r *rig, w device.Weight) []float32 {
	t.Helper()
	raw, err := r.dev.Bytes(w.Ptr, w.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	m := kcpu.Matrix{Type: kcpu.DType(w.Type), Rows: w.Rows, Cols: w.Cols, Data: raw}
	out := make([]float32, w.Rows*w.Cols)
	for row := range w.Rows {
		kcpu.Dequantize(out[row*w.Cols:(row+1)*w.Cols], m, row)
	}
	return out
}

// TestFusedExpertsRefused: a fused expert tensor of the wrong shape is
// refused naming the tensor, its shape and the one wanted.
func TestFusedExpertsRefused(t *testing.T) {
	dir := tf5Copy(t, exportHF(t, writeArchBPE(t, "qwen3moe")))
	for _, tc := range []struct {
		name  string
		shape func([]uint64) []uint64
		want  string
	}{
		{"model.layers.0.mlp.experts.gate_up_proj", func(s []uint64) []uint64 { return []uint64{s[0] * s[1], s[2]} },
			"tensor model.layers.0.mlp.experts.gate_up_proj has shape [64 512] (row length first); want [experts, 2·ff, hidden]"},
		{"model.layers.1.mlp.experts.down_proj", func(s []uint64) []uint64 { return []uint64{s[0] * s[1], s[2]} },
			"tensor model.layers.1.mlp.experts.down_proj has 2 dimensions, want [experts, hidden, ff]"},
	} {
		bad := rewriteHF(t, dir, func(ts safetensors.Tensor, _ func(string) safetensors.Tensor) []safetensors.Tensor {
			if ts.Name == tc.name {
				ts.Shape = tc.shape(ts.Shape)
			}
			return []safetensors.Tensor{ts}
		}, func(raw []byte) []byte { return raw })
		dev, err := cpu.New(device.Options{MemoryBytes: 1 << 30, Threads: 1})
		if err != nil {
			t.Fatal(err)
		}
		defer dev.Close()
		_, err = LoadHF(bad, Options{Device: dev, Weights: alloc.NewDirect("weights", dev), Activations: alloc.New("caching", dev)})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want %q", tc.name, err, tc.want)
		}
	}
}
