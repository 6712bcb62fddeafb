package engine

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/kvhost/kvhost/host/constraint"
	"github.com/kvhost/kvhost/host/plugin"
)

// pluginRunner loads a constraint plugin over the rig's vocabulary.
func pluginRunner(t *testing.T, r *rig, path string, cfg plugin.Config) *constraint.Plugin {
	t.Helper()
	wasm, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%s (built by make plugins): %v", path, err)
	}
	cfg.NoCache = true
	rt, err := plugin.NewRuntime(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rt.Close(context.Background()) })
	p, err := constraint.NewPlugin(context.Background(), rt, "grammar", wasm, r.m.Tokenizer, r.m.Config.Vocab)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close(context.Background()) })
	return p
}

// TestConstrainedThroughPlugin: sampled choices constrained by the
// constraint-grammar plugin (in the sandbox) all validate.
func TestConstrainedThroughPlugin(t *testing.T) {
	r := newRig(t, 1024, Config{MaxRunning: 16, MaxQueue: 16, ChunkedPrefill: 64})
	r.e.cfg.Constraints = pluginRunner(t, r, "../constraint/builtin/wasm/grammar.wasm", plugin.Config{})
	for _, file := range []string{"10-nested.json", "13-defs-ref.json"} {
		spec, chk := schemaSpec(t, file)
		s, err := r.e.Submit(context.Background(), Request{Prompt: []int32{1, 50, 60}, MaxTokens: 150, N: 6,
			Sampling: SamplingParams{Temperature: 1}, Constraint: spec})
		if err != nil {
			t.Fatal(err)
		}
		byChoice := map[int][]int32{}
		for ev := range s.Events {
			if ev.Err != nil {
				t.Fatalf("%s: %v", file, ev.Err)
			}
			if !ev.Done {
				byChoice[ev.Choice] = append(byChoice[ev.Choice], ev.Token)
			}
		}
		for c, toks := range byChoice {
			if out := text(r, toks); chk.Check(out) != nil {
				t.Errorf("%s choice %d %q: %v", file, c, out, chk.Check(out))
			}
		}
	}
}

// TestHostileConstraintRequests: requests whose constraint loops, allows
// no token, allows an id past the vocabulary or allows only the end while
// the output is incomplete each end with a clear error; a well-behaved
// constrained request and an unconstrained one running alongside finish
// normally.
func TestHostileConstraintRequests(t *testing.T) {
	r := newRig(t, 1024, Config{MaxRunning: 16, MaxQueue: 16, ChunkedPrefill: 64})
	r.e.cfg.Constraints = pluginRunner(t, r, "../constraint/testdata/wasm/hostile-constraint.wasm", plugin.Config{ConstraintStepDeadline: time.Second})
	good, chk := schemaSpec(t, "04-object.json")
	gs, err := r.e.Submit(context.Background(), Request{Prompt: []int32{1, 7}, MaxTokens: 80, Sampling: SamplingParams{Temperature: 1}, Constraint: good})
	if err != nil {
		t.Fatal(err)
	}
	plain, err := r.e.Submit(context.Background(), Request{Prompt: []int32{1, 8}, MaxTokens: 20, IgnoreEOS: true})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"loop": "fuel", "none": "no token allowed", "range": "outside the vocabulary", "eos": "no token allowed"}
	if r.m.Config.Vocab%32 == 0 {
		// A mask of exactly vocab/32 words has no bit past the vocabulary:
		// the hostile plugin can only allow nothing (the plugin package's
		// test covers a vocabulary that ends inside a word).
		want["range"] = "no token allowed"
	}
	streams := map[string]*Stream{}
	for mode := range want {
		spec, _ := constraint.NewSpec(mode, nil, nil)
		s, err := r.e.Submit(context.Background(), Request{Prompt: []int32{1, 9}, MaxTokens: 20, Sampling: SamplingParams{Temperature: 1}, Constraint: spec})
		if err != nil {
			t.Fatal(err)
		}
		streams[mode] = s
	}
	for mode, s := range streams {
		res := collect(s)
		if res.err == nil || len(res.tokens) != 0 {
			t.Fatalf("%s: %d tokens, err %v", mode, len(res.tokens), res.err)
		}
		msg := res.err.Error()
		var de *plugin.DeadlineError
		if !strings.Contains(msg, want[mode]) && !(mode == "loop" && errors.As(res.err, &de)) {
			t.Errorf("%s: %v, want it to mention %q", mode, res.err, want[mode])
		}
		t.Logf("%s: %v", mode, res.err)
	}
	if res := collect(gs); res.err != nil || chk.Check(text(r, res.tokens)) != nil {
		t.Fatalf("well-behaved constrained request: %v / %v", res.err, chk.Check(text(r, res.tokens)))
	}
	if res := collect(plain); res.err != nil || len(res.tokens) != 20 {
		t.Fatalf("unconstrained request: %d tokens, %v", len(res.tokens), res.err)
	}
	spec, _ := constraint.NewSpec("panic", nil, nil)
	if _, err := r.e.Submit(context.Background(), Request{Prompt: []int32{1, 9}, MaxTokens: 5, Constraint: spec}); err == nil {
		t.Fatal("a constraint that panics at open was admitted")
	}
}
