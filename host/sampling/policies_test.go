package sampling

import (
	"context"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"testing"

	"github.com/kvhost/kvhost/sdk/sampler"
)

// Native float64 references of the built-in policies (plugins/<name>/*.c),
// written from the papers' definitions. Each takes the candidates the host
// passed (ids, logits, logprobs, n, sorted descending) and returns the
// chosen candidate's index, or -1 when it cannot say (only the allowed set
// is checked then).

func probs(lp []float32, n int) []float64 {
	w := make([]float64, n)
	for i := range w {
		w[i] = math.Exp(float64(lp[i]))
	}
	return w
}

func pick(w []float64, u float64) int {
	var sum float64
	for _, x := range w {
		sum += x
	}
	r := u * sum
	for i, x := range w {
		r -= x
		if r < 0 {
			return i
		}
	}
	return len(w) - 1
}

// standardRef: top-k, then min-p (p ≥ min_p·p_max), then top-p, then draw.
func standardRef(lp []float32, n int, topK int, topP, minP float64, seed, step uint64) (int, int) {
	if topK > 0 && topK < n {
		n = topK
	}
	m := 1
	for m < n && float64(lp[m]) >= float64(lp[0])+math.Log(minP) {
		m++
	}
	if minP > 0 {
		n = m
	}
	w := probs(lp, n)
	if topP > 0 && topP < 1 {
		var total, acc float64
		for _, x := range w {
			total += x
		}
		for i, x := range w {
			acc += x
			if acc >= topP*total {
				w = w[:i+1]
				break
			}
		}
	}
	return pick(w, sampler.Rand(seed, step, 0)), len(w)
}

// typicalRef returns the allowed set and the pick.
func typicalRef(lp []float32, n int, typ float64, seed, step uint64) (int, []int) {
	w := probs(lp, n)
	var sum, ent float64
	for _, x := range w {
		sum += x
	}
	for i := range w {
		w[i] /= sum
		ent -= w[i] * math.Log(w[i])
	}
	order := make([]int, n)
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool {
		return math.Abs(-math.Log(w[order[a]])-ent) < math.Abs(-math.Log(w[order[b]])-ent)
	})
	m := n
	if typ < 1 {
		var acc float64
		for i, o := range order {
			acc += w[o]
			if acc >= typ {
				m = i + 1
				break
			}
		}
	}
	kept := make([]float64, m)
	for i := range kept {
		kept[i] = w[order[i]]
	}
	return order[pick(kept, sampler.Rand(seed, step, 0))], order[:m]
}

// mirostatRef: one Mirostat 2.0 step; returns the pick and the new mu.
func mirostatRef(lp []float32, n int, tau, eta, mu float64, seed, step uint64) (int, float64) {
	w := probs(lp, n)
	var sum float64
	for _, x := range w {
		sum += x
	}
	m := 1
	for m < n && -math.Log2(w[m]/sum) <= mu {
		m++
	}
	i := pick(w[:m], sampler.Rand(seed, step, 0))
	var kept float64
	for _, x := range w[:m] {
		kept += x
	}
	return i, mu - eta*(-math.Log2(w[i]/kept)-tau)
}

// dryRef: the penalty each candidate gets for extending a repeat.
func dryRef(ids []int32, n int, hist []int32, mult, base float64, allowed int) []float64 {
	pen := make([]float64, n)
	for j := 1; j < len(hist); j++ {
		L := 0
		for L < 64 && L < j && hist[j-1-L] == hist[len(hist)-1-L] {
			L++
		}
		if L < allowed {
			continue
		}
		if i := slices.Index(ids[:n], hist[j]); i >= 0 {
			pen[i] = math.Max(pen[i], mult*math.Pow(base, float64(L-allowed)))
		}
	}
	return pen
}

// xtcRef returns the first index allowed and the pick.
func xtcRef(lp []float32, n int, thr, prob float64, seed, step uint64) (int, int) {
	w := probs(lp, n)
	var sum float64
	for _, x := range w {
		sum += x
	}
	first := 0
	if sampler.Rand(seed, step, 1) < prob {
		above := 0
		for above < n && w[above]/sum >= thr {
			above++
		}
		if above >= 2 {
			first = above - 1
		}
	}
	return first + pick(w[first:], sampler.Rand(seed, step, 0)), first
}

// sigmaRef returns how many candidates are within n·σ of the best, and the pick.
func sigmaRef(logits, lp []float32, n int, nsig float64, seed, step uint64) (int, int) {
	var mean, vr float64
	for _, l := range logits[:n] {
		mean += float64(l)
	}
	mean /= float64(n)
	for _, l := range logits[:n] {
		vr += (float64(l) - mean) * (float64(l) - mean)
	}
	cut := float64(logits[0]) - nsig*math.Sqrt(vr/float64(n))
	m := 1
	for m < n && float64(logits[m]) >= cut {
		m++
	}
	return pick(probs(lp, m), sampler.Rand(seed, step, 0)), m
}

// policyCase runs a policy on random rows and hands each row's candidates
// (recomputed with the host pre-ops) and the answer to check, which
// returns whether the reference agreed exactly.
func policyCase(t *testing.T, r *Registry, policy string, params map[string]any, hist func(i int) []int32,
	check func(t *testing.T, seq *SeqState, ids []int32, logits, lp []float32, n int, got int) bool) {
	t.Helper()
	const batch, rounds = 48, 6
	c := mustValidate(t, r, policy, params)
	g := r.entry(policy).acquire()
	defer g.Release()
	k := g.Value.mod.K()
	agree, total := 0, 0
	for round := range rounds {
		rows := batchOf(batch, 600, uint64(100+round))
		seqs := make([]SeqState, batch)
		for i := range seqs {
			seqs[i] = SeqState{Params: c, Seed: uint64(round*batch + i), Step: uint64(round)}
			if hist != nil {
				seqs[i].Generated = hist(i)
			}
		}
		out := make([]Choice, batch)
		if err := r.SampleBatch(context.Background(), policy, rows, seqs, out); err != nil {
			t.Fatal(err)
		}
		var rs rowScratch
		ids, logits, lp := make([]int32, k), make([]float32, k), make([]float32, k)
		for i := range rows {
			seq := &seqs[i]
			n := rs.candidates(rows[i], seq, &seq.Params.host, g.Value.schema.ops, k, ids, logits, lp)
			got := slices.Index(ids[:n], out[i].Token)
			if got < 0 {
				t.Fatalf("row %d: token %d is not a candidate", i, out[i].Token)
			}
			total++
			if check(t, seq, ids, logits, lp, n, got) {
				agree++
			}
		}
	}
	// C's exp/log and Go's may differ in the last bit, which can move a
	// cumulative pick across a boundary: allow 1 % disagreement.
	if agree < total*99/100 {
		t.Fatalf("reference agreed on %d of %d picks", agree, total)
	}
}

func TestPolicyStandard(t *testing.T) {
	r := newRegistry(t, Options{})
	for _, p := range []map[string]any{
		{"temperature": 0.8},
		{"temperature": 1.2, "min_p": 0.1},
		{"temperature": 1, "top_k": 5, "top_p": 0.9},
		{"temperature": 0.7, "top_p": 0.5, "min_p": 0.02},
	} {
		policyCase(t, r, "standard", p, nil, func(t *testing.T, seq *SeqState, ids []int32, logits, lp []float32, n, got int) bool {
			minP, _ := p["min_p"].(float64)
			topK, _ := p["top_k"].(int)
			if minP > 0 && math.Exp(float64(lp[got]-lp[0])) < minP*(1-1e-5) {
				t.Fatalf("%v: min-p violated: p/pmax = %v", p, math.Exp(float64(lp[got]-lp[0])))
			}
			if topK > 0 && got >= topK {
				t.Fatalf("%v: rank %d beyond top_k", p, got)
			}
			topP := 1.0
			if v, ok := p["top_p"].(float64); ok {
				topP = v
			}
			want, _ := standardRef(lp, n, topK, topP, minP, seq.Seed, seq.Step)
			return want == got
		})
	}
}

func TestPolicyTypical(t *testing.T) {
	r := newRegistry(t, Options{})
	policyCase(t, r, "typical", map[string]any{"typical_p": 0.5}, nil, func(t *testing.T, seq *SeqState, ids []int32, logits, lp []float32, n, got int) bool {
		want, allowed := typicalRef(lp, n, 0.5, seq.Seed, seq.Step)
		if !slices.Contains(allowed, got) && len(allowed) > 1 {
			// the boundary can differ by rounding; the set must still be close
			if !slices.Contains(allowed, got-1) && !slices.Contains(allowed, got+1) {
				t.Fatalf("typical: candidate %d outside the typical set %v", got, allowed)
			}
		}
		return want == got
	})
}

func TestPolicyXTC(t *testing.T) {
	r := newRegistry(t, Options{})
	policyCase(t, r, "xtc", map[string]any{"xtc_threshold": 0.05, "xtc_probability": 1.0, "temperature": 1.5}, nil,
		func(t *testing.T, seq *SeqState, ids []int32, logits, lp []float32, n, got int) bool {
			want, first := xtcRef(lp, n, 0.05, 1, seq.Seed, seq.Step)
			if got < first {
				t.Fatalf("xtc kept top choice %d (first allowed %d)", got, first)
			}
			return want == got
		})
	policyCase(t, r, "xtc", map[string]any{"xtc_probability": 0.0}, nil,
		func(t *testing.T, seq *SeqState, ids []int32, logits, lp []float32, n, got int) bool {
			want, _ := xtcRef(lp, n, 0.1, 0, seq.Seed, seq.Step)
			return want == got
		})
}

func TestPolicyTopNSigma(t *testing.T) {
	r := newRegistry(t, Options{})
	policyCase(t, r, "top-n-sigma", map[string]any{"n_sigma": 0.5}, nil, func(t *testing.T, seq *SeqState, ids []int32, logits, lp []float32, n, got int) bool {
		want, m := sigmaRef(logits, lp, n, 0.5, seq.Seed, seq.Step)
		if got >= m+1 {
			t.Fatalf("top-n-sigma returned rank %d, only %d within n·σ", got, m)
		}
		return want == got
	})
}

func TestPolicyDRY(t *testing.T) {
	r := newRegistry(t, Options{})
	// Histories that end with a repeat of "1 2 3": extending it with 4 is
	// penalised; ids 1..4 are boosted by bias so they are candidates.
	hist := func(i int) []int32 { return []int32{9, 1, 2, 3, 4, 7, 8, 1, 2, 3} }
	params := map[string]any{"dry_multiplier": 2.0, "dry_base": 1.75, "dry_allowed_length": 2, "temperature": 1}
	policyCase(t, r, "dry", params, hist, func(t *testing.T, seq *SeqState, ids []int32, logits, lp []float32, n, got int) bool {
		pen := dryRef(ids, n, seq.Generated, 2, 1.75, 2)
		if i := slices.Index(ids[:n], 4); i >= 0 && pen[i] != 2*1.75 {
			t.Fatalf("token 4 extends a 3-gram repeat: penalty %v, want %v", pen[i], 2*1.75)
		}
		w := make([]float64, n)
		mx := math.Inf(-1)
		for i := range w {
			w[i] = float64(logits[i]) - pen[i]
			mx = math.Max(mx, w[i])
		}
		for i := range w {
			w[i] = math.Exp(w[i] - mx)
		}
		return pick(w, sampler.Rand(seq.Seed, seq.Step, 0)) == got
	})
	// The defining effect: with the continuation at the top, DRY moves
	// picks away from it.
	row := make([]float32, 50)
	row[4] = 3
	count := func(mult float64) int {
		c := mustValidate(t, r, "dry", map[string]any{"dry_multiplier": mult})
		hits := 0
		for s := range 200 {
			out := make([]Choice, 1)
			seqs := []SeqState{{Params: c, Seed: uint64(s), Generated: hist(0)}}
			if err := r.SampleBatch(context.Background(), "dry", [][]float32{row}, seqs, out); err != nil {
				t.Fatal(err)
			}
			if out[0].Token == 4 {
				hits++
			}
		}
		return hits
	}
	off, on := count(0), count(3)
	if !(on < off/3) {
		t.Fatalf("DRY picked the repeat %d/200 times with the penalty, %d/200 without", on, off)
	}
}

// TestPolicyMirostat: mu follows the reference trajectory and the
// observed surprise tracks tau.
func TestPolicyMirostat(t *testing.T) {
	r := newRegistry(t, Options{})
	const tau, eta = 3.0, 0.1
	c := mustValidate(t, r, "mirostat", map[string]any{"tau": tau, "eta": eta})
	g := r.entry("mirostat").acquire()
	k := g.Value.mod.K()
	ops := g.Value.schema.ops
	g.Release()
	rng := rand.New(rand.NewPCG(3, 3))
	row := make([]float32, 2000)
	for i := range row {
		row[i] = float32(-1.2*math.Log(float64(i+1)) + 0.1*rng.NormFloat64()) // Zipf-like
	}
	seq := []SeqState{{Params: c, Seed: 11}}
	mu := 2 * tau
	var rs rowScratch
	ids, logits, lp := make([]int32, k), make([]float32, k), make([]float32, k)
	var surprise float64
	const steps = 400
	agree := 0
	for step := range steps {
		seq[0].Step = uint64(step)
		out := make([]Choice, 1)
		if err := r.SampleBatch(context.Background(), "mirostat", [][]float32{row}, seq, out); err != nil {
			t.Fatal(err)
		}
		n := rs.candidates(row, &seq[0], &seq[0].Params.host, ops, k, ids, logits, lp)
		want, next := mirostatRef(lp, n, tau, eta, mu, 11, uint64(step))
		got := slices.Index(ids[:n], out[0].Token)
		if got == want {
			agree++
		}
		// Follow the plugin's choice to keep the trajectories comparable.
		w := probs(lp, n)
		var kept float64
		m := 1
		var sum float64
		for _, x := range w {
			sum += x
		}
		for m < n && -math.Log2(w[m]/sum) <= mu {
			m++
		}
		for _, x := range w[:m] {
			kept += x
		}
		s := -math.Log2(w[got] / kept)
		next = mu - eta*(s-tau)
		if math.Abs(next-float64(seq[0].State[1])) > 1e-3*math.Max(1, math.Abs(next)) {
			t.Fatalf("step %d: mu %v, reference %v", step, seq[0].State[1], next)
		}
		mu = float64(seq[0].State[1])
		if step >= steps/2 {
			surprise += -math.Log2(w[got] / sum)
		}
	}
	if agree < steps*99/100 {
		t.Fatalf("reference agreed on %d of %d picks", agree, steps)
	}
	if mean := surprise / (steps / 2); math.Abs(mean-tau) > 0.75 {
		t.Fatalf("mean surprise %.2f bits, target %.1f", mean, tau)
	}
}
