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

// hybridHFCopy writes a generated hybrid GGUF model as the Hugging Face
// checkpoint llama.cpp's converter would have read: HF names, A_log where
// GGUF keeps A = −exp(A_log), conv1d.weight [conv_dim, 1, K], the gated
// norm's weight as one [inner] vector, Granite's shared MLP gate and up
// fused into input_linear [2·ff, hidden] and its experts into
// block_sparse_moe (input_linear [E, 2·ff, hidden], output_linear
// [E, hidden, ff], router.layer).
func hybridHFCopy(t *testing.T, path string, c Config) string {
	t.Helper()
	f, err := gguf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	f32 := func(raw []byte) []float32 {
		v := make([]float32, len(raw)/4)
		for i := range v {
			v[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
		}
		return v
	}
	var tensors []safetensors.Tensor
	gates := map[string][]byte{}
	for _, ti := range f.Tensors {
		_, raw, err := f.Tensor(ti.Name)
		if err != nil {
			t.Fatal(err)
		}
		data := append([]byte(nil), raw...)
		layer, part, _ := strings.Cut(strings.TrimPrefix(ti.Name, "blk."), ".")
		shape := []uint64{ti.Dims[0]}
		if len(ti.Dims) == 2 {
			shape = []uint64{ti.Dims[1], ti.Dims[0]}
		}
		switch {
		case strings.HasSuffix(ti.Name, ".ssm_a"):
			v := f32(raw)
			for i := range v {
				binary.LittleEndian.PutUint32(data[4*i:], math.Float32bits(float32(math.Log(-float64(v[i])))))
			}
			shape = []uint64{uint64(len(v))}
		case strings.HasSuffix(ti.Name, ".ssm_d"), strings.HasSuffix(ti.Name, ".ssm_norm.weight"):
			shape = []uint64{uint64(len(raw) / 4)}
		case strings.HasSuffix(ti.Name, ".ssm_conv1d.weight"):
			shape = []uint64{ti.Dims[1], 1, ti.Dims[0]}
		case c.Arch == "granitehybrid" && (part == "ffn_gate.weight" || part == "ffn_gate_shexp.weight" || part == "ffn_gate_exps.weight"):
			gates[layer] = data
			continue
		case c.Arch == "granitehybrid" && (part == "ffn_up.weight" || part == "ffn_up_shexp.weight"):
			tensors = append(tensors, safetensors.Tensor{Name: hybridHFName(c.Arch, "blk."+layer+".ffn_gate_up.weight"), DType: safetensors.F32,
				Shape: []uint64{2 * ti.Dims[1], ti.Dims[0]}, Data: append(gates[layer], data...)})
			continue
		case part == "ffn_up_exps.weight":
			// block_sparse_moe.input_linear [E, 2·ff, hidden]: each expert's
			// gate rows, then its up rows (transformers' chunk(2)).
			hidden, ff, E := ti.Dims[0], ti.Dims[1], ti.Dims[2]
			n := int(hidden * ff * 4)
			var fused []byte
			for e := range int(E) {
				fused = append(append(fused, gates[layer][e*n:(e+1)*n]...), data[e*n:(e+1)*n]...)
			}
			tensors = append(tensors, safetensors.Tensor{Name: "model.layers." + layer + ".block_sparse_moe.input_linear.weight", DType: safetensors.F32,
				Shape: []uint64{E, 2 * ff, hidden}, Data: fused})
			continue
		case part == "ffn_down_exps.weight":
			tensors = append(tensors, safetensors.Tensor{Name: "model.layers." + layer + ".block_sparse_moe.output_linear.weight", DType: safetensors.F32,
				Shape: []uint64{ti.Dims[2], ti.Dims[1], ti.Dims[0]}, Data: data})
			continue
		}
		tensors = append(tensors, safetensors.Tensor{Name: hybridHFName(c.Arch, ti.Name), DType: safetensors.F32, Shape: shape, Data: data})
	}
	dir := t.TempDir()
	var buf bytes.Buffer
	if err := safetensors.Write(&buf, tensors, nil); err != nil {
		t.Fatal(err)
	}
	js, err := json.Marshal(c.HybridHF())
	if err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string][]byte{"model.safetensors": buf.Bytes(), "config.json": js, "tokenizer.json": byteLevelTokenizerJSON()} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestHybridHFMatchesGGUF: both hybrids loaded from a Hugging Face
// directory (safetensors, config.json) give the logits their GGUF files
// give, at every position of a prefill and the decode steps after it.
func TestHybridHFMatchesGGUF(t *testing.T) {
	for _, arch := range hybridArchs {
		t.Run(arch, func(t *testing.T) {
			path := writeHybrid(t, arch, "tiny")
			g := hybridRig(t, path)
			h := hybridRig(t, hybridHFCopy(t, path, g.m.Config))
			toks := make([]int32, 30)
			for i := range toks {
				toks[i] = int32(1 + (i*37)%250)
			}
			gs, hs := newHybridSeq(t, hybridPools(t, g, 2, 8, true)), newHybridSeq(t, hybridPools(t, h, 2, 8, true))
			a, b := gs.run(t, g.m, toks, len(toks)), hs.run(t, h.m, toks, len(toks))
			for i := range 5 {
				a = append(a, gs.run(t, g.m, toks[i:i+1], 1)...)
				b = append(b, hs.run(t, h.m, toks[i:i+1], 1)...)
			}
			if d := maxAbsDiff(a, b); d > 1e-4 {
				t.Fatalf("HF and GGUF logits differ by %g", d)
			}
		})
	}
}
