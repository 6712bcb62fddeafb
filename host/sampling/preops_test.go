package sampling

import (
	"math"
	"math/rand/v2"
	"sort"
	"testing"

	"github.com/kvhost/kvhost/sdk/sampler"
)

// TestCandidatesMatchReference: the pre-ops and the top-K cut agree with a
// float64 reference that copies, adjusts and sorts the whole vocabulary.
func TestCandidatesMatchReference(t *testing.T) {
	tests := []struct {
		name string
		ops  preOps
		hp   hostParams
		k    int
	}{
		{"plain k=64", preOps{}, hostParams{repetition: 1}, 64},
		{"penalties+bias", preOps{penalties: true, bias: true}, hostParams{repetition: 1.3, frequency: 0.4, presence: 0.2}, 32},
		{"temperature", preOps{temperature: true}, hostParams{repetition: 1, temperature: 0.6}, 16},
		{"temperature 0", preOps{temperature: true}, hostParams{repetition: 1, temperature: 0}, 16},
		{"top-p and min-p", preOps{temperature: true, topP: true, minP: true}, hostParams{repetition: 1, temperature: 1, topP: 0.8, minP: 0.05}, 64},
		{"top-k", preOps{topK: true}, hostParams{repetition: 1, topK: 3}, 64},
		{"k over vocab", preOps{}, hostParams{repetition: 1}, 1024},
	}
	rng := rand.New(rand.NewPCG(5, 5))
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			row := make([]float32, 700)
			for i := range row {
				row[i] = float32(math.Round(rng.NormFloat64()*20) / 8) // ties on purpose
			}
			row[17] = float32(math.NaN())
			best := int32(0) // the prompt holds the best raw token: repetition must move it
			for i, v := range row {
				if v > row[best] {
					best = int32(i)
				}
			}
			seq := &SeqState{Generated: []int32{3, 3, 40, 699, 12, 3}, Prompt: PromptSet([]int32{600, 3, 5, 600, 41, best}),
				Bias: NormalizeBias(map[int32]float32{40: 2, 41: -100, 500: 5})}
			type kv struct {
				id int32
				v  float64
			}
			var ref []kv
			counts := map[int32]int{}
			for _, g := range seq.Generated {
				counts[g]++
			}
			inPrompt := map[int32]bool{}
			for _, p := range seq.Prompt {
				inPrompt[p] = true
			}
			for i, l := range row {
				if l != l {
					continue
				}
				v := float64(l)
				// Repetition over prompt and output, frequency and
				// presence over the output (the package doc).
				c := counts[int32(i)]
				if tc.ops.penalties && tc.hp.repetition != 1 && (c > 0 || inPrompt[int32(i)]) {
					if v > 0 {
						v = float64(float32(v) / tc.hp.repetition)
					} else {
						v = float64(float32(v) * tc.hp.repetition)
					}
				}
				if tc.ops.penalties && c > 0 {
					v = float64(float32(v) - (float32(c)*tc.hp.frequency + tc.hp.presence))
				}
				for _, b := range seq.Bias {
					if tc.ops.bias && b.Token == int32(i) {
						v = float64(float32(v) + b.Bias)
					}
				}
				ref = append(ref, kv{int32(i), v})
			}
			sort.SliceStable(ref, func(a, b int) bool { return ref[a].v > ref[b].v })
			k := tc.k
			if tc.ops.temperature && tc.hp.temperature == 0 {
				k = 1
			}
			ref = ref[:min(k, len(ref))]
			var rs rowScratch
			ids, logits, lp := make([]int32, tc.k), make([]float32, tc.k), make([]float32, tc.k)
			n := rs.candidates(row, seq, &tc.hp, tc.ops, tc.k, ids, logits, lp)
			for i := range n {
				if ids[i] != ref[i].id {
					t.Fatalf("candidate %d: id %d, reference %d (%v)", i, ids[i], ref[i].id, ref[i].v)
				}
			}
			// Reference survivors after temperature, top-k, min-p, top-p.
			m := len(ref)
			temp := 1.0
			if tc.ops.temperature && tc.hp.temperature > 0 {
				temp = float64(tc.hp.temperature)
			}
			if tc.ops.topK && tc.hp.topK > 0 {
				m = min(m, tc.hp.topK)
			}
			var z float64
			for _, x := range ref[:m] {
				z += math.Exp((x.v - ref[0].v) / temp)
			}
			if tc.ops.minP {
				c := 1
				for c < m && math.Exp((ref[c].v-ref[0].v)/temp) >= float64(tc.hp.minP) {
					c++
				}
				m = c
			}
			if tc.ops.topP {
				var total, acc float64
				for _, x := range ref[:m] {
					total += math.Exp((x.v - ref[0].v) / temp)
				}
				for i, x := range ref[:m] {
					acc += math.Exp((x.v - ref[0].v) / temp)
					if acc >= float64(tc.hp.topP)*total {
						m = i + 1
						break
					}
				}
			}
			if n != m {
				t.Fatalf("%d survivors, reference %d", n, m)
			}
			z = 0
			for _, x := range ref[:m] {
				z += math.Exp((x.v - ref[0].v) / temp)
			}
			for i := range n {
				want := (ref[i].v-ref[0].v)/temp - math.Log(z)
				if math.Abs(float64(lp[i])-want) > 1e-4 {
					t.Fatalf("logprob %d: %v, reference %v", i, lp[i], want)
				}
			}
		})
	}
}

func TestRandMatchesSDK(t *testing.T) {
	for s := range uint64(100) {
		if Rand(s*7919, s) != sampler.Rand(s*7919, s, 0) {
			t.Fatalf("seed %d: host and sdk streams differ", s)
		}
	}
}

func TestSampleBatchAllocatesNothing(t *testing.T) {
	r := newRegistry(t, Options{})
	rows := batchOf(16, 2000, 1)
	for _, policy := range []string{"standard", "greedy", "mirostat", "dry"} {
		c := mustValidate(t, r, policy, nil)
		seqs := make([]SeqState, 16)
		for i := range seqs {
			seqs[i] = SeqState{Params: c, Seed: uint64(i), Generated: []int32{1, 2, 3, 1, 2}, Bias: []TokenBias{{5, 1}}}
		}
		out := make([]Choice, 16)
		ctx := t.Context()
		if err := r.SampleBatch(ctx, policy, rows, seqs, out); err != nil {
			t.Fatal(err)
		}
		if a := testing.AllocsPerRun(20, func() {
			if err := r.SampleBatch(ctx, policy, rows, seqs, out); err != nil {
				t.Fatal(err)
			}
		}); a != 0 {
			t.Errorf("%s: %v allocations per step", policy, a)
		}
	}
}
