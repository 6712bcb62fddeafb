package model

import (
	"math"
	"testing"
)

func round512(n int64) int64 { return (n + 511) / 512 * 512 }

// analyticPeak is the forward's widest moment for T new tokens and R logit
// rows, from the buffers forward.go holds at once (spec §4's per-layer
// widest moment for an f32 forward, plus the LM head):
//
//	attention moment: x, h [T,H] + q, att [T,Q] + k, v [T,KV]
//	MLP moment:       x, h [T,H] + gate, up [T,I]
//	LM head:          x [T,H] + gathered rows [R,H], then rows [R,H] + logits [min(R,chunk),V]
//
// each buffer rounded to the allocator's 512-byte blocks.
func analyticPeak(c Config, T, R, chunk int) int64 {
	f := func(n int) int64 { return round512(int64(n) * 4) }
	x, h := f(T*c.Hidden), f(T*c.Hidden)
	attn := x + h + 2*f(T*c.QRow()) + 2*f(T*c.KVRow())
	mlp := x + h + 2*f(T*c.Intermediate)
	head := max(x+f(R*c.Hidden), f(R*c.Hidden)+f(min(R, chunk)*c.Vocab))
	return max(attn, mlp, head)
}

// TestActivationPeakMatchesAnalytic: the allocator's measured peak during a
// prefill of N tokens is the analytic widest moment (within ±5%), with last-
// position logits and with full input logprobs, and chunking keeps it flat.
func TestActivationPeakMatchesAnalytic(t *testing.T) {
	path := writeTiny(t, "f32")
	r := load(t, path, 1024)
	c := r.m.Config
	base := r.act.Stats().Allocated // the attention workspace
	measure := func(tokens []int32, start, rows int, pages []int32) int64 {
		t.Helper()
		r.act.ResetPeak()
		logits := make([]float32, rows*c.Vocab)
		if err := r.m.Forward(r.pools, []Seq{{Tokens: tokens, Start: start, Pages: one(pages), LogitRows: rows}}, logits); err != nil {
			t.Fatal(err)
		}
		return r.act.Stats().PeakAllocated - base
	}
	toks := make([]int32, 1024)
	for i := range toks {
		toks[i] = int32(1 + i*13%30000)
	}
	pages, err := r.pool.Grow(nil, len(toks))
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{16, 64, 256} {
		for _, rows := range []int{1, n} {
			got := measure(toks[:n], 0, rows, pages)
			want := analyticPeak(c, n, rows, DefaultLogitsChunk)
			t.Logf("N=%d rows=%d: measured %d analytic %d", n, rows, got, want)
			if d := math.Abs(float64(got-want)) / float64(want); d > 0.05 {
				t.Errorf("N=%d rows=%d: measured peak %d, analytic %d (%.1f%% off)", n, rows, got, want, 100*d)
			}
		}
	}
	// Chunked: a 1024-token prompt fed in 256-token chunks peaks like one chunk.
	one := measure(toks[:256], 0, 1, pages)
	var worst int64
	for s := 0; s < 1024; s += 256 {
		worst = max(worst, measure(toks[s:s+256], s, 1, pages))
	}
	if worst != one {
		t.Fatalf("chunked 1024-token prompt peaked at %d, one 256-token chunk at %d", worst, one)
	}
	// Logprob chunking bounds the logits: 256 rows in chunks of 64.
	r.m.LogitsChunk = 64
	chunked := measure(toks[:256], 0, 256, pages)
	if want := analyticPeak(c, 256, 256, 64); chunked != want && math.Abs(float64(chunked-want))/float64(want) > 0.05 {
		t.Fatalf("chunked logprobs peak %d, analytic %d", chunked, want)
	}
	if full := analyticPeak(c, 256, 256, 256); chunked >= full {
		t.Fatalf("logprob chunking did not lower the peak: %d vs %d", chunked, full)
	}
}
