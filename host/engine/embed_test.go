package engine

import (
	"context"
	"errors"
	"math"
	"testing"
)

// embedOnce runs one Embed request and returns its final event.
func embedOnce(t *testing.T, r *rig, prompt []int32) Event {
	t.Helper()
	st, err := r.e.Submit(context.Background(), Request{Prompt: prompt, Embed: true})
	if err != nil {
		t.Fatal(err)
	}
	var last Event
	n := 0
	for ev := range st.Events {
		last = ev
		n++
	}
	if n != 1 || !last.Done || last.Err != nil || last.FinishReason != "embed" {
		t.Fatalf("embed stream: %d events, last %+v", n, last)
	}
	return last
}

// TestEmbedChunkedEqualsWhole: an Embed request's hidden states are the
// same whether its prompt runs in one forward or in chunks of 8 batched
// with generating requests, and a 1-token prompt (which the scheduler sees
// as a decode) still runs eagerly with its hidden state.
func TestEmbedChunkedEqualsWhole(t *testing.T) {
	prompt := prompts(8)[7]
	for len(prompt) < 40 {
		prompt = append(prompt, prompt[1:]...)
	}
	prompt = prompt[:40]
	whole := newRig(t, 64, Config{MaxRunning: 4, MaxQueue: 8, ChunkedPrefill: -1})
	want := embedOnce(t, whole, prompt)
	H := whole.m.Config.Hidden
	if len(want.Hidden) != len(prompt)*H || want.PromptTokens != len(prompt) || want.CompletionTokens != 0 {
		t.Fatalf("hidden %d floats for %d tokens × %d; usage %d/%d", len(want.Hidden), len(prompt), H, want.PromptTokens, want.CompletionTokens)
	}

	chunked := newRig(t, 64, Config{MaxRunning: 4, MaxQueue: 8, ChunkedPrefill: 8, Graphs: graphsWanted})
	gens := make([]*Stream, 3)
	for i := range gens {
		var err error
		if gens[i], err = chunked.e.Submit(context.Background(), Request{Prompt: prompts(3)[i], MaxTokens: 12}); err != nil {
			t.Fatal(err)
		}
	}
	got := embedOnce(t, chunked, prompt)
	for i, g := range gens {
		if res := collect(g); res.err != nil || len(res.tokens) != 12 {
			t.Errorf("generation %d beside the embedding: %+v", i, res)
		}
	}
	worst := 0.0
	for i := range want.Hidden {
		worst = math.Max(worst, math.Abs(float64(got.Hidden[i]-want.Hidden[i])))
	}
	if worst > 1e-4 {
		t.Errorf("chunked and batched hidden states differ from one forward by %.3g", worst)
	}
	one := embedOnce(t, chunked, prompt[:1])
	for i := 0; i < H; i++ {
		if d := math.Abs(float64(one.Hidden[i] - want.Hidden[i])); d > 1e-4 {
			t.Fatalf("the 1-token embedding's row differs from the first row of the long one by %.3g at %d", d, i)
		}
	}
	waitIdle(t, chunked)
}

func TestEmbedValidation(t *testing.T) {
	r := newRig(t, 64, Config{MaxRunning: 1, MaxQueue: 4, ChunkedPrefill: 64})
	full := make([]int32, r.m.Config.ContextLen)
	for i := range full {
		full[i] = 1
	}
	for _, tc := range []struct {
		name  string
		req   Request
		field string
	}{
		{"past the context", Request{Prompt: append(full, 1), Embed: true}, "input"},
		{"more than the pool", Request{Prompt: full, Embed: true}, "input"},
		{"with max_tokens", Request{Prompt: []int32{1}, Embed: true, MaxTokens: 3}, "embed"},
		{"with n", Request{Prompt: []int32{1}, Embed: true, N: 2}, "embed"},
		{"with logprobs", Request{Prompt: []int32{1}, Embed: true, Logprobs: true}, "embed"},
	} {
		_, err := r.e.Submit(context.Background(), tc.req)
		var ire *InvalidRequestError
		if !errors.As(err, &ire) || ire.Field != tc.field {
			t.Errorf("%s: %v, want invalid %s", tc.name, err, tc.field)
		}
	}
}
