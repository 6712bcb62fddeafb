package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"github.com/kvhost/kvhost/host/sampling"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvhost/kvhost/host/alloc"
	"github.com/kvhost/kvhost/host/device"
	"github.com/kvhost/kvhost/host/device/cpu"
	"github.com/kvhost/kvhost/host/kv"
	"github.com/kvhost/kvhost/host/kv/kvtest"
	"github.com/kvhost/kvhost/host/model"
	"github.com/kvhost/kvhost/host/model/synth"
	"github.com/kvhost/kvhost/sdk"
)

var tinyOnce struct {
	sync.Once
	path string
	err  error
}

// tinyModel writes the generated tiny model once per test binary.
func tinyModel(t testing.TB) string {
	tinyOnce.Do(func() {
		spec, err := synth.Preset("tiny", "f32")
		if err != nil {
			tinyOnce.err = err
			return
		}
		dir, err := os.MkdirTemp("", "kvhost-engine-test")
		if err != nil {
			tinyOnce.err = err
			return
		}
		var buf bytes.Buffer
		if err := synth.Write(&buf, spec, nil); err != nil {
			tinyOnce.err = err
			return
		}
		tinyOnce.path = filepath.Join(dir, "tiny.gguf")
		tinyOnce.err = os.WriteFile(tinyOnce.path, buf.Bytes(), 0o644)
	})
	if tinyOnce.err != nil {
		t.Fatal(tinyOnce.err)
	}
	return tinyOnce.path
}

type rig struct {
	dev *cpu.Device
	// reserved pages are held outside any request (the graphs' padding page)
	reserved int
	e        *Engine
	m        *model.Model
	pools    *kv.Set  // declared by the mha configurator's arithmetic
	pool     *kv.Pool // its one token pool
	act      *alloc.Allocator
}

func newRig(t testing.TB, pages int, cfg Config) *rig {
	t.Helper()
	return newRigModel(t, tinyModel(t), pages, cfg)
}

// newRigModel is newRig over the model file at path.
func newRigModel(t testing.TB, path string, pages int, cfg Config) *rig {
	t.Helper()
	dev, err := cpu.New(device.Options{MemoryBytes: 1 << 30, Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	r := &rig{dev: dev, act: alloc.New("caching", dev)}
	r.m, err = model.Load(path, model.Options{Device: dev, Weights: alloc.NewDirect("weights", dev), Activations: r.act})
	if err != nil {
		t.Fatal(err)
	}
	c := r.m.Config
	r.pools = kvtest.MHA(t, alloc.NewDirect("kv", dev), c.KVNeeds(), sdk.KVFP32, 4, pages)
	r.pool = r.pools.TokenPools()[0]
	if cfg.Graphs == graphsWanted {
		g, err := r.m.CaptureDecodeGraphs(r.pools, []int{1, 2, 4, 8, 16})
		if err != nil {
			t.Fatal(err)
		}
		cfg.Graphs = g
		r.reserved = 1
	}
	r.e, err = New(cfg, r.m, r.pools, c, r.m.Tokenizer.EOG)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = r.e.Close(ctx)
		dev.Close()
	})
	return r
}

type result struct {
	tokens []int32
	reason string
	err    error
}

func collect(s *Stream) result {
	var r result
	for ev := range s.Events {
		switch {
		case ev.Err != nil:
			r.err = ev.Err
		case ev.Done:
			r.reason = ev.FinishReason
		default:
			r.tokens = append(r.tokens, ev.Token)
		}
	}
	return r
}

func prompts(n int) [][]int32 {
	var out [][]int32
	for i := 0; i < n; i++ {
		p := []int32{1}
		for j := 0; j < 3+i*5%23; j++ {
			p = append(p, int32(100+(i*37+j*11)%3000))
		}
		out = append(out, p)
	}
	return out
}

// TestConcurrentEqualsSequential: 16 concurrent greedy requests each equal
// their own run alone, token for token.
func TestConcurrentEqualsSequential(t *testing.T) {
	cfg := Config{MaxRunning: 16, MaxQueue: 64, ChunkedPrefill: 16}
	r := newRig(t, 512, cfg)
	ps := prompts(16)
	want := make([]result, len(ps))
	for i, p := range ps {
		s, err := r.e.Submit(context.Background(), Request{Prompt: p, MaxTokens: 24, IgnoreEOS: true})
		if err != nil {
			t.Fatal(err)
		}
		want[i] = collect(s)
		if want[i].err != nil || len(want[i].tokens) != 24 || want[i].reason != "length" {
			t.Fatalf("sequential %d: %+v", i, want[i])
		}
	}
	got := make([]result, len(ps))
	var wg sync.WaitGroup
	for i, p := range ps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := r.e.Submit(context.Background(), Request{Prompt: p, MaxTokens: 24, IgnoreEOS: true})
			if err != nil {
				got[i].err = err
				return
			}
			got[i] = collect(s)
		}()
	}
	wg.Wait()
	distinct := map[string]bool{}
	for i := range ps {
		if got[i].err != nil {
			t.Fatalf("request %d: %v", i, got[i].err)
		}
		if fmt.Sprint(got[i].tokens) != fmt.Sprint(want[i].tokens) {
			t.Fatalf("request %d: concurrent %v != sequential %v", i, got[i].tokens, want[i].tokens)
		}
		distinct[fmt.Sprint(got[i].tokens)] = true
	}
	if len(distinct) < 8 {
		t.Fatalf("only %d distinct continuations for 16 prompts: output does not depend on context", len(distinct))
	}
	waitIdle(t, r)
}

func waitIdle(t *testing.T, r *rig) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		st := r.e.Stats()
		if st.Running == 0 && st.Waiting == 0 && st.KVPagesFree == st.KVPagesTotal-r.reserved {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("engine not idle: %+v", st)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestPreemptionLosesNothing: a pool too small for all requests at once
// forces preemption; every request still completes with its solo output.
func TestPreemptionLosesNothing(t *testing.T) {
	r := newRig(t, 24, Config{MaxRunning: 8, MaxQueue: 64, ChunkedPrefill: 32}) // 96 token slots
	ps := prompts(8)
	solo := make([][]int32, len(ps))
	for i, p := range ps {
		s, err := r.e.Submit(context.Background(), Request{Prompt: p, MaxTokens: 20, IgnoreEOS: true})
		if err != nil {
			t.Fatal(err)
		}
		res := collect(s)
		if res.err != nil {
			t.Fatal(res.err)
		}
		solo[i] = res.tokens
	}
	var wg sync.WaitGroup
	got := make([]result, len(ps))
	for i, p := range ps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := r.e.Submit(context.Background(), Request{Prompt: p, MaxTokens: 20, IgnoreEOS: true})
			if err != nil {
				got[i].err = err
				return
			}
			got[i] = collect(s)
		}()
	}
	wg.Wait()
	for i := range ps {
		if got[i].err != nil || fmt.Sprint(got[i].tokens) != fmt.Sprint(solo[i]) {
			t.Fatalf("request %d: %+v, want %v", i, got[i], solo[i])
		}
	}
	if r.e.Stats().Preemptions == 0 {
		t.Fatal("the pool was too small for all requests, yet nothing was preempted")
	}
	waitIdle(t, r)
}

func TestCancelFreesPages(t *testing.T) {
	r := newRig(t, 256, Config{MaxRunning: 4, MaxQueue: 8, ChunkedPrefill: 64})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s, err := r.e.Submit(ctx, Request{Prompt: prompts(3)[2], MaxTokens: 500, IgnoreEOS: true})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for ev := range s.Events {
		if ev.Err != nil {
			break
		}
		n++
		if n == 3 {
			cancel()
		}
	}
	if n >= 500 {
		t.Fatal("cancel did not stop the request")
	}
	waitIdle(t, r)
}

func TestSubmitValidation(t *testing.T) {
	r := newRig(t, 64, Config{MaxRunning: 1, MaxQueue: 0, ChunkedPrefill: 64})
	long := make([]int32, r.m.Config.ContextLen)
	tests := []struct {
		name  string
		req   Request
		field string
	}{
		{"empty prompt", Request{MaxTokens: 1}, "prompt"},
		{"token out of vocabulary", Request{Prompt: []int32{1, 99999}, MaxTokens: 1}, "prompt"},
		{"prompt fills the context", Request{Prompt: long, MaxTokens: 1}, "prompt"},
		{"zero max tokens", Request{Prompt: []int32{1}, MaxTokens: 0}, "max_tokens"},
		{"past the context", Request{Prompt: []int32{1, 2}, MaxTokens: r.m.Config.ContextLen}, "max_tokens"},
		{"more than the pool", Request{Prompt: []int32{1, 2}, MaxTokens: 300}, "max_tokens"},
		{"bad temperature", Request{Prompt: []int32{1}, MaxTokens: 1, Sampling: SamplingParams{Temperature: -1}}, "temperature"},
		{"bad frequency penalty", Request{Prompt: []int32{1}, MaxTokens: 1, Sampling: SamplingParams{FrequencyPenalty: 2.5}}, "frequency_penalty"},
		{"bad repetition penalty", Request{Prompt: []int32{1}, MaxTokens: 1, Sampling: SamplingParams{RepetitionPenalty: -1}}, "repetition_penalty"},
		{"bias out of vocabulary", Request{Prompt: []int32{1}, MaxTokens: 1, Sampling: SamplingParams{LogitBias: []sampling.TokenBias{{Token: 99999, Bias: 1}}}}, "logit_bias"},
	}
	for _, tt := range tests {
		_, err := r.e.Submit(context.Background(), tt.req)
		var ire *InvalidRequestError
		if !errors.As(err, &ire) || ire.Field != tt.field {
			t.Errorf("%s: got %v, want an invalid %s", tt.name, err, tt.field)
		}
	}
}

func TestQueueFull(t *testing.T) {
	r := newRig(t, 256, Config{MaxRunning: 1, MaxQueue: 1, ChunkedPrefill: 64})
	var streams []*Stream
	var full error
	for i := 0; i < 10 && full == nil; i++ {
		s, err := r.e.Submit(context.Background(), Request{Prompt: []int32{1, 2, 3}, MaxTokens: 200, IgnoreEOS: true})
		if err != nil {
			full = err
			break
		}
		streams = append(streams, s)
	}
	if !errors.Is(full, ErrQueueFull) {
		t.Fatalf("want ErrQueueFull, got %v", full)
	}
	for _, s := range streams {
		if res := collect(s); res.err != nil {
			t.Fatal(res.err)
		}
	}
	waitIdle(t, r)
}

func TestSeededSamplingReproducible(t *testing.T) {
	r := newRig(t, 256, Config{MaxRunning: 8, MaxQueue: 8, ChunkedPrefill: 64})
	seed := uint64(1234)
	run := func(extra bool) []int32 {
		var noise *Stream
		if extra {
			noise, _ = r.e.Submit(context.Background(), Request{Prompt: []int32{1, 5, 6}, MaxTokens: 30, IgnoreEOS: true, Sampling: SamplingParams{Temperature: 1}})
		}
		s, err := r.e.Submit(context.Background(), Request{Prompt: []int32{1, 9, 10, 11}, MaxTokens: 30, IgnoreEOS: true, Sampling: SamplingParams{Temperature: 0.9, TopP: 0.95, Seed: &seed}})
		if err != nil {
			t.Fatal(err)
		}
		res := collect(s)
		if noise != nil {
			collect(noise)
		}
		return res.tokens
	}
	a, b := run(false), run(true)
	if fmt.Sprint(a) != fmt.Sprint(b) {
		t.Fatalf("same seed, different batch: %v vs %v", a, b)
	}
}

func TestShutdownEndsStreams(t *testing.T) {
	r := newRig(t, 256, Config{MaxRunning: 2, MaxQueue: 8, ChunkedPrefill: 64})
	s, err := r.e.Submit(context.Background(), Request{Prompt: []int32{1, 2, 3}, MaxTokens: 900, IgnoreEOS: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := r.e.Close(ctx); err != nil {
		t.Fatal(err)
	}
	res := collect(s)
	if !errors.Is(res.err, ErrShuttingDown) && res.reason == "" {
		t.Fatalf("stream not ended: %+v", res)
	}
	if _, err := r.e.Submit(context.Background(), Request{Prompt: []int32{1}, MaxTokens: 1}); !errors.Is(err, ErrShuttingDown) {
		t.Fatalf("submit after close: %v", err)
	}
}

// TestPromptLogprobsChunked: prompt logprobs computed across prefill chunks
// equal a direct log-softmax over one unchunked forward.
func TestPromptLogprobsChunked(t *testing.T) {
	r := newRig(t, 256, Config{MaxRunning: 4, MaxQueue: 8, ChunkedPrefill: 5})
	prompt := prompts(12)[11]
	s, err := r.e.Submit(context.Background(), Request{Prompt: prompt, MaxTokens: 2, IgnoreEOS: true,
		PromptLogprobs: true, PromptLogprobStart: 3, PromptTopLogprobs: 2})
	if err != nil {
		t.Fatal(err)
	}
	var got []PromptLogprob
	for ev := range s.Events {
		if ev.Err != nil {
			t.Fatal(ev.Err)
		}
		if len(ev.Prompt) > 0 {
			got = ev.Prompt
		}
	}
	waitIdle(t, r)
	if len(got) != len(prompt)-3 {
		t.Fatalf("%d prompt logprobs, want %d", len(got), len(prompt)-3)
	}
	// Reference: one forward with every row's logits.
	pages, err := r.pool.Grow(nil, len(prompt))
	if err != nil {
		t.Fatal(err)
	}
	defer r.pool.Release(pages)
	V := r.m.Config.Vocab
	logits := make([]float32, len(prompt)*V)
	if err := r.m.Forward(r.pools, []model.Seq{{Tokens: prompt, Pages: [][]int32{pages}, Slots: []int32{}, LogitRows: len(prompt)}}, logits); err != nil {
		t.Fatal(err)
	}
	for _, pl := range got {
		row := logits[(pl.Index-1)*V : pl.Index*V]
		var mx float64 = -1e300
		for _, v := range row {
			mx = max(mx, float64(v))
		}
		var sum float64
		for _, v := range row {
			sum += math.Exp(float64(v) - mx)
		}
		want := float64(row[prompt[pl.Index]]) - mx - math.Log(sum)
		if pl.Token != prompt[pl.Index] || math.Abs(float64(pl.Logprob)-want) > 1e-4 || len(pl.Top) != 2 {
			t.Fatalf("index %d: %+v, want logprob %v", pl.Index, pl, want)
		}
	}
}

// TestNChoicesShareThePrompt: n=3 choices fork after prefill, share the
// prompt's pages copy-on-write, and choice c equals a single request seeded
// seed + c·φ — so sharing corrupted nothing.
func TestNChoicesShareThePrompt(t *testing.T) {
	r := newRig(t, 256, Config{MaxRunning: 8, MaxQueue: 8, ChunkedPrefill: 64})
	prompt := prompts(7)[6] // not a multiple of the page size: the last page is shared and partial
	if len(prompt)%4 == 0 {
		prompt = append(prompt, 77)
	}
	seed := uint64(99)
	params := SamplingParams{Temperature: 1.2, Seed: &seed}
	s, err := r.e.Submit(context.Background(), Request{Prompt: prompt, MaxTokens: 12, IgnoreEOS: true, N: 3, Sampling: params})
	if err != nil {
		t.Fatal(err)
	}
	choices := map[int][]int32{}
	done := map[int]bool{}
	for ev := range s.Events {
		if ev.Err != nil {
			t.Fatal(ev.Err)
		}
		if ev.Done {
			done[ev.Choice] = true
			continue
		}
		choices[ev.Choice] = append(choices[ev.Choice], ev.Token)
	}
	if len(done) != 3 || len(choices) != 3 {
		t.Fatalf("choices %v done %v", choices, done)
	}
	for c := 0; c < 3; c++ {
		cs := seed + uint64(c)*0x9e3779b97f4a7c15
		one, err := r.e.Submit(context.Background(), Request{Prompt: prompt, MaxTokens: 12, IgnoreEOS: true,
			Sampling: SamplingParams{Temperature: 1.2, Seed: &cs}})
		if err != nil {
			t.Fatal(err)
		}
		res := collect(one)
		if fmt.Sprint(res.tokens) != fmt.Sprint(choices[c]) {
			t.Fatalf("choice %d: %v, alone %v", c, choices[c], res.tokens)
		}
	}
	if fmt.Sprint(choices[0]) == fmt.Sprint(choices[1]) && fmt.Sprint(choices[1]) == fmt.Sprint(choices[2]) {
		t.Fatal("all choices identical at temperature 1.2")
	}
	waitIdle(t, r)
}

// graphsWanted asks newRig to capture decode graphs for the engine.
var graphsWanted GraphRunner = wantGraphs{}

type wantGraphs struct{}

func (wantGraphs) Run([]model.Seq, []float32) (bool, error) { return false, nil }

// TestGraphsMatchEager: the same concurrent greedy workload through captured
// decode graphs gives every request the tokens of the eager engine.
func TestGraphsMatchEager(t *testing.T) {
	ps := prompts(12)
	run := func(cfg Config) ([]result, Stats) {
		r := newRig(t, 512, cfg)
		out := make([]result, len(ps))
		var wg sync.WaitGroup
		for i, p := range ps {
			wg.Add(1)
			go func() {
				defer wg.Done()
				s, err := r.e.Submit(context.Background(), Request{Prompt: p, MaxTokens: 16, IgnoreEOS: true})
				if err != nil {
					out[i].err = err
					return
				}
				out[i] = collect(s)
			}()
		}
		wg.Wait()
		waitIdle(t, r)
		return out, r.e.Stats()
	}
	eager, _ := run(Config{MaxRunning: 16, MaxQueue: 64, ChunkedPrefill: 32})
	graphed, st := run(Config{MaxRunning: 16, MaxQueue: 64, ChunkedPrefill: 32, Graphs: graphsWanted})
	for i := range ps {
		if eager[i].err != nil || graphed[i].err != nil {
			t.Fatal(eager[i].err, graphed[i].err)
		}
		if fmt.Sprint(eager[i].tokens) != fmt.Sprint(graphed[i].tokens) {
			t.Fatalf("request %d: graphs %v, eager %v", i, graphed[i].tokens, eager[i].tokens)
		}
	}
	if st.GraphSteps == 0 {
		t.Fatalf("no step ran through graphs: %+v", st)
	}
}

// TestOutOfMemoryFailsAlone: a request whose input-logprob logits do not fit
// fails alone with a clear error and a diagnosis naming the knob; requests
// around it complete and every page comes back.
func TestOutOfMemoryFailsAlone(t *testing.T) {
	r := newRig(t, 512, Config{MaxRunning: 8, MaxQueue: 8, ChunkedPrefill: 1024})
	// Leave ~40 MiB free: enough for ordinary forwards, not for 1000 rows of
	// 32000 fp32 logits (128 MB).
	ballast := alloc.NewDirect("ballast", r.dev)
	free, _ := r.dev.MemGetInfo()
	if _, err := ballast.Alloc(free-40<<20, alloc.Context); err != nil {
		t.Fatal(err)
	}
	long := make([]int32, 1000)
	for i := range long {
		long[i] = int32(1 + i*7%3000)
	}
	bad, err := r.e.Submit(context.Background(), Request{Prompt: long, MaxTokens: 4, PromptLogprobs: true})
	if err != nil {
		t.Fatal(err)
	}
	var good []*Stream
	for _, p := range prompts(4) {
		s, err := r.e.Submit(context.Background(), Request{Prompt: p, MaxTokens: 8, IgnoreEOS: true})
		if err != nil {
			t.Fatal(err)
		}
		good = append(good, s)
	}
	res := collect(bad)
	if !errors.Is(res.err, device.ErrOutOfMemory) {
		t.Fatalf("want an out-of-memory error for the logprob request, got %+v", res)
	}
	for i, s := range good {
		if g := collect(s); g.err != nil || len(g.tokens) != 8 {
			t.Fatalf("request %d next to the failing one: %+v", i, g)
		}
	}
	ds := r.e.Diagnoses()
	if len(ds) == 0 {
		t.Fatal("no diagnosis recorded")
	}
	d := ds[len(ds)-1]
	if d.Stage == "" || !d.InputLogprobs || d.Knob != "--logprob-chunk-size" || d.Tokens < 1000 {
		t.Fatalf("diagnosis %+v", d)
	}
	waitIdle(t, r)
}

// TestChunkedPrefillFlatPeak: with chunking, a prompt four times the chunk
// reaches the activation peak of a prompt of one chunk; without chunking
// the long prompt's peak is larger.
func TestChunkedPrefillFlatPeak(t *testing.T) {
	peak := func(chunk, n int) int64 {
		r := newRig(t, 512, Config{MaxRunning: 2, MaxQueue: 2, ChunkedPrefill: chunk})
		base := r.act.Stats().Allocated
		r.act.ResetPeak()
		p := make([]int32, n)
		for i := range p {
			p[i] = int32(1 + i*31%3000)
		}
		s, err := r.e.Submit(context.Background(), Request{Prompt: p, MaxTokens: 1})
		if err != nil {
			t.Fatal(err)
		}
		if res := collect(s); res.err != nil {
			t.Fatal(res.err)
		}
		return r.act.Stats().PeakAllocated - base
	}
	short, long := peak(256, 256), peak(256, 1024)
	if short != long {
		t.Fatalf("chunked: 256-token prompt peaked at %d bytes, 1024-token prompt at %d", short, long)
	}
	if whole := peak(-1, 1024); whole <= long {
		t.Fatalf("unchunked 1024-token prompt peaked at %d, not above the chunked %d", whole, long)
	}
}

// panicky panics inside the forward of any batch holding a poisoned token.
type panicky struct {
	Forwarder
	poison int32
}

func (p panicky) Forward(pools *kv.Set, seqs []model.Seq, logits []float32) error {
	for _, s := range seqs {
		for _, t := range s.Tokens {
			if t == p.poison {
				panic("kernel bug")
			}
		}
	}
	return p.Forwarder.Forward(pools, seqs, logits)
}

// TestPanicFailsOnlyTheStep: a panic inside a forward becomes an error for
// the requests of that step; the engine goroutine survives, frees their
// pages and serves the next requests.
func TestPanicFailsOnlyTheStep(t *testing.T) {
	base := newRig(t, 256, Config{MaxRunning: 4, MaxQueue: 8, ChunkedPrefill: 64})
	e, err := New(Config{MaxRunning: 4, MaxQueue: 8, ChunkedPrefill: 64}, panicky{base.m, 4242}, base.pools, base.m.Config, base.m.Tokenizer.EOG)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(context.Background())
	bad, err := e.Submit(context.Background(), Request{Prompt: []int32{1, 4242, 7}, MaxTokens: 4})
	if err != nil {
		t.Fatal(err)
	}
	res := collect(bad)
	if res.err == nil || !strings.Contains(res.err.Error(), "internal error") {
		t.Fatalf("poisoned request: %+v", res)
	}
	good, err := e.Submit(context.Background(), Request{Prompt: []int32{1, 2, 3}, MaxTokens: 6, IgnoreEOS: true})
	if err != nil {
		t.Fatal(err)
	}
	if res := collect(good); res.err != nil || len(res.tokens) != 6 {
		t.Fatalf("request after the panic: %+v", res)
	}
	deadline := time.Now().Add(5 * time.Second)
	for e.Stats().KVPagesFree != e.Stats().KVPagesTotal {
		if time.Now().After(deadline) {
			t.Fatalf("pages not freed after the panic: %+v", e.Stats())
		}
		time.Sleep(5 * time.Millisecond)
	}
}
