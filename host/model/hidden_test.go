package model

import (
	"math"
	"testing"
)

// TestHiddenMatchesFloat64Reference checks Seq.Hidden — the output-normed
// final hidden state embeddings pool — row by row against the independent
// float64 forward, over a prefill split in two chunks, and that asking for
// it leaves the logits unchanged.
func TestHiddenMatchesFloat64Reference(t *testing.T) {
	path := storiesPath(t)
	r := load(t, path, 64)
	ref := newRefModel(t, path)
	prompt, err := r.m.Tokenizer.Encode("Once upon a time, a little girl", true)
	if err != nil {
		t.Fatal(err)
	}
	H, V := r.m.Config.Hidden, r.m.Config.Vocab
	var pages []int32
	hidden := make([]float32, len(prompt)*H)
	split := len(prompt) / 2
	var logits []float32
	for _, part := range []struct{ from, to int }{{0, split}, {split, len(prompt)}} {
		pages, err = r.pool.Grow(pages, part.to)
		if err != nil {
			t.Fatal(err)
		}
		l := make([]float32, V)
		seq := Seq{Tokens: prompt[part.from:part.to], Start: part.from, Pages: one(pages), LogitRows: 1, Hidden: hidden[part.from*H : part.to*H]}
		if err := r.m.Forward(r.pools, []Seq{seq}, l); err != nil {
			t.Fatal(err)
		}
		logits = l
	}
	worst := 0.0
	var last []float64
	for i, tok := range prompt {
		want := ref.stepHidden(tok)
		worst = math.Max(worst, maxDiff(hidden[i*H:(i+1)*H], want))
		last = want
	}
	t.Logf("max |hidden - float64 reference| over %d rows: %.3g", len(prompt), worst)
	if worst > 1e-4 {
		t.Fatalf("hidden states differ from the float64 reference by %.3g > 1e-4", worst)
	}
	if d := maxDiff(logits, matvec(ref.w["output.weight"], last, V)); d > 1e-4 {
		t.Errorf("logits with Hidden set differ from the reference by %.3g", d)
	}
	// A wrong-sized buffer is refused, naming the sizes.
	pages, _ = r.pool.Grow(pages, len(prompt)+1)
	err = r.m.Forward(r.pools, []Seq{{Tokens: prompt[:1], Start: len(prompt), Pages: one(pages), Hidden: make([]float32, H-1)}}, nil)
	if err == nil {
		t.Fatal("a short hidden buffer was accepted")
	}
}
