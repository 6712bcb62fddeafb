package engine

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvhost/kvhost/host/alloc"
	"github.com/kvhost/kvhost/host/device"
	"github.com/kvhost/kvhost/host/device/cpu"
	"github.com/kvhost/kvhost/host/kv"
	"github.com/kvhost/kvhost/host/kv/kvtest"
	"github.com/kvhost/kvhost/host/model"
	"github.com/kvhost/kvhost/sdk"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden")

// recorder is a Forwarder that records each batch and produces logits whose
// argmax is a fixed token, so the scheduler is observed without a model.
type recorder struct{ log *strings.Builder }

func (r recorder) Forward(pools *kv.Set, seqs []model.Seq, logits []float32) error {
	var parts []string
	for _, s := range seqs {
		parts = append(parts, fmt.Sprintf("%d+%d", s.Start, len(s.Tokens)))
	}
	fmt.Fprintf(r.log, "  forward [%s]\n", strings.Join(parts, " "))
	for i := range logits {
		logits[i] = 0
	}
	for r := 0; r < len(logits)/8; r++ {
		logits[r*8+5] = 1
	}
	return nil
}

// TestSchedulerGolden drives the scheduler step by step through scripted
// scenarios and compares its decisions (batch composition, chunking,
// preemption, completion) with golden files.
func TestSchedulerGolden(t *testing.T) {
	scenarios := []struct {
		name  string
		cfg   Config
		pages int
		reqs  []Request
		steps int
	}{
		{"interleave", Config{MaxRunning: 4, MaxQueue: 8, ChunkedPrefill: 8}, 64,
			[]Request{{Prompt: make([]int32, 3), MaxTokens: 4}, {Prompt: make([]int32, 20), MaxTokens: 2}, {Prompt: make([]int32, 5), MaxTokens: 3}}, 12},
		{"preempt", Config{MaxRunning: 4, MaxQueue: 8, ChunkedPrefill: 16}, 6,
			[]Request{{Prompt: make([]int32, 6), MaxTokens: 8}, {Prompt: make([]int32, 6), MaxTokens: 8}, {Prompt: make([]int32, 6), MaxTokens: 8}}, 24},
		{"nochunk", Config{MaxRunning: 4, MaxQueue: 8, ChunkedPrefill: -1, MaxPrefillTokens: 24}, 64,
			[]Request{{Prompt: make([]int32, 30), MaxTokens: 2}, {Prompt: make([]int32, 10), MaxTokens: 2}, {Prompt: make([]int32, 10), MaxTokens: 2}, {Prompt: make([]int32, 10), MaxTokens: 2}}, 8},
		{"admission", Config{MaxRunning: 2, MaxQueue: 8, ChunkedPrefill: 32}, 64,
			[]Request{{Prompt: make([]int32, 4), MaxTokens: 2}, {Prompt: make([]int32, 4), MaxTokens: 2}, {Prompt: make([]int32, 4), MaxTokens: 2}}, 8},
	}
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			dev, err := cpu.New(device.Options{MemoryBytes: 64 << 20, Threads: 1})
			if err != nil {
				t.Fatal(err)
			}
			defer dev.Close()
			pools := kvtest.MHA(t, alloc.NewDirect("kv", dev), kvtest.Uniform(1, 1, 2), sdk.KVFP32, 4, sc.pages)
			pool := pools.TokenPools()[0]
			var log strings.Builder
			e, err := newEngine(sc.cfg, recorder{&log}, pools, model.Config{Vocab: 8, ContextLen: 256}, func(int32) bool { return false })
			if err != nil {
				t.Fatal(err)
			}
			var streams []*Stream
			for i, r := range sc.reqs {
				for j := range r.Prompt {
					r.Prompt[j] = int32(1 + (i+j)%7)
				}
				s, err := e.Submit(context.Background(), r)
				if err != nil {
					t.Fatal(err)
				}
				streams = append(streams, s)
			}
			for step := 1; step <= sc.steps; step++ {
				e.admit()
				if len(e.running) == 0 {
					break
				}
				fmt.Fprintf(&log, "step %d: running %d waiting %d free pages %d\n", step, len(e.running), len(e.waiting), pool.FreePages())
				e.step()
				for i, s := range streams {
					for {
						select {
						case ev, ok := <-s.Events:
							if !ok {
								goto next
							}
							if ev.Done {
								fmt.Fprintf(&log, "  request %d done: %s, %d tokens\n", i, ev.FinishReason, ev.CompletionTokens)
							}
							continue
						default:
						}
						break
					}
				next:
				}
			}
			fmt.Fprintf(&log, "preemptions %d, free pages %d of %d\n", e.preemptions.Load(), pool.FreePages(), sc.pages)
			golden := filepath.Join("testdata", "sched_"+sc.name+".golden")
			if *update {
				if err := os.WriteFile(golden, []byte(log.String()), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatal(err)
			}
			if log.String() != string(want) {
				t.Fatalf("scheduler decisions changed:\n%s\nwant:\n%s", log.String(), want)
			}
		})
	}
}
