package engine

import (
	"context"
	"fmt"
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
	"github.com/kvhost/kvhost/sdk"
)

// poolsRig is an engine over the tiny model with pools built from decl.
func poolsRig(t *testing.T, decl func(needs []kv.LayerNeed) []sdk.Pool, pages, slots int, cfg Config) (*Engine, *kv.Set) {
	t.Helper()
	dev, err := cpu.New(device.Options{MemoryBytes: 1 << 30, Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	m, err := model.Load(tinyModel(t), model.Options{Device: dev, Weights: alloc.NewDirect("weights", dev), Activations: alloc.New("caching", dev)})
	if err != nil {
		t.Fatal(err)
	}
	needs := m.Config.KVNeeds()
	pools := kvtest.SetSlots(t, alloc.NewDirect("kv", dev), decl(needs), needs, pages, slots)
	if cfg.Graphs == graphsWanted {
		g, err := m.CaptureDecodeGraphs(pools, []int{1, 2, 4, 8})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(g.Close)
		cfg.Graphs = g
	}
	e, err := New(cfg, m, pools, m.Config, m.Tokenizer.EOG)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = e.Close(ctx)
		dev.Close()
	})
	return e, pools
}

func mhaDecl(t *testing.T) func([]kv.LayerNeed) []sdk.Pool {
	return func(needs []kv.LayerNeed) []sdk.Pool {
		d, err := kvtest.DeclareMHA(needs, sdk.KVFP32, 4)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
}

// runAll submits every request at once and collects the results.
func runAll(t *testing.T, e *Engine, reqs []Request) [][]result {
	t.Helper()
	return runAllAfter(t, e, reqs, nil)
}

// runAllAfter is runAll calling submitted, when set, once every request is
// in the engine's queue.
func runAllAfter(t *testing.T, e *Engine, reqs []Request, submitted func()) [][]result {
	t.Helper()
	out := make([][]result, len(reqs))
	var wg sync.WaitGroup
	for i, r := range reqs {
		s, err := e.Submit(context.Background(), r)
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			byChoice := map[int]*result{}
			for ev := range s.Events {
				rc := byChoice[ev.Choice]
				if rc == nil {
					rc = &result{}
					byChoice[ev.Choice] = rc
				}
				switch {
				case ev.Err != nil:
					rc.err = ev.Err
				case ev.Done:
					rc.reason = ev.FinishReason
				default:
					rc.tokens = append(rc.tokens, ev.Token)
				}
			}
			for c := range len(byChoice) {
				out[i] = append(out[i], *byChoice[c])
			}
		}()
	}
	if submitted != nil {
		submitted()
	}
	wg.Wait()
	return out
}

// allFree waits for every page and slot to come back, but reserved of each
// pool (held outside any request).
func allFree(t *testing.T, e *Engine, reserved int) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		st := e.Stats()
		ok := st.Running == 0 && st.Waiting == 0
		for _, p := range st.Pools {
			ok = ok && p.FreePages == p.Pages-reserved
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("pages or slots not all returned: %+v", st.Pools)
		}
	}
}

// TestMultiPoolEngine: the same workload (greedy, n = 3 choices sharing a
// prompt copy-on-write, a pool small enough to preempt) gives the same
// tokens when the model's layers are split over two token pools and when a
// state pool of request slots (a per-request workspace) sits beside them;
// every page and slot comes back.
func TestMultiPoolEngine(t *testing.T) {
	cfg := Config{MaxRunning: 8, MaxQueue: 32, ChunkedPrefill: 8}
	var reqs []Request
	for i, p := range prompts(6) {
		r := Request{Prompt: p, MaxTokens: 20, IgnoreEOS: true}
		if i%3 == 1 {
			r.N, r.Sampling.Temperature = 3, 0.8
			seed := uint64(7 + i)
			r.Sampling.Seed = &seed
		}
		reqs = append(reqs, r)
	}
	e1, _ := poolsRig(t, mhaDecl(t), 40, 0, cfg)
	want := runAll(t, e1, reqs)
	for i, w := range want {
		for c, r := range w {
			if r.err != nil || len(r.tokens) != 20 {
				t.Fatalf("one pool: request %d choice %d: %+v", i, c, r)
			}
		}
	}
	if e1.Stats().Preemptions == 0 {
		t.Fatal("the pool was meant to be small enough to preempt")
	}
	allFree(t, e1, 0)

	split := func(needs []kv.LayerNeed) []sdk.Pool {
		return kvtest.Split(mhaDecl(t)(needs), func(l int) bool { return l%2 == 1 })
	}
	withState := func(needs []kv.LayerNeed) []sdk.Pool {
		return append(split(needs), sdk.Pool{Name: "scratch", Kind: sdk.RecurrentState, PageSize: 1, BytesPerUnit: 64, Buffers: []sdk.Buffer{
			{Pool: "scratch", Name: "scratch", Role: sdk.RoleWorkspace, Layer: -1, Shape: []int64{16}, DType: "fp32"}}})
	}
	for name, decl := range map[string]func([]kv.LayerNeed) []sdk.Pool{"two token pools": split, "with a state pool": withState, "with a state pool, graphs": withState} {
		t.Run(name, func(t *testing.T) {
			c := cfg
			if strings.HasSuffix(name, "graphs") {
				c.Graphs = graphsWanted
			}
			e, pools := poolsRig(t, decl, 41, 41, c)
			got := runAll(t, e, reqs)
			for i := range want {
				if fmt.Sprint(got[i]) != fmt.Sprint(want[i]) {
					t.Fatalf("request %d: %v, one pool gave %v", i, got[i], want[i])
				}
			}
			st := e.Stats()
			if len(st.Pools) != len(pools.Layout().Pools) || st.KVPagesTotal != 82 {
				t.Fatalf("stats: %+v", st)
			}
			if c.Graphs != nil && st.GraphSteps == 0 {
				t.Fatalf("no decode step ran through the graphs: %+v", st)
			}
			reserved := 0
			if c.Graphs != nil {
				reserved = 1 // the graphs' padding page (slot) in each pool
			}
			allFree(t, e, reserved)
		})
	}
}

// TestStateSlotsLimitAdmission: with three request slots, at most three
// sequences run at once whatever MaxRunning says; a request of more
// choices than slots is refused with the numbers; slots come back.
func TestStateSlotsLimitAdmission(t *testing.T) {
	decl := func(needs []kv.LayerNeed) []sdk.Pool {
		return append(mhaDecl(t)(needs), sdk.Pool{Name: "state", Kind: sdk.RecurrentState, PageSize: 1, BytesPerUnit: 4, Buffers: []sdk.Buffer{
			{Pool: "state", Name: "w", Role: sdk.RoleWorkspace, Layer: -1, Shape: []int64{1}, DType: "int32"}}})
	}
	e, _ := poolsRig(t, decl, 64, 3, Config{MaxRunning: 8, MaxQueue: 32, ChunkedPrefill: 64})
	if _, err := e.Submit(context.Background(), Request{Prompt: []int32{1, 2}, MaxTokens: 1, N: 4}); err == nil || !strings.Contains(err.Error(), "4 choices need 4 state slots, the pool state has 3") {
		t.Fatalf("n over the slots: %v", err)
	}
	// Six one-page requests: the slots, not MaxRunning, bound the batch.
	var reqs []Request
	for i := range 6 {
		reqs = append(reqs, Request{Prompt: []int32{1, int32(10 + i)}, MaxTokens: 1, IgnoreEOS: true})
	}
	peak := 0
	done, watched := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(watched)
		for {
			select {
			case <-done:
				return
			default:
				peak = max(peak, e.Stats().Running)
			}
		}
	}()
	for _, r := range runAll(t, e, reqs) {
		if r[0].err != nil {
			t.Fatal(r[0].err)
		}
	}
	close(done)
	<-watched
	if peak > 3 {
		t.Fatalf("%d sequences ran at once with 3 state slots", peak)
	}
	allFree(t, e, 0)
}

// TestWindowPoolBoundsPages drives the scheduler over a sliding-window
// pool: a sequence far past the window holds at most MaxPages of it,
// admission counts window+chunk pages, and every page comes back.
func TestWindowPoolBoundsPages(t *testing.T) {
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
	pools := kvtest.Set(t, alloc.NewDirect("kv", dev), decl, needs, 12)
	var log strings.Builder
	e, err := newEngine(Config{MaxRunning: 4, MaxQueue: 8, ChunkedPrefill: 4}, recorder{&log}, pools, model.Config{Vocab: 8, ContextLen: 256}, func(int32) bool { return false })
	if err != nil {
		t.Fatal(err)
	}
	p := pools.TokenPools()[0]
	// Three sequences of 60 tokens would need 45 pages of 4 in a full pool;
	// the window pool of 12 pages holds them all at once.
	var streams []*Stream
	for i := range 3 {
		s, err := e.Submit(context.Background(), Request{Prompt: []int32{1, int32(2 + i), 3, 4, 5}, MaxTokens: 55, IgnoreEOS: true})
		if err != nil {
			t.Fatal(err)
		}
		streams = append(streams, s)
	}
	for step := 0; step < 200; step++ {
		e.admit()
		if len(e.running) == 0 {
			break
		}
		e.step()
		for _, s := range e.running {
			held := 0
			for _, pg := range s.kv.tables[0] {
				if pg != kv.Released {
					held++
				}
			}
			if held > p.MaxPages(len(s.tokens), 4) {
				t.Fatalf("step %d: a sequence of %d tokens holds %d window pages, MaxPages %d", step, len(s.tokens), held, p.MaxPages(len(s.tokens), 4))
			}
		}
	}
	for i, s := range streams {
		r := collect(s)
		if r.err != nil || len(r.tokens) != 55 {
			t.Fatalf("request %d: %+v", i, r)
		}
	}
	if e.preemptions.Load() != 0 || p.FreePages() != 12 {
		t.Fatalf("preemptions %d, free pages %d of 12", e.preemptions.Load(), p.FreePages())
	}
}
