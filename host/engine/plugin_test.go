package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/kvhost/kvhost/host/sampling"
)

var (
	regOnce sync.Once
	reg     *sampling.Registry
	regErr  error
)

// samplers loads the built-in sampling policies once per test binary.
func samplers(t testing.TB) *sampling.Registry {
	regOnce.Do(func() { reg, regErr = sampling.NewRegistry(context.Background(), sampling.Options{}) })
	if regErr != nil {
		t.Fatalf("sampler registry (built-in policies are built by make plugins): %v", regErr)
	}
	return reg
}

// TestPluginSamplingSeededAndVersioned: a seeded request sampled by the
// standard plugin gets the same tokens alone and in a busy batch, every
// token names the policy version, and a named policy with its own
// parameters runs too.
func TestPluginSamplingSeededAndVersioned(t *testing.T) {
	r := newRig(t, 512, Config{MaxRunning: 8, MaxQueue: 8, ChunkedPrefill: 64, Samplers: samplers(t)})
	seed := uint64(7)
	run := func(busy bool) ([]int32, string) {
		var noise []*Stream
		if busy {
			for _, p := range prompts(5) {
				s, err := r.e.Submit(context.Background(), Request{Prompt: p, MaxTokens: 20, IgnoreEOS: true, Sampling: SamplingParams{Temperature: 1.1}})
				if err != nil {
					t.Fatal(err)
				}
				noise = append(noise, s)
			}
		}
		s, err := r.e.Submit(context.Background(), Request{Prompt: []int32{1, 20, 30}, MaxTokens: 16, IgnoreEOS: true,
			Sampling: SamplingParams{Temperature: 0.8, TopP: 0.9, Seed: &seed}})
		if err != nil {
			t.Fatal(err)
		}
		var toks []int32
		version := ""
		for ev := range s.Events {
			if ev.Err != nil {
				t.Fatal(ev.Err)
			}
			if !ev.Done {
				toks = append(toks, ev.Token)
				version = ev.SamplerVersion
			}
		}
		for _, n := range noise {
			collect(n)
		}
		return toks, version
	}
	a, va := run(false)
	b, _ := run(true)
	if fmt.Sprint(a) != fmt.Sprint(b) {
		t.Fatalf("seeded plugin sampling differs with batch composition: %v vs %v", a, b)
	}
	if !strings.HasPrefix(va, "standard@") {
		t.Fatalf("token not attributed to a policy version: %q", va)
	}
	c, err := samplers(t).ValidateParams("typical", map[string]any{"temperature": 1.0})
	if err != nil {
		t.Fatal(err)
	}
	s, err := r.e.Submit(context.Background(), Request{Prompt: []int32{1, 5}, MaxTokens: 8, IgnoreEOS: true, Sampler: "typical", SamplerParams: &c})
	if err != nil {
		t.Fatal(err)
	}
	res := collect(s)
	if res.err != nil || len(res.tokens) != 8 {
		t.Fatalf("typical: %+v", res)
	}
	_, err = r.e.Submit(context.Background(), Request{Prompt: []int32{1}, MaxTokens: 1, Sampler: "nope", Sampling: SamplingParams{Temperature: 1}})
	var ire *InvalidRequestError
	if !errors.As(err, &ire) || ire.Field != "sampler" {
		t.Fatalf("unknown policy: %v", err)
	}
	waitIdle(t, r)
}
