package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvhost/kvhost/host/kv"
	"github.com/kvhost/kvhost/host/model"
	"github.com/kvhost/kvhost/host/plugin/wasmtest"
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

// TestFailingPolicyNeverFailsRequests: a policy whose every step fails (a
// hand-assembled sampler that spins until its fuel runs out when asked)
// fails those steps only: its requests complete, served by the default
// policy; with no default to take over (the failing policy is the
// default) they complete on the host sampler. The other requests of the
// batch are untouched, and none gets an error.
func TestFailingPolicyNeverFailsRequests(t *testing.T) {
	ctx := context.Background()
	evil := wasmtest.Sampler("evil", wasmtest.Spin, false)
	for _, tc := range []struct {
		def, wantPrefix string
	}{{"standard", "standard@"}, {"evil", "host"}} {
		t.Run("default "+tc.def, func(t *testing.T) {
			reg, err := sampling.NewRegistry(ctx, sampling.Options{Default: tc.def, DisableAfter: -1})
			if err != nil {
				t.Fatal(err)
			}
			defer reg.Close(ctx)
			if err := reg.Swap(ctx, "evil", evil, sampling.SourceUpload); err != nil {
				t.Fatal(err)
			}
			r := newRig(t, 512, Config{MaxRunning: 8, MaxQueue: 8, ChunkedPrefill: 64, Samplers: reg})
			c, err := reg.ValidateParams("evil", map[string]any{"attack": 1, "temperature": 0.9})
			if err != nil {
				t.Fatal(err)
			}
			var streams []*Stream
			for i := range 3 {
				s, err := r.e.Submit(ctx, Request{Prompt: []int32{1, int32(20 + i)}, MaxTokens: 6, IgnoreEOS: true, Sampler: "evil", SamplerParams: &c})
				if err != nil {
					t.Fatal(err)
				}
				streams = append(streams, s)
			}
			greedy, err := r.e.Submit(ctx, Request{Prompt: []int32{1, 9}, MaxTokens: 6, IgnoreEOS: true})
			if err != nil {
				t.Fatal(err)
			}
			for i, s := range streams {
				n := 0
				for ev := range s.Events {
					if ev.Err != nil {
						t.Fatalf("request %d failed: %v", i, ev.Err)
					}
					if !ev.Done {
						n++
						if !strings.HasPrefix(ev.SamplerVersion, tc.wantPrefix) {
							t.Fatalf("request %d token by %q, want %s…", i, ev.SamplerVersion, tc.wantPrefix)
						}
					}
				}
				if n != 6 {
					t.Fatalf("request %d: %d tokens", i, n)
				}
			}
			if res := collect(greedy); res.err != nil || len(res.tokens) != 6 {
				t.Fatalf("greedy bystander: %+v", res)
			}
			var info sampling.Info
			for _, in := range reg.List() {
				if in.Name == "evil" {
					info = in
				}
			}
			// Every token of the three requests fell back (18 rows), in
			// failed steps of one to three rows each (the requests share
			// a step unless the scheduler admitted them apart).
			if info.Fallbacks != 18 || info.Failures < 6 || info.Failures > 18 {
				t.Fatalf("failures not counted: %d failed steps, %d rows fell back, want 18 rows in 6–18 steps: %+v", info.Failures, info.Fallbacks, info)
			}
			waitIdle(t, r)
		})
	}
}

// blockingForward holds every forward until released.
type blockingForward struct {
	Forwarder
	gate chan struct{}
}

func (b blockingForward) Forward(pools *kv.Set, seqs []model.Seq, logits []float32) error {
	<-b.gate
	return b.Forwarder.Forward(pools, seqs, logits)
}

// TestStalledWhileAStepHangs: Stalled reports nothing for an idle engine
// or one making progress, and a *StalledError naming the pending work
// while a step does not return; once it returns, nothing again.
func TestStalledWhileAStepHangs(t *testing.T) {
	r := newRig(t, 512, Config{MaxRunning: 4, MaxQueue: 4, ChunkedPrefill: 64})
	gate := make(chan struct{})
	e, err := New(Config{MaxRunning: 4, MaxQueue: 4, ChunkedPrefill: 64}, blockingForward{r.m, gate}, r.pools, r.m.Config, r.m.Tokenizer.EOG)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(context.Background())
	if err := e.Stalled(time.Millisecond); err != nil {
		t.Fatalf("idle engine: %v", err)
	}
	s, err := e.Submit(context.Background(), Request{Prompt: []int32{1, 2, 3}, MaxTokens: 2})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(60 * time.Millisecond)
	var se *StalledError
	if err := e.Stalled(30 * time.Millisecond); !errors.As(err, &se) || se.Running != 1 || se.Since < 30*time.Millisecond || !strings.Contains(err.Error(), "engine stalled") {
		t.Fatalf("hung step: %v", err)
	}
	if err := e.Stalled(time.Minute); err != nil {
		t.Fatalf("under a long threshold: %v", err)
	}
	close(gate)
	if res := collect(s); res.err != nil || len(res.tokens) != 2 {
		t.Fatalf("after release: %+v", res)
	}
	if err := e.Stalled(30 * time.Millisecond); err != nil {
		t.Fatalf("after the step returned: %v", err)
	}
}
