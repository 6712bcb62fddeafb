package boot

import (
	"context"
	"fmt"
	"os"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/kvhost/kvhost/host/engine"
	"github.com/kvhost/kvhost/host/ledger"
)

// TestPrefixCacheFillsPool fills a small KV pool with cached prefixes and
// keeps admitting work: conversations under eight 300-token system
// prompts, interleaved so the running requests hold different prefixes and
// grow past what the pool holds (preemption), while the distinct prefixes
// outgrow the pool (eviction). No request fails, nothing runs out of
// memory, the activations' runtime growth stays within the reserved slack;
// afterwards the ledger balances to the byte with nothing outside, every
// page is free or held by the cache alone, and after a reset (and the
// caching allocator's EmptyCache) every page is free and the ledger equals
// what plan predicts at startup, to the byte (TestPlanMatchesServe's
// comparison).
func TestPrefixCacheFillsPool(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping in -short mode: a stress run through eviction and preemption")
	}
	cfg := baseConfig(writeModel(t, "tiny"), 192<<20)
	cfg.MaxRunning, cfg.ChunkedPrefill, cfg.MaxTotalTokens = 8, 128, 2304
	s, err := Build(cfg, nil, os.Stdout)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	want := planFor(t, cfg)
	start := s.Ledger.Snapshot()
	pool := s.Pools.TokenPools()[0]
	if pool.Tokens() > cfg.MaxTotalTokens {
		t.Fatalf("pool of %d tokens, capped at %d", pool.Tokens(), cfg.MaxTotalTokens)
	}
	free0 := s.Engine.Stats().KVPagesFree
	s.Act.ResetPeak() // the runtime peak, not boot's profile

	const systems, users, system, user, maxTokens = 8, 6, 300, 20, 48
	vocab := s.Model.Config.Vocab
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, systems*users)
	for u := range users {
		for g := range systems { // round robin: neighbours hold different prefixes
			prompt := make([]int32, 0, system+user)
			for j := range system {
				prompt = append(prompt, int32(100+(g*977+j*13)%(vocab-100)))
			}
			for j := range user {
				prompt = append(prompt, int32(100+(g*31+u*101+j*7)%(vocab-100)))
			}
			req := engine.Request{Prompt: prompt, MaxTokens: maxTokens, IgnoreEOS: true}
			if (g+u)%5 == 0 {
				req.N = 2
			}
			st, err := s.Engine.Submit(ctx, req)
			if err != nil {
				t.Fatal(err)
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				got := map[int]int{}
				for ev := range st.Events {
					switch {
					case ev.Err != nil:
						errs <- ev.Err
					case !ev.Done:
						got[ev.Choice]++
					}
				}
				for c := range max(req.N, 1) {
					if got[c] != maxTokens {
						errs <- fmt.Errorf("system %d user %d choice %d: %d tokens, want %d", g, u, c, got[c], maxTokens)
					}
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	es := s.Engine.Stats()
	distinct := systems*system + systems*users*(user+maxTokens)
	t.Logf("pool %d tokens; %d distinct prompt+output tokens; preemptions %d; cache hits %d of %d tokens; cached now %d tokens",
		pool.Tokens(), distinct, es.Preemptions, es.Prefix.Hits, es.Prefix.Queries, es.Prefix.Tokens)
	if es.Preemptions == 0 {
		t.Error("the running set was meant to outgrow the pool: no preemption")
	}
	if distinct <= pool.Tokens() || es.Prefix.Hits == 0 {
		t.Errorf("the workload was meant to outgrow the pool with hits: %d distinct tokens, pool %d, hits %d", distinct, pool.Tokens(), es.Prefix.Hits)
	}
	if act := s.Act.Stats(); act.NumOOMs != 0 || act.PeakReserved > s.Budget.HeadroomBytes {
		t.Fatalf("%d OOMs; runtime peak %d B against the reserved slack %d B", act.NumOOMs, act.PeakReserved, s.Budget.HeadroomBytes)
	}
	// Idle: every page is free or held by the cache alone, all evictable.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		es = s.Engine.Stats()
		if es.Running == 0 && es.Waiting == 0 && es.KVPagesFree+es.KVPagesCached == free0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("idle, yet pages are neither free nor cached: free %d + cached %d != %d", es.KVPagesFree, es.KVPagesCached, free0)
		}
	}
	if es.Prefix.Pages[0] != es.KVPagesCached || es.Prefix.Evictable[0] != es.Prefix.Pages[0] {
		t.Fatalf("idle cache holds %d pages, %d evictable; the pool counts %d cached", es.Prefix.Pages[0], es.Prefix.Evictable[0], es.KVPagesCached)
	}
	busy := s.Ledger.Snapshot()
	if err := ledger.Check(busy); err != nil {
		t.Fatalf("after the stress: %v", err)
	}
	if busy.Outside() != 0 {
		t.Fatalf("outside = %d after the stress, want 0", busy.Outside())
	}
	if err := s.Engine.ResetPrefixCache(ctx); err != nil {
		t.Fatal(err)
	}
	// The activations' blocks the stress grew stay cached in the caching
	// allocator until emptied (the engine is idle: nothing allocates).
	if err := s.Act.EmptyCache(); err != nil {
		t.Fatal(err)
	}
	if es := s.Engine.Stats(); es.KVPagesFree != free0 || es.KVPagesCached != 0 || es.Prefix.Nodes != 0 {
		t.Fatalf("after the reset: %d pages free of %d, %d cached, %d nodes", es.KVPagesFree, free0, es.KVPagesCached, es.Prefix.Nodes)
	}
	got := s.Ledger.Snapshot()
	if err := ledger.Check(got); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got.Phases, want.Ledger.Phases) || !reflect.DeepEqual(got.Phases, start.Phases) {
		t.Errorf("phases:\nserve %+v\nplan  %+v", got.Phases, want.Ledger.Phases)
	}
	if !reflect.DeepEqual(got.Allocators, want.Ledger.Allocators) {
		t.Errorf("allocators:\nserve %+v\nplan  %+v", got.Allocators, want.Ledger.Allocators)
	}
	if !reflect.DeepEqual(got.KVPools, want.Ledger.KVPools) {
		t.Errorf("pools:\nserve %+v\nplan  %+v", got.KVPools, want.Ledger.KVPools)
	}
	if !reflect.DeepEqual(s.Budget, want.Budget) {
		t.Errorf("budget:\nserve %+v\nplan  %+v", s.Budget, want.Budget)
	}
}
