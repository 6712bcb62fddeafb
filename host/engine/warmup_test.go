package engine

import (
	"context"
	"fmt"
	"testing"
)

// TestWarmupLeavesNoTrace: Warmup runs one short request (its prompt
// prefilled, one decode step: two steps, five tokens computed) and leaves
// the prefix cache as it found it — no node, no query, no hit — and every
// page free; a request whose prompt extends the warm-up's (pages of 4, so
// the warm-up's first page would match) finds nothing cached, and served
// once more hits what it cached itself (the tokens are cacheable: only
// Warmup's sequence is kept out).
func TestWarmupLeavesNoTrace(t *testing.T) {
	e, g, pool := prefixRig(t, tinyModel(t), 36, Config{MaxRunning: 4, MaxQueue: 8, ChunkedPrefill: 16, PrefixCache: true})
	if err := e.Warmup(context.Background()); err != nil {
		t.Fatal(err)
	}
	st := e.Stats()
	if st.Steps != 2 || g.computed.Load() != warmupPrompt+1 {
		t.Fatalf("warm-up ran %d steps computing %d tokens, want 2 steps and %d tokens", st.Steps, g.computed.Load(), warmupPrompt+1)
	}
	if p := st.Prefix; p.Nodes != 0 || p.Tokens != 0 || p.Queries != 0 || p.Hits != 0 {
		t.Fatalf("the warm-up left a trace in the prefix cache: %+v", p)
	}
	cacheFree(t, e, pool)
	r := Request{Prompt: make([]int32, 2*warmupPrompt), MaxTokens: 2, IgnoreEOS: true}
	first := runAllEvents(t, e, r)
	second := runAllEvents(t, e, r)
	if first.cached != 0 || second.cached == 0 {
		t.Fatalf("a prompt extending the warm-up's: %d tokens cached, then %d (want 0, then more)", first.cached, second.cached)
	}
	if fmt.Sprint(first.tokens) != fmt.Sprint(second.tokens) {
		t.Fatalf("outputs differ: %v, then %v", first.tokens, second.tokens)
	}
	cacheFree(t, e, pool)
}

// TestWarmupShortContext: a context too short for Warmup's request is
// not warmed (no step, no error).
func TestWarmupShortContext(t *testing.T) {
	e, _, _ := prefixRig(t, tinyModel(t), 36, Config{MaxRunning: 4, MaxQueue: 8, ChunkedPrefill: 16})
	e.ctxLen = 2
	if err := e.Warmup(context.Background()); err != nil || e.Stats().Steps != 0 {
		t.Fatalf("warm-up on a 2-token context: %v, %d steps", err, e.Stats().Steps)
	}
}
