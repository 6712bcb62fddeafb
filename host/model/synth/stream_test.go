package synth

import (
	"bytes"
	"encoding/binary"
	"math"
	"testing"

	"github.com/kvhost/kvhost/host/model/gguf"
	kcpu "github.com/kvhost/kvhost/kernels/cpu"
)

// inMemory is the pre-streaming Write: every tensor built in memory, then
// gguf.Write. Sequential specs must come out byte-identical from Write; for
// parallel specs it draws chunk c of tensor t from chunkSeed(seed, t, c).
func inMemory(t *testing.T, s Spec) []byte {
	t.Helper()
	kvs, plans, err := layout(s)
	if err != nil {
		t.Fatal(err)
	}
	r := rng(s.Seed)
	_, ft, err := lookupFType(s.DType)
	if err != nil {
		t.Fatal(err)
	}
	mx := &mixture{f: ft, gqa: s.Heads / s.KVHeads, layers: s.Layers}
	var tensors []gguf.TensorSpec
	for ti, p := range plans {
		if p.vec {
			data := make([]byte, 4*p.cols)
			for j := 0; j < p.cols; j++ {
				binary.LittleEndian.PutUint32(data[4*j:], math.Float32bits(1))
			}
			tensors = append(tensors, gguf.TensorSpec{Name: p.name, Dims: []uint64{uint64(p.cols)}, Type: gguf.TypeF32, Data: data})
			continue
		}
		n := p.rows * p.cols
		typ := mx.typeOf(p)
		vals := make([]float32, n)
		for j := 0; j < n; j++ {
			if s.Parallel && j%chunkElems == 0 {
				r = rng(chunkSeed(s.Seed, ti, j/chunkElems))
			}
			vals[j] = float32(r.normal() * p.std)
		}
		var data []byte
		switch typ {
		case gguf.TypeF32:
			data = make([]byte, 4*n)
			for j, v := range vals {
				binary.LittleEndian.PutUint32(data[4*j:], math.Float32bits(v))
			}
		case gguf.TypeF16:
			data = make([]byte, 2*n)
			for j, v := range vals {
				binary.LittleEndian.PutUint16(data[2*j:], kcpu.F32ToF16(v))
			}
		case gguf.TypeBF16:
			data = make([]byte, 2*n)
			for j, v := range vals {
				binary.LittleEndian.PutUint16(data[2*j:], kcpu.F32ToBF16(v))
			}
		default:
			data = make([]byte, n/int(typ.BlockSize())*int(typ.TypeSize()))
			if err := gguf.Quantize(typ, data, vals); err != nil {
				t.Fatal(err)
			}
		}
		tensors = append(tensors, gguf.TensorSpec{Name: p.name, Dims: []uint64{uint64(p.cols), uint64(p.rows)}, Type: typ, Data: data})
	}
	var buf bytes.Buffer
	if err := gguf.Write(&buf, kvs, tensors, 0); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func small(dtype string) Spec {
	return Spec{Name: "small-" + dtype, Hidden: 64, Layers: 2, Heads: 4, KVHeads: 2, Intermediate: 96, Vocab: 3000, ContextLen: 256, DType: dtype, Seed: 11}
}

// wide has rows every K-quant block divides, 8 layers and 4 query heads per
// KV head (so the mixtures' layer rules and GQA rules both apply), and is
// otherwise as small as that allows (the quantizers run slowly under -race).
func wide(dtype string) Spec {
	return Spec{Name: "wide-" + dtype, Hidden: 256, Layers: 8, Heads: 8, KVHeads: 2, Intermediate: 256, Vocab: 512, ContextLen: 256, DType: dtype, Seed: 12}
}

func TestStreamMatchesInMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping in -short mode: streamed-vs-in-memory writes of large synthetic models")
	}
	parallel := Spec{Name: "par", Hidden: 64, Layers: 1, Heads: 4, KVHeads: 2, Intermediate: 192, Vocab: 20000, ContextLen: 256, DType: "bf16", Seed: 7, Parallel: true}
	cases := []struct {
		name string
		spec func() (Spec, error)
	}{
		// Small shapes keep the race-detector run short; every dtype and
		// both the sequential and the parallel generator are covered.
		{"f32", func() (Spec, error) { return small("f32"), nil }},
		{"f16", func() (Spec, error) { return small("f16"), nil }},
		{"bf16", func() (Spec, error) { return small("bf16"), nil }},
		{"q8_0", func() (Spec, error) { return small("q8_0"), nil }},
		{"parallel q8_0", func() (Spec, error) { p := parallel; p.DType = "q8_0"; return p, nil }},
		{"q4_k_m (mixed types, fallbacks)", func() (Spec, error) { return small("q4_k_m"), nil }},
		{"q4_k_m 256-wide", func() (Spec, error) { s := wide("q4_k_m"); s.Layers = 2; return s, nil }},
		{"parallel bf16 (multi-chunk embedding)", func() (Spec, error) { return parallel, nil }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, err := c.spec()
			if err != nil {
				t.Fatal(err)
			}
			want := inMemory(t, s)
			var got bytes.Buffer
			calls := 0
			if err := Write(&got, s, func(done, total int) { calls++ }); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got.Bytes(), want) {
				t.Fatalf("streamed %d bytes differ from gguf.Write's %d", got.Len(), len(want))
			}
			if calls != 3+9*s.Layers {
				t.Fatalf("progress called %d times, want %d", calls, 3+9*s.Layers)
			}
			f, err := gguf.Parse(s.Name, got.Bytes())
			if err != nil {
				t.Fatalf("parse: %v", err)
			}
			if len(f.Tensors) != 3+9*s.Layers {
				t.Fatalf("parsed %d tensors", len(f.Tensors))
			}
		})
	}
}

func TestPresetLlama3(t *testing.T) {
	s, err := Preset("llama3-8b", "bf16")
	if err != nil {
		t.Fatal(err)
	}
	// Llama-3-8B: 8 030 261 248 parameters.
	if p := s.Params(); p != 8030261248 {
		t.Fatalf("params %d, want 8030261248", p)
	}
	if !s.Parallel || s.ContextLen != 8192 || s.KVHeads != 8 || s.Vocab != 128256 {
		t.Fatalf("unexpected preset %+v", s)
	}
	if s, err := Preset("small", "Q4_K"); err != nil || s.DType != "q4_k_m" {
		t.Fatalf("Q4_K (llama-quantize's alias of Q4_K_M): %+v, %v", s, err)
	}
	if _, err := Preset("llama3-8b", "q4"); err == nil {
		t.Fatal("unknown dtype accepted")
	}
	if _, err := Preset("huge", "bf16"); err == nil {
		t.Fatal("unknown size accepted")
	}
}
