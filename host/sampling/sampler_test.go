package sampling

import (
	"math"
	"math/rand/v2"
	"testing"
)

func randomLogits(n int, seed uint64) []float32 {
	r := rand.New(rand.NewPCG(seed, 7))
	out := make([]float32, n)
	for i := range out {
		out[i] = float32(r.NormFloat64() * 3)
	}
	return out
}

// reference probabilities in float64 after temperature, top-k, top-p, min-p.
func reference(logits []float32, p Params) map[int32]float64 {
	type kv struct {
		id int32
		l  float64
	}
	var xs []kv
	maxL := math.Inf(-1)
	for _, l := range logits {
		maxL = math.Max(maxL, float64(l))
	}
	for i, l := range logits {
		xs = append(xs, kv{int32(i), (float64(l) - maxL) / float64(p.Temperature)})
	}
	// sort descending
	for i := 1; i < len(xs); i++ {
		for j := i; j > 0 && (xs[j].l > xs[j-1].l); j-- {
			xs[j], xs[j-1] = xs[j-1], xs[j]
		}
	}
	keep := xs[:0:0]
	for _, x := range xs {
		if p.MinP > 0 && math.Exp(x.l) < float64(p.MinP) {
			continue
		}
		keep = append(keep, x)
	}
	if p.TopK > 0 && p.TopK < len(keep) {
		keep = keep[:p.TopK]
	}
	var sum float64
	for _, x := range keep {
		sum += math.Exp(x.l)
	}
	if p.TopP > 0 && p.TopP < 1 {
		acc := 0.0
		for i, x := range keep {
			acc += math.Exp(x.l)
			if acc >= float64(p.TopP)*sum {
				keep = keep[:i+1]
				sum = acc
				break
			}
		}
	}
	out := map[int32]float64{}
	for _, x := range keep {
		out[x.id] = math.Exp(x.l) / sum
	}
	return out
}

func TestGreedyIsArgmax(t *testing.T) {
	var s Sampler
	l := randomLogits(1000, 1)
	best := int32(0)
	for i, v := range l {
		if v > l[best] {
			best = int32(i)
		}
	}
	if got := s.Sample(l, Params{}, 1, 0); got != best {
		t.Fatalf("greedy %d, argmax %d", got, best)
	}
}

func TestDistributionMatchesReference(t *testing.T) {
	tests := []Params{
		{Temperature: 1},
		{Temperature: 0.7, TopK: 5},
		{Temperature: 1.3, TopP: 0.8},
		{Temperature: 1, MinP: 0.1},
		{Temperature: 0.9, TopK: 8, TopP: 0.9, MinP: 0.05},
	}
	l := randomLogits(40, 3)
	for _, p := range tests {
		ref := reference(l, p)
		var s Sampler
		counts := map[int32]int{}
		const n = 40000
		for step := uint64(0); step < n; step++ {
			id := s.Sample(l, p, 42, step)
			if _, ok := ref[id]; !ok {
				t.Fatalf("%+v: sampled %d outside the allowed set", p, id)
			}
			counts[id]++
		}
		for id, want := range ref {
			got := float64(counts[id]) / n
			if math.Abs(got-want) > 4*math.Sqrt(want*(1-want)/n)+1e-3 {
				t.Errorf("%+v: token %d frequency %.4f, reference %.4f", p, id, got, want)
			}
		}
	}
}

func TestSeedReproducible(t *testing.T) {
	l := randomLogits(100, 5)
	var a, b Sampler
	p := Params{Temperature: 1, TopP: 0.95}
	for step := uint64(0); step < 50; step++ {
		if a.Sample(l, p, 9, step) != b.Sample(l, p, 9, step) {
			t.Fatal("same seed and step gave different tokens")
		}
	}
}

func TestLogSoftmaxAt(t *testing.T) {
	l := randomLogits(50, 8)
	var sum float64
	for _, v := range l {
		sum += math.Exp(float64(v))
	}
	lp, top := LogSoftmaxAt(l, 3, 5, nil)
	if want := float64(l[3]) - math.Log(sum); math.Abs(float64(lp)-want) > 1e-5 {
		t.Fatalf("logprob %v want %v", lp, want)
	}
	if len(top) != 5 {
		t.Fatal(len(top))
	}
	for i := 1; i < len(top); i++ {
		if top[i].Logprob > top[i-1].Logprob {
			t.Fatal("top not descending")
		}
	}
	for i, v := range l {
		if float64(v)-math.Log(sum) > float64(top[4].Logprob)+1e-6 {
			found := false
			for _, c := range top {
				found = found || c.Token == int32(i)
			}
			if !found {
				t.Fatalf("token %d belongs in the top 5", i)
			}
		}
	}
}
