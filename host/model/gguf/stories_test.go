package gguf

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"github.com/kvhost/kvhost/internal/testmodels"
	"math"
	"os"
	"path/filepath"
	"testing"
)

func openStories(t *testing.T) (*File, string) {
	t.Helper()
	path := testmodels.MustStories260K(t)
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Close() })
	return f, filepath.Join(repoShared(t), "models")
}

// TestStories260K checks the reader against a file written by the Python
// gguf package, with facts from shared/models/README.md.
func TestStories260K(t *testing.T) {
	f, _ := openStories(t)
	if f.Version != 3 || len(f.Tensors) != 47 || f.Alignment != 32 {
		t.Fatalf("version %d, %d tensors, alignment %d", f.Version, len(f.Tensors), f.Alignment)
	}
	for _, ti := range f.Tensors {
		if ti.Type != TypeF32 {
			t.Errorf("tensor %s is %s", ti.Name, ti.Type)
		}
	}
	uints := map[string]uint64{
		"llama.context_length":            512,
		"llama.embedding_length":          64,
		"llama.block_count":               5,
		"llama.feed_forward_length":       172,
		"llama.attention.head_count":      8,
		"llama.attention.head_count_kv":   4,
		"llama.rope.dimension_count":      8,
		"llama.vocab_size":                512,
		"general.file_type":               0,
		"tokenizer.ggml.bos_token_id":     1,
		"tokenizer.ggml.eos_token_id":     2,
		"tokenizer.ggml.unknown_token_id": 0,
	}
	for k, want := range uints {
		v, ok := f.Get(k)
		got, isUint := v.Uint()
		if !ok || !isUint || got != want {
			t.Errorf("%s = %v (%v, %v), want %d", k, got, ok, isUint, want)
		}
	}
	floats := map[string]float64{"llama.rope.freq_base": 10000, "llama.attention.layer_norm_rms_epsilon": 1e-5}
	for k, want := range floats {
		v, _ := f.Get(k)
		if got, ok := v.Float(); !ok || math.Abs(got-want) > want*1e-6 {
			t.Errorf("%s = %v, want %v", k, got, want)
		}
	}
	strs := map[string]string{"general.architecture": "llama", "tokenizer.ggml.model": "llama"}
	for k, want := range strs {
		v, _ := f.Get(k)
		if got, ok := v.String(); !ok || got != want {
			t.Errorf("%s = %q, want %q", k, got, want)
		}
	}
	for k, want := range map[string]bool{"tokenizer.ggml.add_bos_token": true, "tokenizer.ggml.add_eos_token": false} {
		v, _ := f.Get(k)
		if got, ok := v.Bool(); !ok || got != want {
			t.Errorf("%s = %v, want %v", k, got, want)
		}
	}
	tv, _ := f.Get("tokenizer.ggml.tokens")
	tokens, ok := tv.Strings()
	if !ok || len(tokens) != 512 || tokens[0] != "<unk>" || tokens[3] != "<0x00>" || tokens[258] != "<0xFF>" {
		t.Fatalf("tokens: %d, first %q", len(tokens), tokens[:4])
	}
	sv, _ := f.Get("tokenizer.ggml.scores")
	if scores, ok := sv.Floats(); !ok || len(scores) != 512 {
		t.Fatalf("scores: %d", len(scores))
	}
	ttv, _ := f.Get("tokenizer.ggml.token_type")
	if types, ok := ttv.Ints(); !ok || len(types) != 512 {
		t.Fatalf("token types: %d", len(types))
	}
	if _, _, err := f.Tensor("output.weight"); err == nil {
		t.Fatal("output.weight present; the classifier should be tied to token_embd.weight")
	}
	ti, _, err := f.Tensor("token_embd.weight")
	if err != nil || len(ti.Dims) != 2 || ti.Dims[0] != 64 || ti.Dims[1] != 512 {
		t.Fatalf("token_embd.weight %+v %v", ti, err)
	}
}

// TestStories260KWeightsMatchCheckpoint compares GGUF tensors with the
// llama2.c checkpoint the file was converted from.
func TestStories260KWeightsMatchCheckpoint(t *testing.T) {
	f, dir := openStories(t)
	bin, err := os.ReadFile(filepath.Join(dir, "stories260K.bin"))
	if err != nil {
		t.Skipf("skipping: ../shared/models/stories260K.bin (the llama2.c checkpoint this GGUF was converted from) is absent: %v", err)
	}
	const dim, hidden, layers, kvDim, vocab = 64, 172, 5, 32, 512
	off := 28 // seven int32 config values
	next := func(n int) []byte {
		b := bin[off : off+4*n]
		off += 4 * n
		return b
	}
	type part struct {
		name string // %d is the layer
		per  int    // floats per layer
	}
	want := map[string][]byte{"token_embd.weight": next(vocab * dim)}
	for _, p := range []part{
		{"blk.%d.attn_norm.weight", dim}, {"blk.%d.attn_q.weight", dim * dim},
		{"blk.%d.attn_k.weight", kvDim * dim}, {"blk.%d.attn_v.weight", kvDim * dim},
		{"blk.%d.attn_output.weight", dim * dim}, {"blk.%d.ffn_norm.weight", dim},
		{"blk.%d.ffn_gate.weight", hidden * dim}, {"blk.%d.ffn_down.weight", dim * hidden},
		{"blk.%d.ffn_up.weight", hidden * dim},
	} {
		for l := 0; l < layers; l++ {
			want[fmt.Sprintf(p.name, l)] = next(p.per)
		}
	}
	want["output_norm.weight"] = next(dim)
	if len(want) != len(f.Tensors) {
		t.Fatalf("checkpoint yields %d tensors, file has %d", len(want), len(f.Tensors))
	}
	for name, w := range want {
		_, got, err := f.Tensor(name)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, w) {
			t.Errorf("%s differs from the checkpoint (first float %v vs %v)", name,
				math.Float32frombits(binary.LittleEndian.Uint32(got)), math.Float32frombits(binary.LittleEndian.Uint32(w)))
		}
	}
}

// TestStories260KRewrite writes the parsed file back with Write; the bytes
// must equal those the Python gguf writer produced.
func TestStories260KRewrite(t *testing.T) {
	f, _ := openStories(t)
	orig, err := os.ReadFile(testmodels.MustStories260K(t))
	if err != nil {
		t.Fatal(err)
	}
	got := writeBytes(t, f.KVs, specsOf(t, f), f.Alignment)
	if !bytes.Equal(got, orig) {
		n := 0
		for n < len(got) && n < len(orig) && got[n] == orig[n] {
			n++
		}
		t.Fatalf("rewrite differs from the original at byte %d (lengths %d vs %d)", n, len(got), len(orig))
	}
}
