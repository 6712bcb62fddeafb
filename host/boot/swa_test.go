package boot

import (
	"context"
	"fmt"
	"math"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/kvhost/kvhost/configurators/layout"
	"github.com/kvhost/kvhost/host/engine"
	"github.com/kvhost/kvhost/host/ledger"
	"github.com/kvhost/kvhost/host/model/synth"
	"github.com/kvhost/kvhost/sdk"
)

// TestSWAServesPastTheWindow serves generated Gemma 2 and gpt-oss models
// (window 16, pages of 16) on the swa configurator's full and window
// pools, and a generated Mistral on its window pool alone (every layer
// slides over a window smaller than its context, so the swa configurator
// serves it and the mha one declines), Gemma 2 and Mistral with and
// without the prefix cache: four greedy requests with 60-token prompts
// (prefilled in chunks of 16, so the cache caches and locks window pages)
// decoding 200 tokens past the window at once (one with n = 2), in a full
// pool too small for all of them, so the scheduler preempts (Mistral's
// 256-token window pool may or may not, depending on timing); each
// request's tokens equal those of the same request served alone on a
// roomy pool, or do up to a near tie (sameOrNearTie: the batch's float
// sums may flip one; CI's machine flipped gpt-oss's MXFP4 experts); while they run, the window pool holds at most
// (window − 1 + chunk)/page + 2 pages per running request (window + chunk
// tokens: what a prefill chunk needs) beyond what the prefix cache may
// free (CachedPages: unlocked prefixes, and the window pages of locked
// ones that no running window reads, kv/radix window.go; counted as the
// requests' before, 4–12 pages); the ledger balances and every page comes
// back (the prefix cache's aside).
func TestSWAServesPastTheWindow(t *testing.T) {
	for _, tc := range []struct {
		arch   string
		radix  bool
		prompt int
	}{
		// gpt-oss's MXFP4 experts run the one-row kernel alone and the
		// four-row one beside others: near ties flip (sameOrNearTie).
		{"gemma2", false, 60}, {"gpt-oss", false, 60}, {"gemma2", true, 60}, {"mistral", false, 60}, {"mistral", true, 60},
	} {
		arch := tc.arch
		t.Run(fmt.Sprintf("%s/radix=%v", arch, tc.radix), func(t *testing.T) {
			spec, err := synth.ArchPreset(arch, "tiny", "f32")
			if err != nil {
				t.Fatal(err)
			}
			spec.ContextLen = 288 // a full pool of 512 tokens holds one request's context
			path := writeSpec(t, spec)
			reqs := make([]engine.Request, 4)
			for i := range reqs {
				// 60-token prompts, prefilled in chunks of 16: with the
				// prefix cache on, each chunk's whole blocks are cached
				// and locked, window pages included.
				p := []int32{1, int32(40 + i), 300, 301, int32(500 + 7*i)}
				for j := range tc.prompt - 5 {
					p = append(p, int32(9+j)) // 9..13, then more
					if j >= 5 {
						p[len(p)-1] = int32(600 + (j*13+i*7)%300)
					}
				}
				reqs[i] = engine.Request{Prompt: p, MaxTokens: 200, IgnoreEOS: true, Logprobs: true, TopLogprobs: 2}
			}
			reqs[1].N = 2
			alone := func() [][][]step {
				s, err := Build(baseConfig(path, 256<<20), nil, os.Stdout)
				if err != nil {
					t.Fatal(err)
				}
				defer s.Close(context.Background())
				out := make([][][]step, len(reqs))
				for i, r := range reqs {
					out[i] = runSteps(t, s, r)
				}
				return out
			}()
			cfg := baseConfig(path, 256<<20)
			cfg.MaxTotalTokens = 512 // full pool: one 260-token sequence and a half, not five
			pools := 2
			if arch == "mistral" {
				// The window pool alone: 16 pages, where five choices
				// hold 3 each.
				cfg.MaxTotalTokens, pools = 256, 1
			}
			cfg.ChunkedPrefill = 16 // a window pool's sequence holds window + chunk tokens at most
			cfg.DisableRadixCache = !tc.radix
			s, err := Build(cfg, nil, os.Stdout)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close(context.Background())
			var win int
			for i, st := range s.Pools.Stats() {
				if st.Kind == sdk.SlidingWindow {
					win = i
				}
			}
			ws := s.Pools.Stats()[win]
			if ws.Kind != sdk.SlidingWindow || ws.Window != 16 || len(s.Pools.Stats()) != pools {
				t.Fatalf("pools %+v: want %d pools, one of them a 16-token window pool", s.Pools.Stats(), pools)
			}
			pad := 0
			if s.Graphs != nil {
				pad = 1 // the graphs' padding page
			}
			bound := s.Pools.TokenPools()[win].MaxPages(1<<30, cfg.ChunkedPrefill)
			stop := make(chan struct{})
			var worst int
			var wg sync.WaitGroup
			wg.Add(1)
			go func() { // the window pool's pages per running choice
				defer wg.Done()
				for {
					select {
					case <-stop:
						return
					case <-time.After(time.Millisecond):
					}
					es := s.Engine.Stats()
					st := es.Pools[win] // CachedPages: what the prefix cache may free
					if es.Running > 0 {
						worst = max(worst, (st.Pages-st.FreePages-st.CachedPages-pad+es.Running-1)/es.Running)
					}
				}
			}()
			got := make([][][]step, len(reqs))
			var rw sync.WaitGroup
			for i, r := range reqs {
				rw.Add(1)
				go func() { defer rw.Done(); got[i] = runSteps(t, s, r) }()
			}
			rw.Wait()
			close(stop)
			wg.Wait()
			for i := range reqs {
				for c := range got[i] {
					sameOrNearTie(t, fmt.Sprintf("request %d choice %d", i, c), got[i][c], alone[i][c])
				}
			}
			es := s.Engine.Stats()
			if es.Preemptions == 0 && pools == 2 {
				t.Errorf("no preemption with a full pool of %d tokens", cfg.MaxTotalTokens)
			}
			// With the prefix cache, the window pages of a request's cached
			// prefix that its window no longer reads are the cache's to
			// free (kv/radix window.go), not the request's: the bound holds
			// cache on or off.
			if worst > bound {
				t.Errorf("a running request held %d window pages on average, more than (window − 1 + chunk)/page + 2 = %d", worst, bound)
			}
			if err := ledger.Check(s.Ledger.Snapshot()); err != nil {
				t.Fatal(err)
			}
			reserved := 0
			if s.Graphs != nil {
				reserved = len(s.Pools.TokenPools()) // one padding page per token pool
			}
			// The last event reaches the client before the engine retires
			// the sequence: wait for it.
			for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
				es = s.Engine.Stats()
				if es.Running == 0 && es.KVPagesFree+es.KVPagesCached == es.KVPagesTotal-reserved {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("pages not all back: %+v", es)
				}
			}
			t.Logf("%s: %d preemptions, at most %d window pages per running request (bound %d)", arch, es.Preemptions, worst, bound)
		})
	}
}

// step is one generated token with its log-probability and the step's two
// most likely tokens.
type step struct {
	tok int32
	lp  float32
	top []engine.TokenLogprob
}

// nearTie bounds, in nats, how far a sequence's log-probabilities may move
// with its batch neighbours, and so the gap between its two most likely
// tokens that they may flip: the kernels' float sums are not bit-for-bit
// independent of the batch (kernels/cpu matmul_quant.go, gemm16.go), a
// recomputed prefix runs through the prefill paths instead of decode's, and
// quantizing activations to 8 bits (MXFP4 experts) turns a last-bit
// difference into a rounding step: the runs' log-probabilities differed by
// up to 6e-5 (Gemma 2, Mistral) and 4e-4 (gpt-oss) with AVX-512, and 1.1e-2
// (gpt-oss) with AVX2 alone (GODEBUG=cpu.avx512f=off). The window's
// numerics are TestSWAMatchesFloat64Reference's (host/model); a page this
// test's scheduling got wrong is read as released and panics.
const nearTie = 0.05

// sameOrNearTie fails unless got and want (one choice's steps, served two
// ways) are the same tokens with log-probabilities within nearTie of each
// other, or are so up to a step where both runs had the two tokens within
// nearTie of each other at the top; past such a step the contexts differ
// and nothing further is compared.
func sameOrNearTie(t *testing.T, what string, got, want []step) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d tokens served with the others, %d alone", what, len(got), len(want))
	}
	worst := 0.0
	for d := range got {
		if got[d].tok == want[d].tok {
			diff := math.Abs(float64(got[d].lp - want[d].lp))
			if diff > nearTie {
				t.Fatalf("%s: token %d has log-probability %g served with the others, %g alone (tolerance %g)", what, d, got[d].lp, want[d].lp, nearTie)
			}
			worst = max(worst, diff)
			continue
		}
		a, b := want[d].tok, got[d].tok
		ga, _ := topLogprob(got[d], a)
		for _, st := range []step{got[d], want[d]} {
			la, oka := topLogprob(st, a)
			lb, okb := topLogprob(st, b)
			if !oka || !okb || math.Abs(float64(la-lb)) > nearTie || math.Abs(float64(ga-want[d].lp)) > nearTie {
				t.Fatalf("%s: token %d is %d served with the others, %d alone, not a near tie (top %v / %v, tolerance %g nats)\nwith others %v\nalone %v",
					what, d, b, a, got[d].top, want[d].top, nearTie, tokens(got), tokens(want))
			}
		}
		t.Logf("%s: near tie at token %d (%d with the others, %d alone; top %v / %v; log-probabilities differed by %.2g at most before): not compared further", what, d, b, a, got[d].top, want[d].top, worst)
		return
	}
	if worst > 0 {
		t.Logf("%s: same tokens, log-probabilities differ by %.2g at most", what, worst)
	}
}

func topLogprob(st step, tok int32) (float32, bool) {
	for _, c := range st.top {
		if c.Token == tok {
			return c.Logprob, true
		}
	}
	return 0, false
}

func tokens(s []step) []int32 {
	out := make([]int32, len(s))
	for i, st := range s {
		out[i] = st.tok
	}
	return out
}

// runSteps serves r (Logprobs and TopLogprobs set) on s and returns each
// choice's steps.
func runSteps(t *testing.T, s *Stack, r engine.Request) [][]step {
	t.Helper()
	st, err := s.Engine.Submit(context.Background(), r)
	if err != nil {
		t.Error(err)
		return nil
	}
	out := make([][]step, max(1, r.N))
	for ev := range st.Events {
		if ev.Err != nil {
			t.Error(ev.Err)
			return nil
		}
		if len(out[ev.Choice]) < r.MaxTokens { // every request here ignores EOS and runs to MaxTokens
			out[ev.Choice] = append(out[ev.Choice], step{ev.Token, ev.Logprob, slices.Clone(ev.TopLogprobs)})
		}
	}
	return out
}

// run serves r on s and returns each choice's tokens.
func run(t *testing.T, s *Stack, r engine.Request) [][]int32 {
	t.Helper()
	var out [][]int32
	for _, c := range runSteps(t, s, r) {
		out = append(out, tokens(c))
	}
	return out
}

// TestSWAWindowPoolServesMaxRunning: kvhost's own split gives a hybrid
// model's window pool exactly what max_running_requests sequences hold
// (layout.WindowPoolTokens: (window − 1 + chunk)/page + 2 pages each, plus
// the graphs' padding page), and that is enough: four requests decoding
// far past the window (generated Gemma 2, window 16, chunks of 32, pages
// of 16, a roomy full pool) all run at once, none waits for window pages
// at admission and none is preempted, prefix cache on or off. The peak
// of window pages in use is logged: below the pool, as only one prefill
// chunk runs per step (the step's token budget is one chunk) and decoding
// sequences hold (window − 1 + 1)/page + 2 pages at most.
func TestSWAWindowPoolServesMaxRunning(t *testing.T) {
	spec, err := synth.ArchPreset("gemma2", "tiny", "f32")
	if err != nil {
		t.Fatal(err)
	}
	path := writeSpec(t, spec)
	for _, radix := range []bool{false, true} {
		t.Run(fmt.Sprintf("radix=%v", radix), func(t *testing.T) {
			cfg := baseConfig(path, 256<<20)
			cfg.MaxRunning, cfg.ChunkedPrefill, cfg.DisableRadixCache = 4, 32, !radix
			s, err := Build(cfg, nil, os.Stdout)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close(context.Background())
			win := -1
			for i, st := range s.Pools.Stats() {
				if st.Kind == sdk.SlidingWindow {
					win = i
				}
			}
			if win < 0 {
				t.Fatalf("pools %+v: no window pool", s.Pools.Stats())
			}
			ws := s.Pools.Stats()[win]
			want := layout.WindowPoolTokens(int64(ws.Window), 32, 16, int64(spec.ContextLen), 4)
			if want != int64(4*((ws.Window-1+32)/16+2)+1)*16 || int64(ws.CapacityTokens) != want {
				t.Fatalf("window pool of %d tokens (window %d), want %d", ws.CapacityTokens, ws.Window, want)
			}
			stop, worst, peak := make(chan struct{}), 0, 0
			var wg sync.WaitGroup
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					select {
					case <-stop:
						return
					case <-time.After(time.Millisecond):
					}
					es := s.Engine.Stats()
					worst, peak = max(worst, es.Running), max(peak, es.Pools[win].Pages-es.Pools[win].FreePages-es.Pools[win].CachedPages)
				}
			}()
			var rw sync.WaitGroup
			for i := range 4 {
				rw.Add(1)
				p := []int32{1, int32(40 + i)}
				for j := range 58 {
					p = append(p, int32(600+(j*13+i*7)%300))
				}
				go func() {
					defer rw.Done()
					if got := run(t, s, engine.Request{Prompt: p, MaxTokens: 120, IgnoreEOS: true}); len(got) != 1 || len(got[0]) != 120 {
						t.Errorf("request %d: %d choices", i, len(got))
					}
				}()
			}
			rw.Wait()
			close(stop)
			wg.Wait()
			if es := s.Engine.Stats(); es.Preemptions != 0 || worst != 4 {
				t.Errorf("%d preemptions, at most %d running at once; want 0 and 4 on a window pool of %d tokens", es.Preemptions, worst, ws.CapacityTokens)
			}
			t.Logf("window pool %d pages, at most %d in use by running requests", ws.Pages, peak)
			if err := ledger.Check(s.Ledger.Snapshot()); err != nil {
				t.Fatal(err)
			}
		})
	}
}
