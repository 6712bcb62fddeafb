package engine

import (
	"context"
	"fmt"
	"testing"

	"github.com/kvhost/kvhost/host/sampling"
)

// TestLogitBiasAndPenaltiesInTheEngine: logit_bias and the penalties reach
// the token choice on every path the engine has — the host's greedy
// argmax, the host sampler (no registry), a named policy and the default
// policy — and on forked choices (n > 1): -100 bans a token, +100 forces
// one, and a penalised greedy run follows the penalty rule computed from
// the engine's own raw top-20 logprobs at every step.
func TestLogitBiasAndPenaltiesInTheEngine(t *testing.T) {
	withReg := newRig(t, 512, Config{MaxRunning: 8, MaxQueue: 8, ChunkedPrefill: 64, Samplers: samplers(t)})
	noReg := newRig(t, 512, Config{MaxRunning: 8, MaxQueue: 8, ChunkedPrefill: 64})
	prompt := []int32{1, 20, 30}
	run := func(r *rig, req Request) [][]int32 {
		t.Helper()
		req.Prompt, req.IgnoreEOS = prompt, true
		if req.MaxTokens == 0 {
			req.MaxTokens = 10
		}
		s, err := r.e.Submit(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		out := make([][]int32, max(req.N, 1))
		for ev := range s.Events {
			if ev.Err != nil {
				t.Fatal(ev.Err)
			}
			if !ev.Done {
				out[ev.Choice] = append(out[ev.Choice], ev.Token)
			}
		}
		return out
	}
	base := run(withReg, Request{})[0]
	first, force := base[0], int32(7)
	if first == force {
		force = 8
	}
	seed := uint64(3)
	paths := []struct {
		name string
		r    *rig
		req  Request
	}{
		{"host greedy", withReg, Request{}},
		{"host sampler", noReg, Request{Sampling: SamplingParams{Temperature: 0.9, Seed: &seed}}},
		{"named policy", withReg, Request{Sampler: "greedy"}},
		{"default policy, n=3", withReg, Request{N: 3, Sampling: SamplingParams{Temperature: 0.9, TopP: 0.95, Seed: &seed}}},
		{"host sampler, n=3", noReg, Request{N: 3, Sampling: SamplingParams{Temperature: 0.9, Seed: &seed}}},
	}
	for _, p := range paths {
		banned := p.req
		banned.Sampling.LogitBias = []sampling.TokenBias{{Token: first, Bias: -100}}
		for c, toks := range run(p.r, banned) {
			for i, tok := range toks {
				if tok == first {
					t.Errorf("%s choice %d: banned token %d at %d: %v", p.name, c, first, i, toks)
				}
			}
		}
		forced := p.req
		forced.Sampling.LogitBias = []sampling.TokenBias{{Token: force, Bias: 100}}
		for c, toks := range run(p.r, forced) {
			for i, tok := range toks {
				if tok != force {
					t.Errorf("%s choice %d: forced %d, got %d at %d: %v", p.name, c, force, tok, i, toks)
					break
				}
			}
		}
	}

	// A penalised greedy run, step by step against the rule. The tiny
	// model does not repeat itself within 24 greedy tokens, so the
	// penalties are negative (a reward for repeating), which must change
	// the output.
	const freq, pres = -0.6, -0.2
	for _, r := range []*rig{withReg, noReg} {
		s, err := r.e.Submit(context.Background(), Request{Prompt: prompt, MaxTokens: 24, IgnoreEOS: true, Logprobs: true, TopLogprobs: 20,
			Sampling: SamplingParams{FrequencyPenalty: freq, PresencePenalty: pres}})
		if err != nil {
			t.Fatal(err)
		}
		counts := map[int32]int{}
		var toks []int32
		decided := 0
		for ev := range s.Events {
			if ev.Err != nil {
				t.Fatal(ev.Err)
			}
			if ev.Done {
				continue
			}
			// A step where a rewarded token outside the top 20 could win is
			// not decided by the list: check the others.
			best, bestV, outside := penaltyArgmax(ev.TopLogprobs, counts, freq, pres)
			if bestV >= outside {
				decided++
				// The engine adjusts float32 logits, the rule here float64
				// logprobs: a near-tie may go either way.
				chosen := float64(ev.Logprob) - float64(counts[ev.Token])*freq
				if counts[ev.Token] > 0 {
					chosen -= pres
				}
				if ev.Token != best && bestV-chosen > 1e-4 {
					t.Fatalf("step %d: chose %d, the penalty rule says %d (counts %v)", len(toks), ev.Token, best, counts)
				}
			}
			counts[ev.Token]++
			toks = append(toks, ev.Token)
		}
		if fmt.Sprint(toks) == fmt.Sprint(run(r, Request{MaxTokens: 24})[0]) || len(counts) == len(toks) {
			t.Errorf("rewarding repeats changed nothing: %v", toks)
		}
		if decided < len(toks)/3 {
			t.Errorf("only %d of %d steps decided by the top 20: %v", decided, len(toks), toks)
		}
	}
	waitIdle(t, withReg)
	waitIdle(t, noReg)
}

// penaltyArgmax applies the frequency/presence rule to the raw top
// logprobs and returns the best token, its adjusted value, and a bound on
// what a token outside the list can reach: at most the last listed raw
// value, plus its reward if it was generated before (negative penalties).
func penaltyArgmax(top []TokenLogprob, counts map[int32]int, freq, pres float64) (int32, float64, float64) {
	adj := func(tok int32, v float64) float64 {
		if n := counts[tok]; n > 0 {
			v -= float64(n)*freq + pres
		}
		return v
	}
	best, bestV := int32(-1), 0.0
	listed := map[int32]bool{}
	for _, c := range top {
		listed[c.Token] = true
		if v := adj(c.Token, float64(c.Logprob)); best < 0 || v > bestV {
			best, bestV = c.Token, v
		}
	}
	floor := float64(top[len(top)-1].Logprob)
	outside := floor
	for tok := range counts {
		if !listed[tok] {
			outside = max(outside, adj(tok, floor))
		}
	}
	return best, bestV, outside
}
