package model

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvhost/kvhost/host/model/gguf"
	"github.com/kvhost/kvhost/host/model/safetensors"
)

// ggufToHF writes the Hugging Face checkpoint a generated sliding-window
// GGUF was converted from, undoing llama.cpp's converter
// (docs/architectures/*.md): HF names, Llama/Mistral q/k rows un-permuted,
// Gemma norms less the baked 1, gpt-oss's gate and up re-interleaved into
// gate_up_proj with MXFP4 in HF's *_blocks/*_scales layout. The tokenizer is
// a small byte-level one (the logits do not depend on it).
func ggufToHF(t *testing.T, path, hfArch string, c Config) string {
	t.Helper()
	f, err := gguf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	s := SWAOf(c)
	var tensors []safetensors.Tensor
	f32 := func(name string, shape []uint64, v []float32) {
		data := make([]byte, 4*len(v))
		for i, x := range v {
			binary.LittleEndian.PutUint32(data[4*i:], math.Float32bits(x))
		}
		tensors = append(tensors, safetensors.Tensor{Name: name, DType: safetensors.F32, Shape: shape, Data: data})
	}
	read := func(name string) (gguf.TensorInfo, []byte) {
		ti, raw, err := f.Tensor(name)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return ti, raw
	}
	floats := func(raw []byte) []float32 {
		v := make([]float32, len(raw)/4)
		for i := range v {
			v[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
		}
		return v
	}
	gate := map[string][]byte{}
	for _, ti := range f.Tensors {
		_, raw := read(ti.Name)
		shape := make([]uint64, len(ti.Dims))
		for i, d := range ti.Dims {
			shape[len(shape)-1-i] = d
		}
		name := hfName(ti.Name)
		switch {
		case s.Gemma:
			name = gemmaHFName(ti.Name)
		case s.MoE != nil:
			name = ossHFName(ti.Name)
		}
		_, part, _ := strings.Cut(strings.TrimPrefix(ti.Name, "blk."), ".")
		switch {
		case ti.Type == gguf.TypeMXFP4 && part == "ffn_gate_exps.weight":
			gate[ti.Name] = raw
			continue
		case ti.Type == gguf.TypeMXFP4 && part == "ffn_up_exps.weight":
			g := gate[strings.Replace(ti.Name, "ffn_up", "ffn_gate", 1)]
			blocks, scales := hfMXFP4(interleave(g, raw, int(ti.Dims[1]), int(ti.Dims[2]), int(ti.Dims[0])/32*17))
			E, R, G := ti.Dims[2], 2*ti.Dims[1], ti.Dims[0]/32
			base := strings.TrimSuffix(name, "_blocks")
			tensors = append(tensors,
				safetensors.Tensor{Name: base + "_blocks", DType: safetensors.U8, Shape: []uint64{E, R, G, 16}, Data: blocks},
				safetensors.Tensor{Name: base + "_scales", DType: safetensors.U8, Shape: []uint64{E, R, G}, Data: scales})
			continue
		case ti.Type == gguf.TypeMXFP4:
			blocks, scales := hfMXFP4(raw)
			E, R, G := ti.Dims[2], ti.Dims[1], ti.Dims[0]/32
			tensors = append(tensors,
				safetensors.Tensor{Name: name + "_blocks", DType: safetensors.U8, Shape: []uint64{E, R, G, 16}, Data: blocks},
				safetensors.Tensor{Name: name + "_scales", DType: safetensors.U8, Shape: []uint64{E, R, G}, Data: scales})
			continue
		case part == "ffn_gate_exps.bias":
			gate[ti.Name] = raw
			continue
		case part == "ffn_up_exps.bias":
			g := floats(gate[strings.Replace(ti.Name, "ffn_up", "ffn_gate", 1)])
			u := floats(raw)
			n, E := int(ti.Dims[0]), int(ti.Dims[1])
			v := make([]float32, 0, 2*n*E)
			for e := 0; e < E; e++ {
				for i := 0; i < n; i++ {
					v = append(v, g[e*n+i], u[e*n+i])
				}
			}
			f32(name, []uint64{uint64(E), uint64(2 * n)}, v)
			continue
		}
		if !c.Rope.Neox && (part == "attn_q.weight" || part == "attn_k.weight") {
			raw = unpermute(raw, int(ti.Dims[1])/c.HeadDim, c.HeadDim, int(ti.Dims[0])) // load_test.go
		}
		v := floats(raw)
		if s.Gemma && strings.HasSuffix(ti.Name, "norm.weight") {
			for i := range v {
				v[i]--
			}
		}
		f32(name, shape, v)
	}
	var buf bytes.Buffer
	if err := safetensors.Write(&buf, tensors, nil); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for name, data := range map[string][]byte{"model.safetensors": buf.Bytes(), "config.json": hfSWAConfig(t, c, hfArch), "tokenizer.json": byteLevelTokenizerJSON()} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// ossHFName is the gpt-oss checkpoint name of a canonical tensor (the
// expert stacks without their _blocks/_scales suffix).
func ossHFName(canon string) string {
	rest, ok := strings.CutPrefix(canon, "blk.")
	if !ok {
		return hfName(canon)
	}
	layer, part, _ := strings.Cut(rest, ".")
	if n, ok := map[string]string{
		"post_attention_norm.weight": "post_attention_layernorm.weight", "attn_sinks.weight": "self_attn.sinks",
		"attn_output.bias": "self_attn.o_proj.bias", "ffn_gate_inp.weight": "mlp.router.weight", "ffn_gate_inp.bias": "mlp.router.bias",
		"ffn_up_exps.weight": "mlp.experts.gate_up_proj", "ffn_down_exps.weight": "mlp.experts.down_proj",
		"ffn_up_exps.bias": "mlp.experts.gate_up_proj_bias", "ffn_down_exps.bias": "mlp.experts.down_proj_bias",
	}[part]; ok {
		return "model.layers." + layer + "." + n
	}
	return hfName(canon)
}

// interleave merges two stacks of E × rows rows of rowBytes into rows
// gate0, up0, gate1, up1, … per expert.
func interleave(g, u []byte, rows, E, rowBytes int) []byte {
	out := make([]byte, 0, len(g)+len(u))
	for e := 0; e < E; e++ {
		for r := 0; r < rows; r++ {
			o := (e*rows + r) * rowBytes
			out = append(out, g[o:o+rowBytes]...)
			out = append(out, u[o:o+rowBytes]...)
		}
	}
	return out
}

// hfMXFP4 splits GGML MXFP4 blocks (scale, then qs[j] = elem j | elem
// j+16 << 4) into HF's nibble pairs (byte j = elem 2j | elem 2j+1 << 4) and
// scales.
func hfMXFP4(raw []byte) (blocks, scales []byte) {
	n := len(raw) / 17
	blocks, scales = make([]byte, 16*n), make([]byte, n)
	for b := 0; b < n; b++ {
		blk := raw[17*b : 17*b+17]
		scales[b] = blk[0]
		nib := func(k int) byte {
			if k < 16 {
				return blk[1+k] & 15
			}
			return blk[1+k-16] >> 4
		}
		for j := 0; j < 16; j++ {
			blocks[16*b+j] = nib(2*j) | nib(2*j+1)<<4
		}
	}
	return blocks, scales
}

// hfSWAConfig is config.json for c as the model's publisher writes it.
func hfSWAConfig(t *testing.T, c Config, hfArch string) []byte {
	s := SWAOf(c)
	types := make([]string, c.Layers)
	for i := range types {
		types[i] = map[bool]string{true: "sliding_attention", false: "full_attention"}[s.Sliding[i]]
	}
	m := map[string]any{"architectures": []string{hfArch}, "hidden_size": c.Hidden, "num_hidden_layers": c.Layers,
		"num_attention_heads": c.Heads, "num_key_value_heads": c.KVHeads, "head_dim": c.HeadDim,
		"intermediate_size": c.Intermediate, "vocab_size": c.Vocab, "rms_norm_eps": c.RMSEps, "rope_theta": c.Rope.Theta,
		"max_position_embeddings": c.ContextLen, "tie_word_embeddings": c.Tied, "sliding_window": s.Window}
	switch hfArch {
	case "Gemma2ForCausalLM", "Gemma3ForCausalLM":
		m["query_pre_attn_scalar"] = c.HeadDim
		m["hidden_activation"] = "gelu_pytorch_tanh"
		if s.AttnSoftCap > 0 {
			m["attn_logit_softcapping"], m["final_logit_softcapping"] = s.AttnSoftCap, s.FinalSoftCap
		}
		if s.LocalRope != nil {
			m["rope_local_base_freq"] = s.LocalRope.Theta
			m["sliding_window_pattern"] = 6
		}
	case "GptOssForCausalLM":
		m["layer_types"] = types
		m["num_local_experts"], m["num_experts_per_tok"] = s.MoE.Experts, s.MoE.TopK
		m["swiglu_limit"], m["attention_bias"] = s.MoE.Limit, true
		// truncate: true is llama.cpp's ramp, which the GGUF copy keeps (the
		// published config says false: an HF directory follows its config).
		m["rope_scaling"] = map[string]any{"rope_type": "yarn", "factor": c.Rope.Factor, "beta_fast": 32, "beta_slow": 1,
			"original_max_position_embeddings": c.Rope.OriginalMaxPos, "truncate": true}
	}
	raw, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// TestSWAGGUFAndHFAgree: the GGUF file and the Hugging Face checkpoint it
// was converted from load to the same configuration and give the same
// logits over a prefill past the window and decode steps: bit for bit
// where the files hold the same values in the same layout (Gemma, gpt-oss:
// measured 0), within 1e-5 relative for Mistral, whose GGUF rotates
// permuted q/k rows in adjacent pairs where HF rotates halves (same values,
// another summation order; measured 1.3e-6).
func TestSWAGGUFAndHFAgree(t *testing.T) {
	for _, a := range swaArchs {
		t.Run(a.arch, func(t *testing.T) {
			path := writeSWA(t, a.arch, "tiny")
			g := loadSWA(t, path, a.hf, 32)
			dir := ggufToHF(t, path, a.hf, g.m.Config)
			h := loadSWA(t, dir, a.hf, 32)
			gc, hc := g.m.Config, h.m.Config
			// GGUF names Mistral "llama" and stores its q/k permuted for
			// adjacent-pair rotation; HF rotates halves of unpermuted rows.
			gc.Arch, hc.Arch, gc.Rope.Neox = "", "", hc.Rope.Neox
			gj, _ := json.Marshal(gc)
			hj, _ := json.Marshal(hc)
			if !bytes.Equal(gj, hj) {
				t.Fatalf("configs differ:\ngguf %s\nhf   %s", gj, hj)
			}
			prompt := make([]int32, 30)
			for i := range prompt {
				prompt[i] = int32(3 + i*37%250)
			}
			gs, hs := &swaSeq{r: g}, &swaSeq{r: h}
			defer gs.release()
			defer hs.release()
			V := gc.Vocab
			worst := 0.0
			gl, hl := gs.forward(t, prompt, 0, len(prompt)), hs.forward(t, prompt, 0, len(prompt))
			for pos := len(prompt); ; pos++ {
				for r := 0; r < len(gl)/V; r++ {
					want := make([]float64, V)
					for i, v := range gl[r*V : (r+1)*V] {
						want[i] = float64(v)
					}
					worst = math.Max(worst, relDiff(hl[r*V:(r+1)*V], want))
				}
				if pos == len(prompt)+20 {
					break
				}
				next := int32(argmax32(gl[len(gl)-V:]))
				gl, hl = gs.forward(t, []int32{next}, pos, 1), hs.forward(t, []int32{next}, pos, 1)
			}
			if worst > 1e-5 {
				t.Fatalf("HF logits differ from GGUF's by %g relative", worst)
			}
			t.Logf("%s: HF and GGUF logits differ by at most %.2g relative", a.arch, worst)
		})
	}
}
