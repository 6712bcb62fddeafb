package engine

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/kvhost/kvhost/host/alloc"
	"github.com/kvhost/kvhost/host/constraint"
	"github.com/kvhost/kvhost/host/constraint/compile"
	"github.com/kvhost/kvhost/host/device"
	"github.com/kvhost/kvhost/host/device/cpu"
	"github.com/kvhost/kvhost/host/kv"
	"github.com/kvhost/kvhost/host/kv/kvtest"
	"github.com/kvhost/kvhost/host/model"
	"github.com/kvhost/kvhost/host/model/synth"
	"github.com/kvhost/kvhost/sdk"
	"github.com/kvhost/kvhost/sdk/constraint/grammar"
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

var smallOnce struct {
	sync.Once
	path string
	err  error
}

// smallModel writes gen-model's small preset (random weights, f32) once.
func smallModel(b *testing.B) string {
	smallOnce.Do(func() {
		spec, err := synth.Preset("small", "f32")
		if err != nil {
			smallOnce.err = err
			return
		}
		dir, err := os.MkdirTemp("", "kvhost-engine-bench")
		if err != nil {
			smallOnce.err = err
			return
		}
		var buf bytes.Buffer
		if smallOnce.err = synth.Write(&buf, spec, nil); smallOnce.err == nil {
			smallOnce.path = filepath.Join(dir, "small.gguf")
			smallOnce.err = os.WriteFile(smallOnce.path, buf.Bytes(), 0o644)
		}
	})
	if smallOnce.err != nil {
		b.Fatal(smallOnce.err)
	}
	return smallOnce.path
}

// BenchmarkDecodeConstrained is issue 19's throughput benchmark: decode
// tokens/s of `batch` concurrent sampled requests (temperature 1, 64 new
// tokens) on gen-model small, unconstrained and under a JSON Schema
// (native grammar engine, warm after the first iteration). "strings" is
// an object of two free strings, which a random model fills until the
// token budget closes them: every sequence runs its 64 tokens, as the
// unconstrained ones do, so the rates compare like for like. "ten-props"
// is testdata/schemas/19-ten-properties.json, whose bounded fields end
// the object sooner (shorter sequences: a cheaper attention per token).
func BenchmarkDecodeConstrained(b *testing.B) {
	doc, err := os.ReadFile("../constraint/testdata/schemas/19-ten-properties.json")
	if err != nil {
		b.Fatal(err)
	}
	specs := map[string]*constraint.Spec{"none": nil}
	for name, d := range map[string][]byte{"ten-props": doc,
		"strings": []byte(`{"type":"object","properties":{"name":{"type":"string"},"bio":{"type":"string"}},"required":["name","bio"],"additionalProperties":false}`)} {
		g, err := compile.JSONSchema(d)
		if err != nil {
			b.Fatal(err)
		}
		if specs[name], err = constraint.NewSpec("json_schema", d, g); err != nil {
			b.Fatal(err)
		}
	}
	for _, batch := range []int{1, 16} {
		for _, schema := range []string{"none", "strings", "ten-props"} {
			spec := specs[schema]
			b.Run(fmt.Sprintf("batch=%d/schema=%s", batch, schema), func(b *testing.B) {
				r := newRigModel(b, smallModel(b), 4096, Config{MaxRunning: batch, MaxQueue: batch, ChunkedPrefill: 256})
				if spec != nil {
					vocab, eog, err := constraint.Vocab(r.m.Tokenizer, r.m.Config.Vocab)
					if err != nil {
						b.Fatal(err)
					}
					if r.e.cfg.Constraints, err = constraint.NewNative(vocab, eog, grammar.Options{}); err != nil {
						b.Fatal(err)
					}
				}
				tokens := 0
				b.ResetTimer()
				for n := 0; n < b.N; n++ {
					var streams []*Stream
					for i := range batch {
						req := Request{Prompt: []int32{1, int32(20 + i), int32(30 + n)}, MaxTokens: 64, IgnoreEOS: spec == nil,
							Sampling: SamplingParams{Temperature: 1}, Constraint: spec}
						s, err := r.e.Submit(context.Background(), req)
						if err != nil {
							b.Fatal(err)
						}
						streams = append(streams, s)
					}
					for _, s := range streams {
						res := collect(s)
						if res.err != nil {
							b.Fatal(res.err)
						}
						tokens += len(res.tokens)
					}
				}
				b.ReportMetric(float64(tokens)/b.Elapsed().Seconds(), "tok/s")
				b.ReportMetric(float64(tokens)/float64(b.N*batch), "tokens/seq")
			})
		}
	}
}
