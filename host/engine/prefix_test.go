package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvhost/kvhost/host/alloc"
	"github.com/kvhost/kvhost/host/device"
	"github.com/kvhost/kvhost/host/device/cpu"
	"github.com/kvhost/kvhost/host/kv"
	"github.com/kvhost/kvhost/host/kv/kvtest"
	"github.com/kvhost/kvhost/host/kv/radix"
	"github.com/kvhost/kvhost/host/model"
	"github.com/kvhost/kvhost/internal/testmodels"
	"github.com/kvhost/kvhost/sdk"
)

// guard is a Forwarder that counts the tokens it computes and records any
// write into a page another holder (the prefix cache, a fork) also holds:
// a cached page must never be written.
type guard struct {
	m        *model.Model
	computed atomic.Int64
	mu       sync.Mutex
	bad      []string
	// hold, when set, keeps every forward waiting until it is closed, so a
	// test can queue its whole workload before the first step runs and the
	// schedule does not depend on how fast the submitting goroutine is.
	hold chan struct{}
}

func (g *guard) Kernels() device.Kernels { return g.m.Kernels() }

func (g *guard) Forward(pools *kv.Set, seqs []model.Seq, logits []float32) error {
	if g.hold != nil {
		<-g.hold
	}
	g.scan(pools, seqs)
	return g.m.Forward(pools, seqs, logits)
}

// scan counts the batch's tokens and records writes into shared pages.
func (g *guard) scan(pools *kv.Set, seqs []model.Seq) {
	for _, s := range seqs {
		g.computed.Add(int64(len(s.Tokens)))
		for i, p := range pools.TokenPools() {
			for pos := s.Start; pos < s.Start+len(s.Tokens); pos++ {
				if pg := s.Pages[i][pos/p.PageSize()]; pg == kv.Released || p.Shared(pg) {
					g.mu.Lock()
					g.bad = append(g.bad, fmt.Sprintf("position %d writes page %d of %s, which another holder shares", pos, pg, p.Name()))
					g.mu.Unlock()
				}
			}
		}
	}
}

func (g *guard) check(t *testing.T) {
	t.Helper()
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.bad) > 0 {
		t.Fatalf("%d shared pages written, first: %s", len(g.bad), g.bad[0])
	}
}

// prefixRig is an engine over the model at path with one MHA pool of
// pages pages of 4 tokens, its forwards guarded.
func prefixRig(t *testing.T, path string, pages int, cfg Config) (*Engine, *guard, *kv.Pool) {
	t.Helper()
	dev, err := cpu.New(device.Options{MemoryBytes: 1 << 30, Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	m, err := model.Load(path, model.Options{Device: dev, Weights: alloc.NewDirect("weights", dev), Activations: alloc.New("caching", dev)})
	if err != nil {
		t.Fatal(err)
	}
	pools := windowedSet(t, alloc.NewDirect("kv", dev), m.Config.KVNeeds(), pages)
	g := &guard{m: m}
	e, err := New(cfg, g, pools, m.Config, m.Tokenizer.EOG)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = e.Close(ctx)
		dev.Close()
	})
	return e, g, pools.TokenPools()[0]
}

// windowedSet is the pools the swa configurator declares for needs (a
// sliding-window pool for the windowed layers, beside a full pool for the
// rest, if any), else the mha configurator's full pool, pages of 4 tokens,
// pages pages in each.
func windowedSet(t *testing.T, a *alloc.Direct, needs []kv.LayerNeed, pages int) *kv.Set {
	t.Helper()
	w, all := 0, true
	for _, n := range needs {
		w = max(w, n.Window)
		all = all && n.Window > 0
	}
	if w == 0 {
		return kvtest.MHA(t, a, needs, sdk.KVFP32, 4, pages)
	}
	decl, err := kvtest.DeclareMHA(needs, sdk.KVFP32, 4)
	if err != nil {
		t.Fatal(err)
	}
	win := 0
	if !all {
		decl, win = kvtest.Split(decl, func(l int) bool { return needs[l].Window > 0 }), 1
	}
	decl[win].Kind, decl[win].Window = sdk.SlidingWindow, int64(w)
	return kvtest.Set(t, a, decl, needs, pages)
}

// sharedPrompts is a chat-like workload: three system prompts (one ending
// mid-block), each followed by several user turns, some of them extending
// an earlier turn (a multi-turn conversation), in vocabulary [lo, lo+span).
func sharedPrompts(lo, span int32) [][]int32 {
	systems := [][]int32{make([]int32, 37), make([]int32, 22), make([]int32, 50)}
	for s := range systems {
		for j := range systems[s] {
			systems[s][j] = lo + int32((s*131+j*17)%int(span))
		}
		systems[s][0] = 1
	}
	var out [][]int32
	for u := range 12 {
		p := append([]int32(nil), systems[u%3]...)
		for j := 0; j < 3+u%5; j++ {
			p = append(p, lo+int32((u*53+j*29+7)%int(span)))
		}
		out = append(out, p)
		if u%4 == 3 { // the next turn of this conversation
			out = append(out, append(append([]int32(nil), p...), lo+5, lo+9, lo+int32(u)))
		}
	}
	return out
}

func prefixRequests(ps [][]int32) []Request {
	var reqs []Request
	for i, p := range ps {
		r := Request{Prompt: p, MaxTokens: 10, IgnoreEOS: true}
		if i%5 == 2 {
			r.N = 3 // greedy choices: equal, and forks of a cached prefix
		}
		reqs = append(reqs, r)
	}
	return reqs
}

// cacheFree waits until the engine is idle and every page is free or held
// by the prefix cache alone, then resets the cache and checks that every
// page came back.
func cacheFree(t *testing.T, e *Engine, pool *kv.Pool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		st := e.Stats()
		cached := 0
		if st.Prefix != nil {
			cached = st.Prefix.Pages[0]
			if st.Prefix.Evictable[0] != cached {
				t.Fatalf("idle, yet %d of %d cached pages are locked", cached-st.Prefix.Evictable[0], cached)
			}
		}
		if st.Running == 0 && st.Waiting == 0 && pool.FreePages()+cached == pool.Pages() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("pages neither free nor cached: free %d, cached %d, of %d", pool.FreePages(), cached, pool.Pages())
		}
	}
	if e.cache == nil {
		return
	}
	if err := e.ResetPrefixCache(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st := e.Stats(); pool.FreePages() != pool.Pages() || st.Prefix.Nodes != 0 || st.Prefix.Tokens != 0 {
		t.Fatalf("after the reset: free %d of %d, cache %+v", pool.FreePages(), pool.Pages(), st.Prefix)
	}
}

// TestPrefixCacheEqualsRecompute is the differential test: greedy outputs
// with the prefix cache equal those without, token for token, over a
// workload sharing system prompts (hits ending mid-page, multi-turn
// extensions, n = 3 forks), with chunked prefill and a pool small enough to
// evict cached prefixes and preempt; no cached page is ever written; the
// cache saves prefill work; every page comes back after a reset.
func TestPrefixCacheEqualsRecompute(t *testing.T) {
	models := []struct {
		name   string
		path   string
		lo     int32
		pages  int
		policy Policy
	}{
		{"gen-model tiny", tinyModel(t), 100, 36, FCFS},
		{"gen-model tiny, lpm", tinyModel(t), 100, 26, LPM},
		{"stories260K", testmodels.MustStories260K(t), 3, 36, FCFS},
		// MLA's latent pool (one row per token) and routed experts
		{"gen-model deepseek3 tiny, latent pool", archModel(t, "deepseek3"), 100, 36, FCFS},
		{"gen-model qwen3moe tiny", archModel(t, "qwen3moe"), 100, 28, LPM},
		// Window pools (16 tokens; pages of 4): Gemma 2 beside a full
		// pool, Mistral alone (every layer slides); prompts of 25 to 57
		// tokens decode past the window, so sequences trim their windows,
		// give up their prefixes' window pages and the cache punches them.
		{"gen-model gemma2 tiny, window pool", archModel(t, "gemma2"), 100, 36, FCFS},
		// 22 pages: the cache preempts 1–2 times on every schedule; at 24
		// it did on some (a full make test under -race saw none).
		{"gen-model mistral tiny, window pool alone", archModel(t, "mistral"), 100, 22, LPM},
	}
	for _, mc := range models {
		t.Run(mc.name, func(t *testing.T) {
			reqs := prefixRequests(sharedPrompts(mc.lo, 250))
			base := Config{MaxRunning: 4, MaxQueue: 64, ChunkedPrefill: 8}
			off, goff, poff := prefixRig(t, mc.path, mc.pages, base)
			want := runHeld(t, off, goff, reqs)
			on := base
			on.PrefixCache, on.Policy = true, mc.policy
			e, g, pool := prefixRig(t, mc.path, mc.pages, on)
			got := runHeld(t, e, g, reqs)
			distinct := map[string]bool{}
			for i := range want {
				for c := range want[i] {
					if want[i][c].err != nil || len(want[i][c].tokens) != 10 {
						t.Fatalf("without the cache, request %d choice %d: %+v", i, c, want[i][c])
					}
					distinct[fmt.Sprint(want[i][c].tokens)] = true
				}
				if fmt.Sprint(got[i]) != fmt.Sprint(want[i]) {
					t.Fatalf("request %d: with the cache %v, without %v", i, got[i], want[i])
				}
			}
			if len(distinct) < len(reqs)/2 {
				t.Fatalf("only %d distinct outputs for %d requests: output does not depend on the prompt", len(distinct), len(reqs))
			}
			g.check(t)
			st := e.Stats()
			if st.Prefix == nil || st.Prefix.Hits == 0 || st.Prefix.Queries == 0 {
				t.Fatalf("no prefix hits on a shared-prefix workload: %+v", st.Prefix)
			}
			if st.Preemptions == 0 {
				t.Fatal("the pool was meant to be small enough to preempt")
			}
			saved := goff.computed.Load() - g.computed.Load()
			if saved <= 0 {
				t.Fatalf("the cache computed %d tokens, recomputing %d", g.computed.Load(), goff.computed.Load())
			}
			t.Logf("computed %d tokens with the cache, %d without (%.0f%% saved); hits %d of %d queried tokens; preemptions %d (off: %d)",
				g.computed.Load(), goff.computed.Load(), 100*float64(saved)/float64(goff.computed.Load()), st.Prefix.Hits, st.Prefix.Queries, st.Preemptions, off.Stats().Preemptions)
			cacheFree(t, e, pool)
			cacheFree(t, off, poff)
		})
	}
}

// runHeld is runAll with every request queued before the first forward
// runs: the whole workload competes for the pool from the first step, so
// preemption and eviction happen on any machine, fast or slow.
func runHeld(t *testing.T, e *Engine, g *guard, reqs []Request) [][]result {
	t.Helper()
	g.hold = make(chan struct{}) // set before the first Submit, so the engine sees it
	release := sync.OnceFunc(func() { close(g.hold) })
	defer release() // a failed Submit must not leave the engine waiting
	return runAllAfter(t, e, reqs, release)
}

// TestPrefixCacheHitSkipsPrefill: a request repeating a finished one's
// prompt computes only the tokens past the cached whole blocks, reports
// them as cached tokens, and gives the same output.
func TestPrefixCacheHitSkipsPrefill(t *testing.T) {
	e, g, pool := prefixRig(t, tinyModel(t), 64, Config{MaxRunning: 4, MaxQueue: 8, ChunkedPrefill: 16, PrefixCache: true})
	prompt := sharedPrompts(100, 250)[0] // 40 tokens
	first := runAllEvents(t, e, Request{Prompt: prompt, MaxTokens: 6, IgnoreEOS: true})
	before := g.computed.Load()
	second := runAllEvents(t, e, Request{Prompt: prompt, MaxTokens: 6, IgnoreEOS: true})
	// The first request cached 40 prompt + 5 generated tokens: 44 in whole
	// blocks of 4; the second matches prompt[:39], so 36 tokens hit and it
	// computes 4 prompt tokens and 5 decodes.
	if n := g.computed.Load() - before; n != 4+5 {
		t.Fatalf("the repeat computed %d tokens, want 9", n)
	}
	if first.cached != 0 || second.cached != 36 || first.prompt != 40 {
		t.Fatalf("cached tokens: first %d, second %d (want 0, 36); prompt %d", first.cached, second.cached, first.prompt)
	}
	if fmt.Sprint(first.tokens) != fmt.Sprint(second.tokens) {
		t.Fatalf("a hit changed the output: %v, first %v", second.tokens, first.tokens)
	}
	g.check(t)
	cacheFree(t, e, pool)
}

type eventsResult struct {
	tokens         []int32
	prompt, cached int
}

// runAllEvents runs one request alone and keeps its usage.
func runAllEvents(t *testing.T, e *Engine, r Request) eventsResult {
	t.Helper()
	s, err := e.Submit(context.Background(), r)
	if err != nil {
		t.Fatal(err)
	}
	var out eventsResult
	for ev := range s.Events {
		switch {
		case ev.Err != nil:
			t.Fatal(ev.Err)
		case ev.Done:
			out.prompt, out.cached = ev.PromptTokens, ev.CachedTokens
		default:
			out.tokens = append(out.tokens, ev.Token)
		}
	}
	return out
}

// TestPrefixCacheEvictsBeforePreempting: with the pool full of cached
// prefixes, new work evicts them (least recently used first) and runs
// without preempting anyone; the most recent prefix survives.
func TestPrefixCacheEvictsBeforePreempting(t *testing.T) {
	e, g, pool := prefixRig(t, tinyModel(t), 24, Config{MaxRunning: 2, MaxQueue: 8, ChunkedPrefill: 32, PrefixCache: true})
	// Five sequential 30-token requests of distinct prompts: each caches 8
	// pages, so the 24-page pool fills with cached prefixes and the later
	// ones must evict the earlier.
	var last []int32
	for i := range 5 {
		p := []int32{1}
		for j := 1; j < 26; j++ {
			p = append(p, int32(200+i*300+j))
		}
		runAllEvents(t, e, Request{Prompt: p, MaxTokens: 6, IgnoreEOS: true})
		last = p
	}
	st := e.Stats()
	if st.Preemptions != 0 || st.Prefix.Pages[0] == 0 || pool.FreePages()+st.Prefix.Pages[0] != pool.Pages() {
		t.Fatalf("preemptions %d, cached pages %d, free %d of %d", st.Preemptions, st.Prefix.Pages[0], pool.FreePages(), pool.Pages())
	}
	if pool.FreePages() >= 8 {
		t.Fatalf("%d pages free: the pool never filled with cached prefixes", pool.FreePages())
	}
	// The last prompt is still cached (LRU kept it).
	r := runAllEvents(t, e, Request{Prompt: last, MaxTokens: 1, IgnoreEOS: true})
	if r.cached != 24 {
		t.Fatalf("the most recent prefix hit %d tokens, want 24", r.cached)
	}
	g.check(t)
	cacheFree(t, e, pool)
}

// TestPrefixCacheResetRefusedWhileLocked: a reset while a running request
// holds a cached prefix is refused with radix.ErrLocked and loses nothing.
func TestPrefixCacheResetRefusedWhileLocked(t *testing.T) {
	e, _, pool := prefixRig(t, tinyModel(t), 64, Config{MaxRunning: 2, MaxQueue: 8, ChunkedPrefill: 16, PrefixCache: true})
	p := sharedPrompts(100, 250)[1]
	s, err := e.Submit(context.Background(), Request{Prompt: p, MaxTokens: 200, IgnoreEOS: true})
	if err != nil {
		t.Fatal(err)
	}
	<-s.Events // prefilled: its prompt is cached and locked
	if err := e.ResetPrefixCache(context.Background()); !errors.Is(err, radix.ErrLocked) {
		t.Fatalf("reset while locked: %v", err)
	}
	n := 1
	for ev := range s.Events {
		if ev.Err != nil {
			t.Fatal(ev.Err)
		}
		if !ev.Done {
			n++
		}
	}
	if n != 200 {
		t.Fatalf("%d tokens after the refused reset, want 200", n)
	}
	cacheFree(t, e, pool)
}

// TestPolicyValidation: the policy's values are named, lpm needs the cache.
func TestPolicyValidation(t *testing.T) {
	base := Config{MaxRunning: 1, ChunkedPrefill: 8}
	for _, tt := range []struct {
		cfg  Config
		want string
	}{
		{Config{MaxRunning: 1, ChunkedPrefill: 8, Policy: "lifo"}, `schedule policy "lifo", want one of [fcfs lpm]`},
		{Config{MaxRunning: 1, ChunkedPrefill: 8, Policy: LPM}, "needs the prefix cache"},
	} {
		if err := tt.cfg.Validate(); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%+v: %v, want %q", tt.cfg, err, tt.want)
		}
	}
	base.Policy, base.PrefixCache = LPM, true
	if err := base.Validate(); err != nil {
		t.Fatal(err)
	}
}

// sink is a KVEvents that keeps the blocks stored and not yet removed.
type sink struct {
	live    map[radix.Digest]bool
	atReset int // live blocks when the cache was reset
	steps   int
	cleared int
	bad     string
}

func (s *sink) Hash(parent *radix.Digest, block []int32) radix.Digest {
	var d radix.Digest
	if parent != nil {
		d = *parent
	}
	for i, t := range block {
		d[(i*4)%32] ^= byte(t)
		d[(i*4+1)%32] += byte(t>>8) + 1
	}
	return d
}

func (s *sink) BlocksStored(parent *radix.Digest, blocks []radix.Digest, tokens []int32) {
	if parent != nil && !s.live[*parent] && s.bad == "" {
		s.bad = "a block stored after a parent that is not cached"
	}
	for _, b := range blocks {
		s.live[b] = true
	}
}

func (s *sink) BlocksRemoved(blocks []radix.Digest) {
	for _, b := range blocks {
		if !s.live[b] && s.bad == "" {
			s.bad = "a block removed that was never stored"
		}
		delete(s.live, b)
	}
}

func (s *sink) AllCleared() {
	s.atReset, s.live, s.cleared = len(s.live), map[radix.Digest]bool{}, s.cleared+1
}
func (s *sink) EndStep() { s.steps++ }

// TestPrefixCacheEvents: the KV events follow the cache exactly: the blocks
// stored and not removed are what it holds, through hits, eviction under a
// small pool and a reset.
func TestPrefixCacheEvents(t *testing.T) {
	ev := &sink{live: map[radix.Digest]bool{}}
	e, _, pool := prefixRig(t, tinyModel(t), 36, Config{MaxRunning: 4, MaxQueue: 64, ChunkedPrefill: 8, PrefixCache: true, KVEvents: ev})
	for _, r := range runAll(t, e, prefixRequests(sharedPrompts(100, 250))) {
		if r[0].err != nil {
			t.Fatal(r[0].err)
		}
	}
	st := e.Stats() // idle: the cache no longer changes
	if err := e.ResetPrefixCache(context.Background()); err != nil {
		t.Fatal(err)
	}
	if ev.bad != "" || ev.cleared != 1 || len(ev.live) != 0 || ev.steps == 0 || st.Prefix.Tokens == 0 {
		t.Fatalf("events: %q, cleared %d, live after the reset %d, steps %d; cached tokens before %d", ev.bad, ev.cleared, len(ev.live), ev.steps, st.Prefix.Tokens)
	}
	if ev.atReset*st.Prefix.Block != st.Prefix.Tokens {
		t.Fatalf("events left %d blocks of %d tokens stored; the cache held %d tokens", ev.atReset, st.Prefix.Block, st.Prefix.Tokens)
	}
	if pool.FreePages() != pool.Pages() {
		t.Fatalf("free %d of %d after the reset", pool.FreePages(), pool.Pages())
	}
	if err := (Config{MaxRunning: 1, ChunkedPrefill: 8, KVEvents: ev}).Validate(); err == nil || !strings.Contains(err.Error(), "need it") {
		t.Fatalf("events without the cache: %v", err)
	}
}

// TestPrefixCacheWindowPool: over a sliding-window pool the cache keeps
// what finished sequences held (their last window of pages) and a repeat
// of a long prompt resumes at its end, where the window's pages are
// cached; no shared page is written, and every page comes back.
func TestPrefixCacheWindowPool(t *testing.T) {
	dev, err := cpu.New(device.Options{MemoryBytes: 64 << 20, Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	needs := kvtest.Uniform(1, 1, 2)
	needs[0].Window = 8
	decl, err := kvtest.DeclareMHA(needs, sdk.KVFP32, 4)
	if err != nil {
		t.Fatal(err)
	}
	decl[0].Kind, decl[0].Window = sdk.SlidingWindow, 8
	pools := kvtest.Set(t, alloc.NewDirect("kv", dev), decl, needs, 32)
	var log strings.Builder
	g := &guardRec{rec: recorder{&log}}
	e, err := New(Config{MaxRunning: 4, MaxQueue: 8, ChunkedPrefill: 4, PrefixCache: true}, g, pools, model.Config{Vocab: 8, ContextLen: 256}, func(int32) bool { return false })
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(context.Background())
	prompt := make([]int32, 41)
	for i := range prompt {
		prompt[i] = int32(1 + i%7)
	}
	first := runAllEvents(t, e, Request{Prompt: prompt, MaxTokens: 3, IgnoreEOS: true})
	second := runAllEvents(t, e, Request{Prompt: prompt, MaxTokens: 3, IgnoreEOS: true})
	// The first sequence ended holding positions 36..43 (its window) and
	// inserted 40 prompt tokens at its prefill's end with pages 8..9 held
	// (positions 32..39): the repeat matches prompt[:40] and resumes at 40,
	// whose window (33..39) those pages cover.
	if first.cached != 0 || second.cached != 40 {
		t.Fatalf("cached tokens: first %d, second %d (want 0, 40)", first.cached, second.cached)
	}
	if fmt.Sprint(first.tokens) != fmt.Sprint(second.tokens) {
		t.Fatalf("outputs differ: %v, %v", first.tokens, second.tokens)
	}
	g.g.check(t)
	cacheFree(t, e, pools.TokenPools()[0])
}

// guardRec is guard over the recorder (no model), for layouts the tiny
// model cannot run.
type guardRec struct {
	rec recorder
	g   guard
}

func (g *guardRec) Forward(pools *kv.Set, seqs []model.Seq, logits []float32) error {
	g.g.scan(pools, seqs)
	return g.rec.Forward(pools, seqs, logits)
}

// TestPrefixCacheOffWithStatePools: a model with a recurrent-state pool
// runs without the cache (no snapshots are taken), and says so in Stats.
func TestPrefixCacheOffWithStatePools(t *testing.T) {
	decl := func(needs []kv.LayerNeed) []sdk.Pool {
		return append(mhaDecl(t)(needs), sdk.Pool{Name: "state", Kind: sdk.RecurrentState, PageSize: 1, BytesPerUnit: 4, Buffers: []sdk.Buffer{
			{Pool: "state", Name: "w", Role: sdk.RoleWorkspace, Layer: -1, Shape: []int64{1}, DType: "int32"}}})
	}
	e, _ := poolsRig(t, decl, 64, 4, Config{MaxRunning: 4, MaxQueue: 8, ChunkedPrefill: 16, PrefixCache: true})
	p := sharedPrompts(100, 250)[0]
	a := runAllEvents(t, e, Request{Prompt: p, MaxTokens: 4, IgnoreEOS: true})
	b := runAllEvents(t, e, Request{Prompt: p, MaxTokens: 4, IgnoreEOS: true})
	if e.cache != nil || e.Stats().Prefix != nil || b.cached != 0 || fmt.Sprint(a.tokens) != fmt.Sprint(b.tokens) {
		t.Fatalf("state pools: cache %v, stats %+v, cached %d", e.cache != nil, e.Stats().Prefix, b.cached)
	}
	if !errors.Is(e.ResetPrefixCache(context.Background()), ErrNoPrefixCache) {
		t.Fatal("reset without a cache")
	}
	allFree(t, e, 0)
}
