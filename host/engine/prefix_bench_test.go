package engine

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/kvhost/kvhost/host/alloc"
	"github.com/kvhost/kvhost/host/device"
	"github.com/kvhost/kvhost/host/device/cpu"
	"github.com/kvhost/kvhost/host/kv/kvtest"
	"github.com/kvhost/kvhost/host/model"
	"github.com/kvhost/kvhost/sdk"
)

// BenchmarkPrefixCacheChat replays the multi-turn chat workload on
// the generated tiny model: 8 conversations of 6 turns each, run
// concurrently, every prompt the 1,000-token system prompt, the earlier
// turns (user 24 tokens, the model's 16-token reply) and the new user turn.
// It reports the tokens the forwards computed per replay, the prefix
// cache's hit ratio and the time to first token (p50, p95) with the cache
// off and on; compare ns/op for the total time.
func BenchmarkPrefixCacheChat(b *testing.B) {
	for _, on := range []bool{false, true} {
		name := "cache=off"
		if on {
			name = "cache=on"
		}
		b.Run(name, func(b *testing.B) {
			dev, err := cpu.New(device.Options{MemoryBytes: 1 << 30, Threads: 2})
			if err != nil {
				b.Fatal(err)
			}
			defer dev.Close()
			m, err := model.Load(tinyModel(b), model.Options{Device: dev, Weights: alloc.NewDirect("weights", dev), Activations: alloc.New("caching", dev)})
			if err != nil {
				b.Fatal(err)
			}
			pools := kvtest.MHA(b, alloc.NewDirect("kv", dev), m.Config.KVNeeds(), sdk.KVFP32, 16, 1024)
			g := &guard{m: m}
			e, err := New(Config{MaxRunning: 8, MaxQueue: 64, ChunkedPrefill: 512, PrefixCache: on}, g, pools, m.Config, m.Tokenizer.EOG)
			if err != nil {
				b.Fatal(err)
			}
			defer e.Close(context.Background())
			system := make([]int32, 1000)
			for i := range system {
				system[i] = int32(100 + i*7%5000)
			}
			var ttft []time.Duration
			b.ResetTimer()
			for range b.N {
				if on {
					if err := e.ResetPrefixCache(context.Background()); err != nil {
						b.Fatal(err)
					}
				}
				var mu sync.Mutex
				var wg sync.WaitGroup
				for c := range 8 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						prompt := slices.Clone(system)
						for turn := range 6 {
							for j := range 24 {
								prompt = append(prompt, int32(6000+c*500+turn*30+j))
							}
							start := time.Now()
							s, err := e.Submit(context.Background(), Request{Prompt: slices.Clone(prompt), MaxTokens: 16, IgnoreEOS: true})
							if err != nil {
								b.Error(err)
								return
							}
							first := true
							for ev := range s.Events {
								if ev.Err != nil {
									b.Error(ev.Err)
									return
								}
								if !ev.Done {
									if first {
										mu.Lock()
										ttft = append(ttft, time.Since(start))
										mu.Unlock()
										first = false
									}
									prompt = append(prompt, ev.Token)
								}
							}
						}
					}()
				}
				wg.Wait()
			}
			b.StopTimer()
			slices.Sort(ttft)
			b.ReportMetric(float64(g.computed.Load())/float64(b.N), "computed-tokens/op")
			b.ReportMetric(float64(ttft[len(ttft)/2].Microseconds())/1000, "ttft-p50-ms")
			b.ReportMetric(float64(ttft[len(ttft)*95/100].Microseconds())/1000, "ttft-p95-ms")
			if st := e.Stats().Prefix; st != nil && st.Queries > 0 {
				b.ReportMetric(float64(st.Hits)/float64(st.Queries), "hit-ratio")
			}
		})
	}
}
