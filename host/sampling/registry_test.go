package sampling

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvhost/kvhost/host/plugin"
	"github.com/kvhost/kvhost/host/plugin/wasmtest"
	"github.com/kvhost/kvhost/host/sampling/samplertest"
)

var builtins = []string{"standard", "greedy", "typical", "mirostat", "dry", "xtc", "top-n-sigma"}

func TestMain(m *testing.M) {
	if err := wasmtest.Ensure(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(m.Run())
}

func newRegistry(t testing.TB, opts Options) *Registry {
	t.Helper()
	if opts.Runtime.MaxBatch == 0 {
		opts.Runtime.MaxBatch = 64
	}
	if opts.Builtins == nil {
		// The files TestMain just built, not the copies embedded when this
		// test binary was compiled (which may predate them).
		fsys, err := wasmtest.BuiltinSamplers()
		if err != nil {
			t.Fatal(err)
		}
		opts.Builtins = fsys
	}
	r, err := NewRegistry(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close(context.Background()) })
	return r
}

func mustValidate(t testing.TB, r *Registry, policy string, p map[string]any) Compiled {
	t.Helper()
	c, err := r.ValidateParams(policy, p)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestBuiltinsListed(t *testing.T) {
	r := newRegistry(t, Options{})
	list := r.List()
	if len(list) != len(builtins) {
		t.Fatalf("%d policies listed: %+v", len(list), list)
	}
	for _, info := range list {
		if info.Source != SourceBuiltin || len(info.SHA256) != 64 || !strings.Contains(info.Version, "+") {
			t.Errorf("%+v", info)
		}
	}
}

func TestValidateParams(t *testing.T) {
	r := newRegistry(t, Options{})
	tests := []struct {
		policy string
		params map[string]any
		param  string // "" = valid
	}{
		{"", map[string]any{"temperature": 0.7, "top_p": 0.9}, ""},
		{"standard", map[string]any{"top_k": 40.0, "repetition_penalty": 1.1}, ""},
		{"standard", map[string]any{"top_k": 4.5}, "top_k"},
		{"standard", map[string]any{"temperature": 3.0}, "temperature"},
		{"standard", map[string]any{"typical_p": 0.9}, "typical_p"},
		{"standard", map[string]any{"top_p": "high"}, "top_p"},
		{"typical", map[string]any{"typical_p": 0.9}, ""},
		{"typical", map[string]any{"typical_p": -0.1}, "typical_p"},
		{"greedy", map[string]any{"temperature": 0.5}, "temperature"},
		{"mirostat", map[string]any{"tau": 3.0, "eta": 0.2}, ""},
	}
	for _, tc := range tests {
		_, err := r.ValidateParams(tc.policy, tc.params)
		var pe *ParamError
		switch {
		case tc.param == "" && err != nil:
			t.Errorf("%s %v: %v", tc.policy, tc.params, err)
		case tc.param != "" && (!errors.As(err, &pe) || pe.Param != tc.param):
			t.Errorf("%s %v: err %v, want a *ParamError for %s", tc.policy, tc.params, err, tc.param)
		}
	}
	if _, err := r.ValidateParams("nope", nil); !errors.Is(err, ErrUnknownPolicy) {
		t.Fatalf("unknown policy: %v", err)
	}
}

// batchOf builds n random rows over a vocabulary of v tokens.
func batchOf(n, v int, seed uint64) [][]float32 {
	rng := rand.New(rand.NewPCG(seed, 1))
	rows := make([][]float32, n)
	for i := range rows {
		rows[i] = make([]float32, v)
		for j := range rows[i] {
			rows[i][j] = float32(rng.NormFloat64() * 2.5)
		}
	}
	return rows
}

// TestSeedDeterminism: a sequence's tokens depend only on its seed, step,
// parameters and logits, not on the run, its position or its batch-mates,
// including batches split over several guest calls.
func TestSeedDeterminism(t *testing.T) {
	r := newRegistry(t, Options{Runtime: plugin.Config{MaxBatch: 16}})
	ctx := context.Background()
	for _, policy := range builtins {
		t.Run(policy, func(t *testing.T) {
			c := mustValidate(t, r, policy, nil)
			target := batchOf(1, 500, 9)[0]
			run := func(batch, pos int, fill uint64) []int32 {
				rows := batchOf(batch, 500, fill)
				rows[pos] = target
				seqs := make([]SeqState, batch)
				for i := range seqs {
					seqs[i] = SeqState{Params: c, Seed: fill + uint64(i)}
				}
				seqs[pos].Seed = 77
				out := make([]Choice, batch)
				var toks []int32
				for step := range 12 {
					for i := range seqs {
						seqs[i].Step = uint64(step)
					}
					if err := r.SampleBatch(ctx, policy, rows, seqs, out); err != nil {
						t.Fatal(err)
					}
					toks = append(toks, out[pos].Token)
					for i := range seqs {
						seqs[i].Generated = append(seqs[i].Generated, out[i].Token)
					}
				}
				return toks
			}
			want := run(1, 0, 1)
			for _, c := range []struct{ batch, pos int }{{1, 0}, {5, 3}, {40, 37}} {
				if got := run(c.batch, c.pos, uint64(c.batch)); fmt.Sprint(got) != fmt.Sprint(want) {
					t.Fatalf("batch %d pos %d: %v, alone: %v", c.batch, c.pos, got, want)
				}
			}
		})
	}
}

// TestSwapUnderLoad: callers step continuously while standard is
// replaced 10 times and two broken versions are uploaded: no step fails,
// every step reports a version that was current while it ran, and after
// each swap returns, new steps report the new version.
func TestSwapUnderLoad(t *testing.T) {
	r := newRegistry(t, Options{Runtime: plugin.Config{MaxBatch: 32}})
	ctx := context.Background()
	base, err := wasmtest.Builtin("standard")
	if err != nil {
		t.Fatal(err)
	}
	var current atomic.Pointer[string]
	v0 := r.List()[slicesIndex(r.List(), "standard")].Version
	current.Store(&v0)
	// known holds the sha256 prefixes of every version that may serve. A
	// version is added before its Swap, since steps can see it as soon as
	// Swap publishes it — before Churn's OnSwap runs.
	known := sync.Map{}
	shaOf := func(version string) string { return version[strings.LastIndexByte(version, '+')+1:] }
	known.Store(shaOf(v0), true)
	stop := make(chan struct{})
	var steps, failures atomic.Int64
	var wg sync.WaitGroup
	c := mustValidate(t, r, "standard", map[string]any{"temperature": 0.8})
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rows := batchOf(32, 300, uint64(w))
			seqs := make([]SeqState, 32)
			for i := range seqs {
				seqs[i] = SeqState{Params: c, Seed: uint64(i)}
			}
			out := make([]Choice, 32)
			for {
				select {
				case <-stop:
					return
				default:
				}
				before := *current.Load()
				if err := r.SampleBatch(ctx, "standard", rows, seqs, out); err != nil {
					failures.Add(1)
					t.Error(err)
					return
				}
				steps.Add(1)
				if _, ok := known.Load(shaOf(out[0].Version)); !ok {
					t.Errorf("step reported unknown version %s (current before: %s)", out[0].Version, before)
				}
			}
		}()
	}
	rep, err := samplertest.Churn(ctx, samplertest.Plan{
		Name: "standard", Base: base, Swaps: 10, Broken: 2, Interval: 5 * time.Millisecond,
		Swap: func(ctx context.Context, name string, wasm []byte) error {
			known.Store(shaOf(samplertest.Version(wasm, "")), true)
			return r.Swap(ctx, name, wasm, SourceUpload)
		},
		OnSwap: func(v string) {
			current.Store(&v)
			// A step that starts now must use v.
			out := make([]Choice, 1)
			if err := r.SampleBatch(ctx, "standard", batchOf(1, 300, 5), []SeqState{{Params: c}}, out); err != nil || out[0].Version != v {
				t.Errorf("after swap: %v, version %q want %q", err, out[0].Version, v)
			}
		},
	})
	time.Sleep(20 * time.Millisecond)
	close(stop)
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Versions) != 10 || len(rep.Refused) != 2 {
		t.Fatalf("report %+v", rep)
	}
	for _, e := range rep.Refused {
		var re *plugin.RefusedError
		if !errors.As(e, &re) {
			t.Errorf("refusal without a reason type: %v", e)
		}
	}
	if failures.Load() != 0 || steps.Load() == 0 {
		t.Fatalf("%d steps, %d failures", steps.Load(), failures.Load())
	}
	if got := r.List()[slicesIndex(r.List(), "standard")]; got.Version != rep.Versions[9] || got.Source != SourceUpload || got.Failures != 0 {
		t.Fatalf("final %+v", got)
	}
	t.Logf("%d steps across 10 swaps and 2 refused uploads", steps.Load())
}

func slicesIndex(list []Info, name string) int {
	for i, in := range list {
		if in.Name == name {
			return i
		}
	}
	return -1
}

func TestSwapRefusals(t *testing.T) {
	r := newRegistry(t, Options{})
	ctx := context.Background()
	base, _ := wasmtest.Builtin("standard")
	before := r.List()[slicesIndex(r.List(), "standard")].Version
	for i, b := range samplertest.Broken(base) {
		if err := r.Swap(ctx, "standard", b, SourceUpload); err == nil {
			t.Fatalf("broken %d accepted", i)
		}
	}
	if err := r.Swap(ctx, "typical", base, SourceUpload); err == nil || !strings.Contains(err.Error(), "not \"typical\"") {
		t.Fatalf("name mismatch: %v", err)
	}
	if err := r.Swap(ctx, "../x", base, SourceUpload); err == nil {
		t.Fatal("bad name accepted")
	}
	if after := r.List()[slicesIndex(r.List(), "standard")].Version; after != before {
		t.Fatalf("version changed from %s to %s after refusals", before, after)
	}
	// The default cannot be removed (every request naming no policy
	// needs it); another policy can, once.
	if err := r.Remove("standard"); !errors.Is(err, ErrDefaultPolicy) || !strings.Contains(err.Error(), "cannot be removed") {
		t.Fatalf("removing the default: %v", err)
	}
	if _, err := r.ValidateParams("standard", nil); err != nil {
		t.Fatalf("the default after a refused Remove: %v", err)
	}
	if err := r.Remove("typical"); err != nil {
		t.Fatal(err)
	}
	if _, err := r.ValidateParams("typical", nil); !errors.Is(err, ErrUnknownPolicy) {
		t.Fatalf("after Remove: %v", err)
	}
	if err := r.Remove("typical"); !errors.Is(err, ErrUnknownPolicy) {
		t.Fatalf("second Remove: %v", err)
	}
}

// TestLoopingPolicyStopped: through the registry, a sampler that loops
// forever fails that step quickly with ErrOutOfFuel; the next step works.
func TestLoopingPolicyStopped(t *testing.T) {
	r := newRegistry(t, Options{NoBuiltins: true})
	ctx := context.Background()
	b, err := wasmtest.HostileC("loop")
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Swap(ctx, "loop", b, SourceUpload); err != nil {
		t.Fatal(err)
	}
	rows := batchOf(4, 100, 3)
	out := make([]Choice, 4)
	spin := []SeqState{{Params: mustValidate(t, r, "loop", map[string]any{"spin": 1})}, {}, {}, {}}
	start := time.Now()
	err = r.SampleBatch(ctx, "loop", rows, spin, out)
	if !errors.Is(err, plugin.ErrOutOfFuel) || time.Since(start) > 2*time.Second {
		t.Fatalf("err %v after %v", err, time.Since(start))
	}
	calm := make([]SeqState, 4)
	if err := r.SampleBatch(ctx, "loop", rows, calm, out); err != nil {
		t.Fatal(err)
	}
	if info := r.List()[0]; info.Failures != 1 || info.Calls != 2 {
		t.Fatalf("%+v", info)
	}
}

func TestWatchFolder(t *testing.T) {
	r := newRegistry(t, Options{})
	dir := t.TempDir()
	base, _ := wasmtest.Builtin("standard")
	v1, _ := samplertest.Variant(base, "5.0.1")
	v2, _ := samplertest.Variant(base, "5.0.2")
	write := func(name string, b []byte, age time.Duration) {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		ts := time.Now().Add(age)
		_ = os.Chtimes(p, ts, ts)
	}
	version := func() Info { return r.List()[slicesIndex(r.List(), "standard")] }
	write("standard.wasm", v1, -time.Hour)
	write("notes.txt", []byte("ignored"), 0)
	stop := r.Watch(context.Background(), dir, 10*time.Millisecond)
	defer stop()
	if got := version(); got.Version != samplertest.Version(v1, "5.0.1") || got.Source != SourceFolder {
		t.Fatalf("after the first scan: %+v", got)
	}
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for !ok() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	write("standard.wasm", v2, 0)
	waitFor("the replaced file", func() bool { return version().Version == samplertest.Version(v2, "5.0.2") })
	write("standard.wasm", samplertest.Broken(base)[1], time.Minute)
	time.Sleep(50 * time.Millisecond)
	if version().Version != samplertest.Version(v2, "5.0.2") {
		t.Fatal("a broken file replaced a working version")
	}
	if err := os.Remove(filepath.Join(dir, "standard.wasm")); err != nil {
		t.Fatal(err)
	}
	waitFor("the built-in to return", func() bool { return version().Source == SourceBuiltin })
	loop, _ := wasmtest.HostileC("loop")
	write("loop.wasm", loop, 0)
	waitFor("a new policy", func() bool { return slicesIndex(r.List(), "loop") >= 0 })
	_ = os.Remove(filepath.Join(dir, "loop.wasm"))
	waitFor("its removal", func() bool { return slicesIndex(r.List(), "loop") < 0 })
}

// TestGreedyIsArgmaxOfAdjusted: greedy returns the argmax after penalties
// and bias, computed here on a copy.
func TestGreedyIsArgmaxOfAdjusted(t *testing.T) {
	r := newRegistry(t, Options{})
	rows := batchOf(8, 1000, 4)
	c := mustValidate(t, r, "greedy", map[string]any{"repetition_penalty": 1.5, "presence_penalty": 0.5})
	seqs := make([]SeqState, 8)
	out := make([]Choice, 8)
	for i := range seqs {
		seqs[i] = SeqState{Params: c, Generated: []int32{int32(i), 5, 5, 999}, Bias: NormalizeBias(map[int32]float32{int32(3 * i): 4, 7: -100})}
	}
	if err := r.SampleBatch(context.Background(), "greedy", rows, seqs, out); err != nil {
		t.Fatal(err)
	}
	for i, row := range rows {
		adj := append([]float32(nil), row...)
		counts := map[int32]int{}
		for _, g := range seqs[i].Generated {
			counts[g]++
		}
		for id, n := range counts {
			l := float64(adj[id])
			if l > 0 {
				l /= 1.5
			} else {
				l *= 1.5
			}
			adj[id] = float32(l - 0.5*float64(min(n, 1)))
		}
		for _, b := range seqs[i].Bias {
			adj[b.Token] += b.Bias
		}
		best := 0
		for j, v := range adj {
			if v > adj[best] {
				best = j
			}
		}
		if out[i].Token != int32(best) {
			t.Fatalf("row %d: greedy %d, reference argmax %d", i, out[i].Token, best)
		}
	}
	if math.IsNaN(float64(out[0].Logprob)) {
		t.Fatal("NaN logprob")
	}
}
