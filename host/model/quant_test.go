package model

import (
	"bytes"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/kvhost/kvhost/host/alloc"
	"github.com/kvhost/kvhost/host/device"
	"github.com/kvhost/kvhost/host/device/cpu"
	"github.com/kvhost/kvhost/host/model/gguf"
	"github.com/kvhost/kvhost/host/model/synth"
	kcpu "github.com/kvhost/kvhost/kernels/cpu"
)

// quantScaleFields is where each quantized format keeps its f16 scales, and
// a magnitude for them that keeps random blocks' weights small.
var quantScaleFields = map[gguf.TensorType]struct {
	offs []int
	mag  float64
}{
	gguf.TypeQ4_0: {[]int{0}, 0.01}, gguf.TypeQ4_1: {[]int{0, 2}, 0.005}, gguf.TypeQ5_0: {[]int{0}, 0.005},
	gguf.TypeQ5_1: {[]int{0, 2}, 0.003}, gguf.TypeQ4_K: {[]int{0, 2}, 1e-4}, gguf.TypeQ5_K: {[]int{0, 2}, 5e-5},
	gguf.TypeQ6_K: {[]int{208}, 2e-5},
}

// randomQuantBlocks is n valid blocks of t: random quants and packed scales,
// modest f16 scale fields.
func randomQuantBlocks(r *rand.Rand, t gguf.TensorType, n int) []byte {
	ts := int(t.TypeSize())
	raw := make([]byte, n*ts)
	for i := range raw {
		raw[i] = byte(r.Uint32())
	}
	f := quantScaleFields[t]
	for b := range n {
		for _, off := range f.offs {
			h := kcpu.F32ToF16(float32(r.NormFloat64() * f.mag))
			raw[b*ts+off], raw[b*ts+off+1] = byte(h), byte(h>>8)
		}
	}
	return raw
}

// TestLoadQuantizedGGUF: a model whose matrices (the embedding included) are
// stored in the quantized GGUF formats, one per tensor in turn, loads by
// expanding them to F16 and computes bit for bit what the same model stored
// as those F16 values computes; the expansion is reported and counted.
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
	types := []gguf.TensorType{gguf.TypeQ4_K, gguf.TypeQ5_K, gguf.TypeQ6_K, gguf.TypeQ4_0, gguf.TypeQ4_1, gguf.TypeQ5_0, gguf.TypeQ5_1}
	r := rand.New(rand.NewPCG(11, 12))
	var quantized int
	var fileBytes, expandedBytes int64
	qpath := rewrite(t, src, func(kvs []gguf.KV, ts []gguf.TensorSpec) ([]gguf.KV, []gguf.TensorSpec) {
		for i := range ts {
			if len(ts[i].Dims) != 2 {
				continue
			}
			typ := types[quantized%len(types)]
			quantized++
			n := ts[i].Dims[0] * ts[i].Dims[1]
			ts[i].Type, ts[i].Data = typ, randomQuantBlocks(r, typ, int(n/typ.BlockSize()))
			fileBytes += int64(len(ts[i].Data))
			expandedBytes += int64(2 * n)
		}
		return kvs, ts
	})
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
			for j, v := range vals {
				h := kcpu.F32ToF16(v)
				data[2*j], data[2*j+1] = byte(h), byte(h>>8)
			}
			ts[i].Type, ts[i].Data = gguf.TypeF16, data
		}
		return kvs, ts
	})
	q, f := load(t, qpath, 16), load(t, fpath, 16)
	e := q.m.Expanded
	if e == nil || e.Tensors != quantized || e.FileBytes != fileBytes || e.DeviceBytes != expandedBytes || len(e.Types) != len(types) {
		t.Fatalf("expansion reported %+v; want %d tensors of %d types, %d file bytes, %d device bytes", e, quantized, len(types), fileBytes, expandedBytes)
	}
	if f.m.Expanded != nil {
		t.Fatalf("the F16 model reports an expansion: %+v", f.m.Expanded)
	}
	if q.m.WeightBytes() != f.m.WeightBytes() {
		t.Fatalf("weights: quantized model %d bytes on the device, F16 model %d", q.m.WeightBytes(), f.m.WeightBytes())
	}
	tokens := []int32{1, 900, 31000, 17, 4242, 77, 5}
	var qp, fp []int32
	a, b := q.run(t, &qp, tokens, 0, len(tokens)), f.run(t, &fp, tokens, 0, len(tokens))
	var spread float64
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			t.Fatalf("logit %d: %v from the quantized file, %v from the F16 one", i, a[i], b[i])
		}
		spread = math.Max(spread, math.Abs(float64(a[i]-a[0])))
	}
	if spread == 0 || math.IsNaN(spread) || math.IsInf(spread, 0) {
		t.Fatalf("degenerate logits (spread %v)", spread)
	}
	// Plan counts the expanded size too.
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
	if planned != expandedBytes {
		t.Fatalf("GGUFDeviceBytes sums the matrices to %d, want %d", planned, expandedBytes)
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
				ts[i].Type, ts[i].Data = gguf.TypeQ4_0, randomQuantBlocks(rand.New(rand.NewPCG(1, 2)), gguf.TypeQ4_0, int(n/32))
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

// BenchmarkExpandF16: load-time expansion of a 4096×4096 Q4_K tensor (one
// Llama-3-8B attention matrix) to F16.
func BenchmarkExpandF16(b *testing.B) {
	const n = 4096
	raw := randomQuantBlocks(rand.New(rand.NewPCG(3, 4)), gguf.TypeQ4_K, n*n/256)
	b.SetBytes(int64(len(raw)))
	for b.Loop() {
		if _, err := expandF16(gguf.TypeQ4_K, raw, n); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(n*n)*float64(b.N)/b.Elapsed().Seconds()/1e6, "Melem/s")
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
