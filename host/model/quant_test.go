package model

import (
	"bytes"
	"encoding/binary"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/kvhost/kvhost/host/alloc"
	"github.com/kvhost/kvhost/host/device"
	"github.com/kvhost/kvhost/host/device/cpu"
	"github.com/kvhost/kvhost/host/model/gguf"
	"github.com/kvhost/kvhost/host/model/synth"
	"github.com/kvhost/kvhost/internal/testmodels"
	kcpu "github.com/kvhost/kvhost/kernels/cpu"
)

// quantTypes are the GGUF types the kernels run block-quantized.
var quantTypes = []gguf.TensorType{
	gguf.TypeQ4_K, gguf.TypeQ5_K, gguf.TypeQ6_K, gguf.TypeQ4_0, gguf.TypeQ4_1, gguf.TypeQ5_0,
	gguf.TypeQ5_1, gguf.TypeQ8_0, gguf.TypeQ2_K, gguf.TypeQ3_K, gguf.TypeIQ4_NL, gguf.TypeIQ4_XS,
}

// randomQuantBlocks is n blocks of t quantized (as llama.cpp does) from
// N(0, σ²) draws.
func randomQuantBlocks(r *rand.Rand, t gguf.TensorType, n int, sigma float64) []byte {
	vals := make([]float32, n*int(t.BlockSize()))
	for i := range vals {
		vals[i] = float32(r.NormFloat64() * sigma)
	}
	raw := make([]byte, n*int(t.TypeSize()))
	if err := gguf.Quantize(t, raw, vals); err != nil {
		panic(err)
	}
	return raw
}

// TestLoadQuantizedGGUF: a model whose matrices (the embedding included) use
// every quantized format, one per tensor in turn, loads without expansion —
// device weight bytes are the file's, and on the CPU device every matrix is
// served from the file in place — and computes within 3 % of the logits'
// spread of its F16 twin (the same dequantized weights stored as F16). The
// difference comes from the 8-bit activation rows the quantized kernels dot
// with (each value off by up to half a step of its block's max/127) and the
// twin's F16 rounding (2^-11); 1.2 % measured.
func TestLoadQuantizedGGUF(t *testing.T) {
	spec := synth.Spec{Name: "quant", Hidden: 256, Layers: 2, Heads: 4, KVHeads: 2, Intermediate: 512, Vocab: 32000, ContextLen: 256, DType: "f32", Seed: 3}
	var buf bytes.Buffer
	if err := synth.Write(&buf, spec, nil); err != nil {
		t.Fatal(err)
	}
	src := filepath.Join(t.TempDir(), "f32.gguf")
	if err := os.WriteFile(src, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	var quantized int
	var matrixBytes, vectorBytes int64
	used := map[gguf.TensorType]bool{}
	qpath := rewrite(t, src, func(kvs []gguf.KV, ts []gguf.TensorSpec) ([]gguf.KV, []gguf.TensorSpec) {
		for i := range ts {
			if len(ts[i].Dims) != 2 {
				vectorBytes += int64(4 * ts[i].Dims[0])
				continue
			}
			typ := quantTypes[quantized%len(quantTypes)]
			quantized++
			vals := make([]float32, len(ts[i].Data)/4)
			for j := range vals {
				vals[j] = math.Float32frombits(binary.LittleEndian.Uint32(ts[i].Data[4*j:]))
			}
			data := make([]byte, len(vals)/int(typ.BlockSize())*int(typ.TypeSize()))
			if err := gguf.Quantize(typ, data, vals); err != nil {
				t.Fatal(err)
			}
			ts[i].Type, ts[i].Data = typ, data
			matrixBytes += int64(len(data))
			used[typ] = true
		}
		return kvs, ts
	})
	if len(used) != len(quantTypes) {
		t.Fatalf("only %d of %d formats used", len(used), len(quantTypes))
	}
	fpath := rewrite(t, qpath, func(kvs []gguf.KV, ts []gguf.TensorSpec) ([]gguf.KV, []gguf.TensorSpec) {
		for i := range ts {
			if !ts[i].Type.Dequantizable() {
				continue
			}
			vals := make([]float32, ts[i].Dims[0]*ts[i].Dims[1])
			if err := gguf.Dequantize(ts[i].Type, ts[i].Data, vals); err != nil {
				t.Fatal(err)
			}
			data := make([]byte, 2*len(vals))
			kcpu.F32ToF16Bytes(data, vals)
			ts[i].Type, ts[i].Data = gguf.TypeF16, data
		}
		return kvs, ts
	})
	q, f := load(t, qpath, 16), load(t, fpath, 16)
	if got := q.m.WeightBytes(); got != matrixBytes+vectorBytes {
		t.Fatalf("quantized model holds %d weight bytes; the file's matrices are %d and its vectors %d as f32", got, matrixBytes, vectorBytes)
	}
	if q.m.MappedBytes != matrixBytes {
		t.Fatalf("%d bytes served from the file in place, want every matrix's %d", q.m.MappedBytes, matrixBytes)
	}
	tokens := []int32{1, 900, 31000, 17, 4242, 77, 5}
	var qp, fp []int32
	a, b := q.run(t, &qp, tokens, 0, len(tokens)), f.run(t, &fp, tokens, 0, len(tokens))
	V := q.m.Config.Vocab
	var worst float64
	for row := range tokens {
		ra, rb := a[row*V:(row+1)*V], b[row*V:(row+1)*V]
		lo, hi := math.Inf(1), math.Inf(-1)
		var diff float64
		for i := range ra {
			lo, hi = math.Min(lo, float64(rb[i])), math.Max(hi, float64(rb[i]))
			diff = math.Max(diff, math.Abs(float64(ra[i]-rb[i])))
		}
		if !(hi > lo) || math.IsInf(hi-lo, 0) {
			t.Fatalf("position %d: degenerate logits (spread %v)", row, hi-lo)
		}
		worst = math.Max(worst, diff/(hi-lo))
		if diff > 0.03*(hi-lo) || diff == 0 {
			t.Fatalf("position %d: quantized logits differ from the F16 twin's by %g (spread %g)", row, diff, hi-lo)
		}
	}
	t.Logf("largest difference: %.2f %% of the logit spread", 100*worst)
	// Plan counts file bytes.
	g, err := gguf.Open(qpath)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	var planned int64
	for _, ti := range g.Tensors {
		if len(ti.Dims) == 2 {
			planned += GGUFDeviceBytes(ti)
		}
	}
	if planned != matrixBytes {
		t.Fatalf("GGUFDeviceBytes sums the matrices to %d, want the file's %d", planned, matrixBytes)
	}
}

// TestLoadProgressReachesTotal: the progress callback ends at its total for a
// file with expanded tensors and a rope table that is not uploaded.
func TestLoadProgressReachesTotal(t *testing.T) {
	src := withRopeFreqs(t, writeTiny(t, "f32"), gguf.TypeF32, f32Bytes(1, 1, 1, 2, 2, 4, 8, 8))
	path := rewrite(t, src, func(kvs []gguf.KV, ts []gguf.TensorSpec) ([]gguf.KV, []gguf.TensorSpec) {
		for i := range ts {
			if ts[i].Name == "blk.1.ffn_up.weight" {
				n := ts[i].Dims[0] * ts[i].Dims[1]
				ts[i].Type, ts[i].Data = gguf.TypeQ4_0, randomQuantBlocks(rand.New(rand.NewPCG(1, 2)), gguf.TypeQ4_0, int(n/32), 0.05)
			}
		}
		return kvs, ts
	})
	dev, err := cpu.New(device.Options{MemoryBytes: 1 << 30, Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	var done, total int64
	m, err := Load(path, Options{Device: dev, Weights: alloc.NewDirect("weights", dev), Activations: alloc.New("caching", dev),
		Progress: func(d, all int64) { done, total = d, all }})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if done != total || done != m.WeightBytes() {
		t.Fatalf("progress ended at %d of %d; the weights are %d bytes", done, total, m.WeightBytes())
	}
}

// TestQ8ModelTracksF32: gen-model's q8_0 model is its f32 model's weights
// quantized (same draws), so their logits must agree to within what 8-bit
// weights allow: within 3 % of the logits' spread at every position (0.5–1.5 %
// measured).
func TestQ8ModelTracksF32(t *testing.T) {
	f, q := load(t, writeTiny(t, "f32"), 16), load(t, writeTiny(t, "q8_0"), 16)
	tokens := []int32{1, 450, 4996, 17, 2, 31999, 808, 9}
	var fp, qp []int32
	a, b := f.run(t, &fp, tokens, 0, len(tokens)), q.run(t, &qp, tokens, 0, len(tokens))
	V := f.m.Config.Vocab
	for row := range tokens {
		ra, rb := a[row*V:(row+1)*V], b[row*V:(row+1)*V]
		lo, hi := math.Inf(1), math.Inf(-1)
		var diff float64
		for i := range ra {
			lo, hi = math.Min(lo, float64(ra[i])), math.Max(hi, float64(ra[i]))
			diff = math.Max(diff, math.Abs(float64(ra[i]-rb[i])))
		}
		if diff > 0.03*(hi-lo) || diff == 0 {
			t.Fatalf("position %d: q8_0 logits differ from f32 by %g (spread %g)", row, diff, hi-lo)
		}
	}
}

// TestStoriesQ4KMMatchesLlamaCpp: stories260K quantized by llama-quantize
// to Q4_K_M (its 172-wide FFN rows fall back to other types: a mix of
// formats) generates, greedily, the text llama.cpp's llama-simple
// generates from the same file — the kernels compute what ggml computes.
func TestStoriesQ4KMMatchesLlamaCpp(t *testing.T) {
	tools, ok := testmodels.LlamaCpp()
	if !ok {
		t.Skip("skipping: ../shared/tools/llama.cpp is absent; this cross-check runs llama-quantize and llama-simple")
	}
	path := filepath.Join(t.TempDir(), "stories-q4_k_m.gguf")
	run := filepath.Join(tools, "run")
	if msg, err := exec.Command(run, "llama-quantize", storiesPath(t), path, "Q4_K_M").CombinedOutput(); err != nil {
		t.Fatalf("llama-quantize: %v\n%s", err, msg)
	}
	const prompt, n = "Once upon a time", 48
	out, err := exec.Command(run, "llama-simple", "-m", path, "-n", strconv.Itoa(n), prompt).Output()
	if err != nil {
		t.Fatalf("llama-simple: %v", err)
	}
	want := strings.TrimSpace(string(out))
	r := load(t, path, 64)
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
	// llama-simple prints the prompt (after its BOS piece) and then the
	// generated text.
	got := prompt + text
	if !strings.HasSuffix(want, got) {
		t.Fatalf("greedy text differs from llama.cpp's:\nkvhost:    %q\nllama.cpp: %q", got, want)
	}
	if r.m.MappedBytes == 0 {
		t.Fatal("no weight was served from the file in place")
	}
}
