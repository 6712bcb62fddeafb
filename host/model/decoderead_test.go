package model

import (
	"testing"

	"github.com/kvhost/kvhost/host/model/gguf"
)

// fileReadBytes is the weight bytes one decoded token of the GGUF model at
// path reads (Config.TokenReadBytes over its tensors as loaded: the file's
// types, MXFP4 experts expanded).
func fileReadBytes(b testing.TB, path string, c Config) int64 {
	b.Helper()
	f, err := gguf.OpenModel(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	tied := true
	for _, t := range f.Tensors {
		tied = tied && t.Name != "output.weight"
	}
	var n int64
	for _, t := range f.Tensors {
		n += c.TokenReadBytes(t.Name, GGUFDeviceBytes(t), tied)
	}
	return n
}

// reportWeightRate adds the weight bandwidth of a batch-1 decode benchmark
// that just ran: read bytes per token × tokens/s, in GB/s (1e9 B/s).
func reportWeightRate(b *testing.B, read int64) {
	if s := b.Elapsed().Seconds(); s > 0 {
		b.ReportMetric(float64(read)*float64(b.N)/s/1e9, "weight-GB/s")
	}
}

// TestTokenReadBytes: a generated qwen3moe file reads one embedding row,
// top-k of its stacked experts and the rest whole per decoded token.
func TestTokenReadBytes(t *testing.T) {
	path := writeArchType(t, "qwen3moe", "f32")
	f, err := gguf.OpenModel(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	c, err := ConfigFromGGUF(f)
	if err != nil {
		t.Fatal(err)
	}
	used, experts := c.ExpertsPerToken()
	var want int64
	for _, ti := range f.Tensors {
		n := int64(ti.Size)
		switch ti.Name {
		case "token_embd.weight":
			n /= int64(c.Vocab)
		case "blk.0.ffn_gate_exps.weight", "blk.0.ffn_up_exps.weight", "blk.0.ffn_down_exps.weight",
			"blk.1.ffn_gate_exps.weight", "blk.1.ffn_up_exps.weight", "blk.1.ffn_down_exps.weight":
			n = n * int64(used) / int64(experts)
		}
		want += n
	}
	if used != 2 || experts != 8 || c.Layers != 2 {
		t.Fatalf("tiny qwen3moe: %d of %d experts, %d layers", used, experts, c.Layers)
	}
	if got := fileReadBytes(t, path, c); got != want {
		t.Fatalf("read per token %d B, want %d", got, want)
	}
	if got := (Config{Vocab: 10}).TokenReadBytes("token_embd.weight", 100, true); got != 110 {
		t.Fatalf("tied embedding: %d B, want a row and the LM head (110)", got)
	}
}
