package cpu

import (
	"math"
	"sort"
)

// refRoute transcribes the routers of transformers' and DeepSeek's model
// code in float64 for one token: scores, group mask, top-k by sorting, the
// weights. It returns the chosen experts (descending selection score) and
// their weights, plus every expert's selection value and the allowed mask,
// which the tests use to tell a near-tie from a wrong choice.
func refRoute(r Router, logits []float32, bias []float32) (ids []int, w []float64, sel []float64, allowed []bool) {
	e := r.Experts
	scores := make([]float64, e)
	switch r.Scoring {
	case ScoreSoftmax:
		mx := math.Inf(-1)
		for _, l := range logits[:e] {
			mx = math.Max(mx, float64(l))
		}
		var sum float64
		for i, l := range logits[:e] {
			scores[i] = math.Exp(float64(l) - mx)
			sum += scores[i]
		}
		for i := range scores {
			scores[i] /= sum
		}
	case ScoreSigmoid:
		for i, l := range logits[:e] {
			scores[i] = 1 / (1 + math.Exp(-float64(l)))
		}
	default:
		for i, l := range logits[:e] {
			scores[i] = float64(l)
		}
	}
	sel = make([]float64, e)
	for i := range sel {
		sel[i] = scores[i]
		if bias != nil {
			sel[i] += float64(bias[i])
		}
	}
	allowed = make([]bool, e)
	for i := range allowed {
		allowed[i] = true
	}
	if r.Groups > 1 {
		size := e / r.Groups
		gs := make([]float64, r.Groups)
		for g := range gs {
			grp := append([]float64(nil), sel[g*size:(g+1)*size]...)
			sort.Sort(sort.Reverse(sort.Float64Slice(grp)))
			gs[g] = grp[0]
			if r.GroupScoring == GroupTop2Sum {
				gs[g] = grp[0] + grp[1]
			}
		}
		order := make([]int, r.Groups)
		for i := range order {
			order[i] = i
		}
		sort.SliceStable(order, func(a, b int) bool { return gs[order[a]] > gs[order[b]] })
		for i := range allowed {
			allowed[i] = false
		}
		for _, g := range order[:r.TopKGroups] {
			for i := g * size; i < (g+1)*size; i++ {
				allowed[i] = true
			}
		}
	}
	var cand []int
	for i := range e {
		if allowed[i] {
			cand = append(cand, i)
		}
	}
	sort.SliceStable(cand, func(a, b int) bool { return sel[cand[a]] > sel[cand[b]] })
	ids = cand[:r.TopK]
	w = make([]float64, r.TopK)
	for j, id := range ids {
		w[j] = scores[id]
	}
	if r.Scoring == ScoreSoftmaxTopK {
		mx := math.Inf(-1)
		for _, v := range w {
			mx = math.Max(mx, v)
		}
		var sum float64
		for j := range w {
			w[j] = math.Exp(w[j] - mx)
			sum += w[j]
		}
		for j := range w {
			w[j] /= sum
		}
	}
	if r.NormTopK {
		var sum float64
		for _, v := range w {
			sum += v
		}
		for j := range w {
			w[j] /= sum
		}
	}
	scale := float64(r.Scale)
	if scale == 0 {
		scale = 1
	}
	for j := range w {
		w[j] *= scale
	}
	return ids, w, sel, allowed
}

// refSwiGLUExpert is one dense expert in float64: down(silu(gate·x)·(up·x)).
func refSwiGLUExpert(x []float32, gate, up, down []float64, hidden, ff int, q8 bool) []float64 {
	xs := make([]float64, hidden)
	for k := range hidden {
		xs[k] = float64(x[k])
	}
	if q8 {
		refQ8Round(xs)
	}
	h := make([]float64, ff)
	for f := range ff {
		var g, u float64
		for k := range hidden {
			g += gate[f*hidden+k] * xs[k]
			u += up[f*hidden+k] * xs[k]
		}
		h[f] = float64(float32(g / (1 + math.Exp(-g)) * u))
	}
	if q8 {
		refQ8Round(h)
	}
	out := make([]float64, hidden)
	for o := range hidden {
		for f := range ff {
			out[o] += down[o*ff+f] * h[f]
		}
	}
	return out
}

// refQ8Round replaces v, in blocks of 32, by its Q8 approximation d·q with
// d = max|v|/127 and q = round-half-even(v/d): the activation rows a
// block-quantized MatMul multiplies (llama.cpp's q8 activations), written
// here from that definition.
func refQ8Round(v []float64) {
	for b := 0; b+32 <= len(v); b += 32 {
		var amax float64
		for _, x := range v[b : b+32] {
			amax = math.Max(amax, math.Abs(x))
		}
		d := float64(float32(amax / 127))
		if d == 0 {
			continue
		}
		for i := b; i < b+32; i++ {
			v[i] = d * math.RoundToEven(v[i]/d)
		}
	}
}
