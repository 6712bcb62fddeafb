package sampling

import (
	"context"
	"math"
	"testing"

	"github.com/kvhost/kvhost/host/plugin"
	"github.com/kvhost/kvhost/host/plugin/wasmtest"
)

// nativeStandard is the standard policy in native Go (the same algorithm
// as plugins/standard/standard.c), over one row of candidates.
func nativeStandard(ids []int32, lp []float32, n, topK int, topP, minP float32, seed, step uint64, w []float64) (int32, float32) {
	if topK > 0 && topK < n {
		n = topK
	}
	if minP > 0 {
		cut := lp[0] + float32(math.Log(float64(minP)))
		m := 1
		for m < n && lp[m] >= cut {
			m++
		}
		n = m
	}
	var sum float64
	for i := range n {
		w[i] = math.Exp(float64(lp[i]))
		sum += w[i]
	}
	if topP > 0 && topP < 1 {
		var acc float64
		for i := range n {
			acc += w[i]
			if acc >= float64(topP)*sum {
				n, sum = i+1, acc
				break
			}
		}
	}
	r := Rand(seed, step) * sum
	i := n - 1
	for j := range n {
		r -= w[j]
		if r < 0 {
			i = j
			break
		}
	}
	return ids[i], float32(math.Log(w[i] / sum))
}

// stepInput is one prepared batch of candidates (after the host pre-ops).
type stepInput struct {
	b, k       int
	ids        []int32
	logits, lp []float32
	nCand      []int32
	params     []float32 // top_k, top_p, min_p per row
	seeds      []uint64
	outID      []int32
	outLP      []float32
}

func newStepInput(b, k int, temperature float32) *stepInput {
	s := &stepInput{b: b, k: k, ids: make([]int32, b*k), logits: make([]float32, b*k), lp: make([]float32, b*k),
		nCand: make([]int32, b), params: make([]float32, 3*b), seeds: make([]uint64, b), outID: make([]int32, b), outLP: make([]float32, b)}
	rows := batchOf(b, 4096, 42)
	var rs rowScratch
	hp := hostParams{repetition: 1, temperature: temperature}
	for i := range b {
		n := rs.candidates(rows[i], &SeqState{}, &hp, preOps{temperature: true}, k, s.ids[i*k:i*k+k], s.logits[i*k:i*k+k], s.lp[i*k:i*k+k])
		s.nCand[i] = int32(n)
		s.params[3*i+1] = 1 // top_p off; top_k, min_p off: temperature-only, as in the acceptance
		s.seeds[i] = uint64(i)
	}
	return s
}

// BenchmarkStandardStep is the acceptance benchmark: one step of the
// standard policy for batch 256 × 64 candidates at temperature 0.8, in
// native Go and through the plugin (copying the candidates into guest
// memory, the call, the host's answer check), under each termination
// strategy.
func BenchmarkStandardStep(b *testing.B) {
	const B, K = 256, 64
	in := newStepInput(B, K, 0.8)
	b.Run("native", func(b *testing.B) {
		w := make([]float64, K)
		b.ReportAllocs()
		b.ResetTimer()
		for i := range b.N {
			for r := range B {
				in.outID[r], in.outLP[r] = nativeStandard(in.ids[r*K:r*K+K], in.lp[r*K:r*K+K], int(in.nCand[r]), 0, 1, 0, in.seeds[r], uint64(i), w)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N), "µs/step")
	})
	wasm, err := wasmtest.Builtin("standard")
	if err != nil {
		b.Fatal(err)
	}
	// The plugin under the runtime's fuel and step deadline (package
	// fuel's BenchmarkLoop compares fuel with wazero's context checks).
	b.Run("plugin", func(b *testing.B) {
		ctx := context.Background()
		rt, err := plugin.NewRuntime(ctx, plugin.Config{MaxBatch: B})
		if err != nil {
			b.Fatal(err)
		}
		defer rt.Close(ctx)
		m, err := rt.LoadSampler(ctx, "standard", wasm)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		b.ResetTimer()
		for i := range b.N {
			inst, err := m.Acquire(ctx)
			if err != nil {
				b.Fatal(err)
			}
			io := &inst.IO
			copy(io.IDs, in.ids)
			copy(io.Logits, in.logits)
			copy(io.Logprobs, in.lp)
			copy(io.NCand, in.nCand)
			copy(io.Params, in.params)
			copy(io.Seed, in.seeds)
			for r := range B {
				io.Step[r] = uint64(i)
			}
			if err := inst.Sample(ctx, B, in.ids, in.nCand); err != nil {
				b.Fatal(err)
			}
			copy(in.outID, io.OutID[:B])
			m.Release(inst)
		}
		b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N), "µs/step")
	})
}

// BenchmarkSampleBatch is a whole step through the registry, pre-ops
// included: 256 rows over a 32,000-token vocabulary.
func BenchmarkSampleBatch(b *testing.B) {
	r := newRegistry(b, Options{Runtime: plugin.Config{MaxBatch: 256}})
	rows := batchOf(256, 32000, 3)
	for _, policy := range []string{"greedy", "standard"} {
		b.Run(policy, func(b *testing.B) {
			c := mustValidate(b, r, policy, nil)
			seqs := make([]SeqState, 256)
			for i := range seqs {
				seqs[i] = SeqState{Params: c, Seed: uint64(i), Generated: []int32{1, 2, 3}}
			}
			out := make([]Choice, 256)
			if err := r.SampleBatch(context.Background(), policy, rows, seqs, out); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				for j := range seqs {
					seqs[j].Step = uint64(i)
				}
				if err := r.SampleBatch(context.Background(), policy, rows, seqs, out); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N), "µs/step")
		})
	}
}

// TestNativeMatchesPlugin keeps the benchmark honest: both sides compute
// the same tokens.
func TestNativeMatchesPlugin(t *testing.T) {
	const B, K = 64, 64
	in := newStepInput(B, K, 0.8)
	ctx := context.Background()
	rt, err := plugin.NewRuntime(ctx, plugin.Config{MaxBatch: B})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close(ctx)
	wasm, _ := wasmtest.Builtin("standard")
	m, err := rt.LoadSampler(ctx, "standard", wasm)
	if err != nil {
		t.Fatal(err)
	}
	inst, err := m.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Release(inst)
	io := &inst.IO
	copy(io.IDs, in.ids)
	copy(io.Logprobs, in.lp)
	copy(io.NCand, in.nCand)
	copy(io.Params, in.params)
	copy(io.Seed, in.seeds)
	clear(io.Step)
	if err := inst.Sample(ctx, B, in.ids, in.nCand); err != nil {
		t.Fatal(err)
	}
	w := make([]float64, K)
	same := 0
	for r := range B {
		id, _ := nativeStandard(in.ids[r*K:r*K+K], in.lp[r*K:r*K+K], int(in.nCand[r]), 0, 1, 0, in.seeds[r], 0, w)
		if id == io.OutID[r] {
			same++
		}
	}
	if same < B-1 {
		t.Fatalf("native and plugin agree on %d of %d rows", same, B)
	}
}
