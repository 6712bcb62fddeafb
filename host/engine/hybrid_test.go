package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kvhost/kvhost/configurators/layout"
	"github.com/kvhost/kvhost/host/alloc"
	"github.com/kvhost/kvhost/host/device"
	"github.com/kvhost/kvhost/host/device/cpu"
	"github.com/kvhost/kvhost/host/kv"
	"github.com/kvhost/kvhost/host/model"
	"github.com/kvhost/kvhost/host/model/synth"
	"github.com/kvhost/kvhost/sdk"
)

// hybridEngine serves a generated tiny hybrid Mamba-2 model on the pools
// the mamba configurator declares for it: slots request slots and pages
// KV pages of 16 tokens for its attention layers.
func hybridEngine(t *testing.T, arch string, slots, pages int, cfg Config) *Engine {
	t.Helper()
	base, moe := strings.CutSuffix(arch, "-moe")
	spec, err := synth.HybridPreset(base, "tiny", "f32")
	if err != nil {
		t.Fatal(err)
	}
	if moe {
		spec.Experts, spec.ExpertsUsed, spec.ExpertFF = 4, 2, spec.FF/2
	}
	var buf bytes.Buffer
	if err := synth.WriteHybrid(&buf, spec); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), arch+".gguf")
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	dev, err := cpu.New(device.Options{MemoryBytes: 1 << 30, Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	m, err := model.Load(path, model.Options{Device: dev, Weights: alloc.NewDirect("weights", dev), Activations: alloc.New("caching", dev)})
	if err != nil {
		t.Fatal(err)
	}
	raw, err := json.Marshal(m.Config.HybridHF())
	if err != nil {
		t.Fatal(err)
	}
	p, err := layout.Mamba{}.Plan(sdk.ConfigureInput{Model: raw, Host: sdk.HostFacts{KVDType: sdk.KVFP32, PageSize: 16, TPSize: 1, ContextLength: int64(m.Config.ContextLen)}})
	if err != nil {
		t.Fatal(err)
	}
	l, err := kv.NewLayout(p.Pools(), m.Config.KVNeeds())
	if err != nil {
		t.Fatal(err)
	}
	units := make([]int, len(l.Pools))
	for i, pl := range l.Pools {
		units[i] = slots
		if pl.Tokens() {
			units[i] = pages * pl.PageSize
		}
	}
	pools, err := kv.Allocate(l, units, alloc.NewDirect("kv", dev))
	if err != nil {
		t.Fatal(err)
	}
	cfg.PrefixCache = true // asked for: the engine turns it off for state pools
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
		pools.Close()
		dev.Close()
	})
	return e
}

// TestHybridServing: both hybrid architectures served on state slots and a
// KV pool small enough to preempt, eagerly and with decode steps replayed
// from captured graphs: greedy requests at different positions
// batched together (odd prefill chunks, one of them with n = 3 choices
// forking its state) each give the tokens they give alone; preempted
// requests recompute their state from the prompt; every slot and page
// comes back when the requests end.
func TestHybridServing(t *testing.T) {
	for _, tc := range []struct {
		arch   string
		graphs bool
	}{{"nemotron_h", false}, {"nemotron_h", true}, {"granitehybrid", false}, {"granitehybrid-moe", true}} {
		arch := tc.arch
		t.Run(fmt.Sprintf("%s/graphs=%v", arch, tc.graphs), func(t *testing.T) {
			cfg := Config{MaxRunning: 8, MaxQueue: 32, ChunkedPrefill: 7}
			reserved := 0
			if tc.graphs {
				cfg.Graphs, reserved = graphsWanted, 1 // the graphs' padding page and slot
			}
			// 6 pages of 16 tokens: not enough for the batch below at once.
			e := hybridEngine(t, arch, 12, 6+reserved, cfg)
			var reqs []Request
			for i := range 6 {
				p := []int32{1}
				for j := range 3 + 4*i {
					p = append(p, int32(3+(i*131+j*17)%1000))
				}
				reqs = append(reqs, Request{Prompt: p, MaxTokens: 12, IgnoreEOS: true})
			}
			reqs[2].N = 3
			solo := make([][]int32, len(reqs))
			for i, r := range reqs {
				r.N = 1
				res := runAll(t, e, []Request{r})[0][0]
				if res.err != nil || len(res.tokens) != 12 {
					t.Fatalf("solo %d: %+v", i, res)
				}
				solo[i] = res.tokens
			}
			allFree(t, e, reserved)
			before := e.Stats().Preemptions
			got := runAll(t, e, reqs)
			for i, rs := range got {
				if len(rs) != max(1, reqs[i].N) {
					t.Fatalf("request %d: %d choices, want %d", i, len(rs), max(1, reqs[i].N))
				}
				for c, r := range rs {
					if r.err != nil || fmt.Sprint(r.tokens) != fmt.Sprint(solo[i]) {
						t.Fatalf("request %d choice %d batched: %+v, alone %v", i, c, r, solo[i])
					}
				}
			}
			if e.Stats().Preemptions == before {
				t.Fatal("the KV pool was too small for the batch, yet nothing was preempted")
			}
			allFree(t, e, reserved)
		})
	}
}
