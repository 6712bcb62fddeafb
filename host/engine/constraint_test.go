package engine

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/kvhost/kvhost/host/constraint"
	"github.com/kvhost/kvhost/host/constraint/compile"
	check "github.com/kvhost/kvhost/host/constraint/constrainttest"
	"github.com/kvhost/kvhost/host/plugin/builtin"
	"github.com/kvhost/kvhost/host/sampling/samplertest"
	"github.com/kvhost/kvhost/sdk/constraint/grammar"
)

// nativeRunner is the grammar engine over the tiny model's vocabulary.
func nativeRunner(t testing.TB, r *rig) *constraint.Native {
	t.Helper()
	vocab, eog, err := constraint.Vocab(r.m.Tokenizer, r.m.Config.Vocab)
	if err != nil {
		t.Fatal(err)
	}
	n, err := constraint.NewNative(vocab, eog, grammar.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// text is what the tokens add to the output (end-of-generation adds
// nothing), as the server's detokenizer builds it.
func text(r *rig, toks []int32) string {
	var b []byte
	for _, id := range toks {
		if !r.m.Tokenizer.EOG(id) {
			b = append(b, r.m.Tokenizer.TokenBytes(id)...)
		}
	}
	return string(b)
}

func schemaSpec(t testing.TB, file string) (*constraint.Spec, *check.Schema) {
	t.Helper()
	doc, err := os.ReadFile("../constraint/testdata/schemas/" + file)
	if err != nil {
		t.Fatal(err)
	}
	g, err := compile.JSONSchema(doc)
	if err != nil {
		t.Fatal(err)
	}
	spec, err := constraint.NewSpec("json_schema", doc, g)
	if err != nil {
		t.Fatal(err)
	}
	chk, err := check.NewSchema(doc)
	if err != nil {
		t.Fatal(err)
	}
	return spec, chk
}

// TestConstrainedChoicesValid: n sampled choices (forked from one prompt
// at temperature 1, so each fork's constraint state must be its own)
// all produce JSON that validates, within max_tokens, and end with
// "stop" when the object closes.
func TestConstrainedChoicesValid(t *testing.T) {
	r := newRig(t, 1024, Config{MaxRunning: 16, MaxQueue: 16, ChunkedPrefill: 64})
	r.e.cfg.Constraints = nativeRunner(t, r)
	for _, file := range []string{"04-object.json", "10-nested.json", "16-decimal-bounds.json"} {
		spec, chk := schemaSpec(t, file)
		s, err := r.e.Submit(context.Background(), Request{Prompt: []int32{1, 50, 60, 70}, MaxTokens: 120, N: 6,
			Sampling: SamplingParams{Temperature: 1}, Constraint: spec})
		if err != nil {
			t.Fatal(err)
		}
		byChoice := map[int][]int32{}
		reasons := map[int]string{}
		for ev := range s.Events {
			switch {
			case ev.Err != nil:
				t.Fatalf("%s choice %d: %v", file, ev.Choice, ev.Err)
			case ev.Done:
				reasons[ev.Choice] = ev.FinishReason
			default:
				byChoice[ev.Choice] = append(byChoice[ev.Choice], ev.Token)
			}
		}
		if len(byChoice) != 6 {
			t.Fatalf("%s: %d choices", file, len(byChoice))
		}
		distinct := map[string]bool{}
		for c, toks := range byChoice {
			out := text(r, toks)
			distinct[out] = true
			if err := chk.Check(out); err != nil {
				t.Errorf("%s choice %d (%s) %q: %v", file, c, reasons[c], out, err)
			}
		}
		if len(distinct) < 2 {
			t.Errorf("%s: the 6 sampled choices are all the same", file)
		}
	}
}

// TestConstrainedGreedyAndSpecialTokens: a greedy request under a choice
// constraint produces one of the choices, and with ignore_eos still ends
// when nothing more can follow.
func TestConstrainedGreedyAndSpecialTokens(t *testing.T) {
	r := newRig(t, 256, Config{MaxRunning: 4, MaxQueue: 4, ChunkedPrefill: 64})
	r.e.cfg.Constraints = nativeRunner(t, r)
	g, err := compile.Choice([]string{"alpha", "beta gamma", "δέλτα"})
	if err != nil {
		t.Fatal(err)
	}
	spec, err := constraint.NewSpec("choice", nil, g)
	if err != nil {
		t.Fatal(err)
	}
	for _, ignore := range []bool{false, true} {
		s, err := r.e.Submit(context.Background(), Request{Prompt: []int32{1, 9, 8}, MaxTokens: 40, IgnoreEOS: ignore, Constraint: spec})
		if err != nil {
			t.Fatal(err)
		}
		res := collect(s)
		if res.err != nil {
			t.Fatal(res.err)
		}
		out := text(r, res.tokens)
		if out != "alpha" && out != "beta gamma" && out != "δέλτα" || res.reason != "stop" {
			t.Fatalf("ignore_eos=%v: %q (%s)", ignore, out, res.reason)
		}
	}
}

// TestConstraintRefusals: without a runner a constrained request is a 400
// error; a runner error fails only its own request.
func TestConstraintRefusals(t *testing.T) {
	r := newRig(t, 256, Config{MaxRunning: 4, MaxQueue: 4, ChunkedPrefill: 64})
	spec, _ := schemaSpec(t, "04-object.json")
	_, err := r.e.Submit(context.Background(), Request{Prompt: []int32{1, 2}, MaxTokens: 4, Constraint: spec})
	var ire *InvalidRequestError
	if !errors.As(err, &ire) || ire.Field != "constraint" {
		t.Fatalf("no runner: %v", err)
	}
	r.e.cfg.Constraints = &failingRunner{Native: nativeRunner(t, r), failAfter: 3}
	bad, err := r.e.Submit(context.Background(), Request{Prompt: []int32{1, 2}, MaxTokens: 30, Constraint: spec})
	if err != nil {
		t.Fatal(err)
	}
	good, err := r.e.Submit(context.Background(), Request{Prompt: []int32{1, 3}, MaxTokens: 10, IgnoreEOS: true})
	if err != nil {
		t.Fatal(err)
	}
	if res := collect(bad); !errors.Is(res.err, errRunner) {
		t.Fatalf("constrained request: %v", res.err)
	}
	if res := collect(good); res.err != nil || len(res.tokens) != 10 {
		t.Fatalf("unconstrained neighbour: %d tokens, %v", len(res.tokens), res.err)
	}
}

var errRunner = errors.New("runner exploded")

// failingRunner fails every row after failAfter steps.
type failingRunner struct {
	*constraint.Native
	mu        sync.Mutex
	steps     int
	failAfter int
}

func (f *failingRunner) Step(ctx context.Context, rows []constraint.Row) {
	f.Native.Step(ctx, rows)
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.steps++; f.steps > f.failAfter {
		for i := range rows {
			rows[i].Err = errRunner
		}
	}
}

// TestConstrainedStreamsSurviveSamplerSwaps: while constrained streams
// sample with the standard policy plugin, the policy is swapped ten times
// (and two broken uploads refused); every output still validates.
func TestConstrainedStreamsSurviveSamplerSwaps(t *testing.T) {
	reg := samplers(t)
	r := newRig(t, 2048, Config{MaxRunning: 16, MaxQueue: 32, ChunkedPrefill: 64, Samplers: reg})
	r.e.cfg.Constraints = nativeRunner(t, r)
	spec, chk := schemaSpec(t, "19-ten-properties.json")
	base, err := fs.ReadFile(builtin.FS(), "standard.wasm")
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		// Leave the shared registry with the built-in bytes.
		_ = reg.Swap(context.Background(), "standard", base, "builtin")
	}()
	// The churn starts first; streams start once its first swap is out,
	// so the other nine land while they run.
	first := make(chan struct{})
	var once sync.Once
	done := make(chan error, 1)
	go func() {
		rep, err := samplertest.Churn(context.Background(), samplertest.Plan{
			Name: "standard", Base: base, Swaps: 10, Broken: 2, Interval: 20 * time.Millisecond,
			Swap: func(ctx context.Context, name string, wasm []byte) error {
				return reg.Swap(ctx, name, wasm, "upload")
			},
			OnSwap: func(string) { once.Do(func() { close(first) }) },
		})
		if err == nil && len(rep.Versions) != 10 {
			t.Errorf("churn report %+v", rep)
		}
		once.Do(func() { close(first) })
		done <- err
	}()
	<-first
	var streams []*Stream
	for i := range 12 {
		s, err := r.e.Submit(context.Background(), Request{Prompt: []int32{1, int32(40 + i), 77}, MaxTokens: 160,
			Sampler: "standard", Sampling: SamplingParams{Temperature: 1}, Constraint: spec})
		if err != nil {
			t.Fatal(err)
		}
		streams = append(streams, s)
	}
	versions := map[string]bool{}
	for i, s := range streams {
		var toks []int32
		for ev := range s.Events {
			if ev.Err != nil {
				t.Fatalf("stream %d: %v", i, ev.Err)
			}
			if !ev.Done {
				toks = append(toks, ev.Token)
				versions[ev.SamplerVersion] = true
			}
		}
		if out := text(r, toks); chk.Check(out) != nil {
			t.Errorf("stream %d %q: %v", i, out, chk.Check(out))
		}
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if len(versions) < 2 {
		t.Fatalf("streams saw %d sampler versions: no swap landed mid-stream", len(versions))
	}
	t.Logf("constrained streams saw %d sampler versions", len(versions))
}
