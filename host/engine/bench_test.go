package engine

import (
	"context"
	"fmt"
	"testing"

	"github.com/kvhost/kvhost/host/alloc"
	"github.com/kvhost/kvhost/host/device"
	"github.com/kvhost/kvhost/host/device/cpu"
	"github.com/kvhost/kvhost/host/kv"
	"github.com/kvhost/kvhost/host/kv/kvtest"
	"github.com/kvhost/kvhost/host/model"
	"github.com/kvhost/kvhost/sdk"
)

// nullForward does no model work, so a benchmark over it measures the
// scheduler alone: admission, page growth, batch building, sampling of a
// tiny vocabulary and streaming.
type nullForward struct{}

func (nullForward) Forward(pools *kv.Set, seqs []model.Seq, logits []float32) error {
	for i := range logits {
		logits[i] = float32(i % 7)
	}
	return nil
}

// BenchmarkSchedulerStep reports the engine's own cost per decode step with
// 256 running sequences, excluding the forward.
func BenchmarkSchedulerStep(b *testing.B) {
	dev, err := cpu.New(device.Options{MemoryBytes: 256 << 20, Threads: 1})
	if err != nil {
		b.Fatal(err)
	}
	defer dev.Close()
	pool := kvtest.MHA(b, alloc.NewDirect("kv", dev), kvtest.Uniform(1, 1, 2), sdk.KVFP32, 16, 1<<16)
	if err != nil {
		b.Fatal(err)
	}
	const running, vocab = 256, 16
	mc := model.Config{Vocab: vocab, ContextLen: 1 << 20}
	e, err := New(Config{MaxRunning: running, MaxQueue: running, ChunkedPrefill: 4096}, nullForward{}, pool, mc, func(int32) bool { return false })
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close(context.Background())
	streams := make([]*Stream, running)
	steps := b.N + 2
	for i := range streams {
		streams[i], err = e.Submit(context.Background(), Request{Prompt: []int32{1, 2, 3}, MaxTokens: steps, IgnoreEOS: true})
		if err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	// Drain every stream; the engine runs one step per token of each.
	for _, s := range streams {
		for range s.Events {
		}
	}
	b.StopTimer()
	st := e.Stats()
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(st.Steps), "ns/step")
	b.ReportMetric(float64(running), "seqs")
}

// BenchmarkPrefillChunking reports prompt tokens/s for a 1024-token prompt
// prefilled in 256-token chunks and whole.
func BenchmarkPrefillChunking(b *testing.B) {
	for _, chunk := range []int{256, -1} {
		b.Run(fmt.Sprintf("chunk=%d", chunk), func(b *testing.B) {
			r := newRig(b, 1024, Config{MaxRunning: 2, MaxQueue: 2, ChunkedPrefill: chunk})
			p := make([]int32, 1024)
			for i := range p {
				p[i] = int32(1 + i*31%3000)
			}
			b.ResetTimer()
			for n := 0; n < b.N; n++ {
				s, err := r.e.Submit(context.Background(), Request{Prompt: p, MaxTokens: 1})
				if err != nil {
					b.Fatal(err)
				}
				if res := collect(s); res.err != nil {
					b.Fatal(res.err)
				}
			}
			b.ReportMetric(float64(b.N*len(p))/b.Elapsed().Seconds(), "tok/s")
		})
	}
}

// BenchmarkDecodeGraphsVsEager reports decode tokens/s of 8 concurrent
// greedy requests through captured graphs and eagerly.
func BenchmarkDecodeGraphsVsEager(b *testing.B) {
	for _, graphs := range []bool{false, true} {
		b.Run(fmt.Sprintf("graphs=%v", graphs), func(b *testing.B) {
			cfg := Config{MaxRunning: 8, MaxQueue: 8, ChunkedPrefill: 256}
			if graphs {
				cfg.Graphs = graphsWanted
			}
			r := newRig(b, 1024, cfg)
			const tokens = 64
			b.ResetTimer()
			for n := 0; n < b.N; n++ {
				var streams []*Stream
				for i := 0; i < 8; i++ {
					s, err := r.e.Submit(context.Background(), Request{Prompt: []int32{1, int32(2 + i)}, MaxTokens: tokens, IgnoreEOS: true})
					if err != nil {
						b.Fatal(err)
					}
					streams = append(streams, s)
				}
				for _, s := range streams {
					collect(s)
				}
			}
			b.ReportMetric(float64(b.N*8*tokens)/b.Elapsed().Seconds(), "tok/s")
		})
	}
}
