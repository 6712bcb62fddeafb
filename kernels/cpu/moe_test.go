package cpu

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// The routers of the models this package serves, from their HF configs
// (DeepSeek-V2 full size: 160 experts, 8 groups of which 3, top 6, ×16).
var routers = map[string]Router{
	"qwen3-moe":        {Experts: 128, TopK: 8, Scoring: ScoreSoftmax, NormTopK: true},
	"deepseek-v2-lite": {Experts: 64, TopK: 6, Scoring: ScoreSoftmax, Scale: 1},
	"deepseek-v2":      {Experts: 160, TopK: 6, Scoring: ScoreSoftmax, Groups: 8, TopKGroups: 3, GroupScoring: GroupMax, Scale: 16},
	"deepseek-v3":      {Experts: 256, TopK: 8, Scoring: ScoreSigmoid, Groups: 8, TopKGroups: 4, GroupScoring: GroupTop2Sum, NormTopK: true, Scale: 2.5},
	"gpt-oss":          {Experts: 32, TopK: 4, Scoring: ScoreSoftmaxTopK},
}

// spreadLogits draws logits whose selection values are far apart compared
// with float32 rounding (a random permutation of a grid plus small noise),
// so the float32 kernel and the float64 reference agree on every choice.
func spreadLogits(r *rand.Rand, n, e int, step float64) []float32 {
	out := make([]float32, n*e)
	for i := range n {
		perm := r.Perm(e)
		for j := range e {
			out[i*e+j] = float32(float64(perm[j]-e/2)*step + (r.Float64()-0.5)*step*0.2)
		}
	}
	return out
}

func TestRouteMatchesReference(t *testing.T) {
	pools := []*Pool{nil, NewPool(3)}
	defer pools[1].Close()
	for name, rt := range routers {
		for _, p := range pools {
			impls(t, func(t *testing.T) {
				r := newRand(uint64(len(name)))
				n := 37
				logits := spreadLogits(r, n, rt.Experts, 0.05)
				var bias []float32
				if rt.Scoring == ScoreSigmoid {
					bias = make([]float32, rt.Experts)
					for e := range bias {
						bias[e] = float32(r.IntN(21)-10) * 0.0005
					}
				}
				orig := append([]float32(nil), logits...)
				ids := make([]int32, n*rt.TopK)
				w := make([]float32, n*rt.TopK)
				p.Route(rt, logits, n, bias, ids, w)
				for i := range n {
					wantIDs, wantW, sel, allowed := refRoute(rt, orig[i*rt.Experts:], bias)
					for j := range rt.TopK {
						got := int(ids[i*rt.TopK+j])
						if got != wantIDs[j] {
							t.Fatalf("%s threads %d: token %d choice %d is expert %d (value %v), want %d (%v)", name, p.Threads(), i, j, got, sel[got], wantIDs[j], sel[wantIDs[j]])
						}
						if !allowed[got] {
							t.Fatalf("%s: token %d chose expert %d outside the chosen groups", name, i, got)
						}
						if !near(w[i*rt.TopK+j], wantW[j], 2e-6*math.Max(1, math.Abs(wantW[j]))) {
							t.Fatalf("%s threads %d: token %d weight %d = %v, want %v", name, p.Threads(), i, j, w[i*rt.TopK+j], wantW[j])
						}
					}
				}
			})
		}
	}
}

// TestRouteHandWorked routes tokens whose answers are worked out by hand.
func TestRouteHandWorked(t *testing.T) {
	ln := func(v float64) float32 { return float32(math.Log(v)) }
	for _, c := range []struct {
		name   string
		r      Router
		logits []float32
		bias   []float32
		ids    []int32
		w      []float64
	}{
		// softmax(ln 1, ln 2, ln 3, ln 1) = (1, 2, 3, 1)/7; top 2 = experts
		// 2 and 1 with 3/7 and 2/7, normalised to 0.6 and 0.4.
		{"softmax-norm", Router{Experts: 4, TopK: 2, NormTopK: true}, []float32{0, ln(2), ln(3), 0}, nil, []int32{2, 1}, []float64{0.6, 0.4}},
		{"softmax-scaled", Router{Experts: 4, TopK: 2, Scale: 7}, []float32{0, ln(2), ln(3), 0}, nil, []int32{2, 1}, []float64{3, 2}},
		// Exact ties go to the lowest index: experts 1 and 3 tie for first,
		// 0 and 2 for third.
		{"ties", Router{Experts: 4, TopK: 3}, []float32{1, 2, 1, 2}, nil, []int32{1, 3, 0}, []float64{
			math.E / (2*math.E + 2*math.E*math.E) * math.E, math.E * math.E / (2*math.E + 2*math.E*math.E), math.E / (2*math.E + 2*math.E*math.E)}},
		// NaN loses to every number.
		{"nan", Router{Experts: 3, TopK: 2, Scoring: ScoreSoftmaxTopK}, []float32{float32(math.NaN()), 0, ln(3)}, nil, []int32{2, 1}, []float64{0.75, 0.25}},
		// gpt-oss: softmax over the two selected logits ln 3 and ln 1.
		{"softmax-topk", Router{Experts: 4, TopK: 2, Scoring: ScoreSoftmaxTopK}, []float32{-5, ln(3), 0, -1}, nil, []int32{1, 2}, []float64{0.75, 0.25}},
		// DeepSeek-V3: every sigmoid(0) is exactly 0.5, so the bias decides.
		// Groups of 2: biased {0.5, 0.75} {0.75, 0.25} {0.5, 0.5}
		// {0.125, 0.75}; top-2 sums 1.25, 1, 1, 0.875 → groups 0 and 1 (1
		// beats 2 on the tie). Experts 1 and 2 tie at 0.75 → 1 first. The
		// weights are the unbiased 0.5s times 2 (1.5 would mean the bias
		// leaked into them).
		{"noaux-tc", Router{Experts: 8, TopK: 2, Scoring: ScoreSigmoid, Groups: 4, TopKGroups: 2, GroupScoring: GroupTop2Sum, Scale: 2},
			make([]float32, 8),
			[]float32{0, 0.25, 0.25, -0.25, 0, 0, -0.375, 0.25},
			[]int32{1, 2}, []float64{1, 1}},
		// DeepSeek-V2 group_limited_greedy: the group's best score ranks it.
		// softmax of (0, 3, 2.9, 2.9, 0, 0) over groups {0,1} {2,3} {4,5}:
		// maxima e³, e^2.9, 1 → groups 0 and 1; the top 3 are 1, 2, 3.
		{"group-max", Router{Experts: 6, TopK: 3, Groups: 3, TopKGroups: 2, GroupScoring: GroupMax},
			[]float32{0, 3, 2.9, 2.9, 0, 0}, nil, []int32{1, 2, 3}, nil},
		// Top-2 sum picks the other group: sums e³+1 vs 2e^2.9 vs 2.
		{"group-top2", Router{Experts: 6, TopK: 1, Groups: 3, TopKGroups: 1, GroupScoring: GroupTop2Sum},
			[]float32{0, 3, 2.9, 2.9, 0, 0}, nil, []int32{2}, nil},
	} {
		ids := make([]int32, len(c.ids))
		w := make([]float32, len(c.ids))
		logits := append([]float32(nil), c.logits...)
		var p *Pool
		p.Route(c.r, logits, 1, c.bias, ids, w)
		for j := range ids {
			if ids[j] != c.ids[j] {
				t.Errorf("%s: experts %v, want %v", c.name, ids, c.ids)
				break
			}
			if c.w != nil && !near(w[j], c.w[j], 1e-6) {
				t.Errorf("%s: weights %v, want %v", c.name, w, c.w)
				break
			}
		}
	}
}

func TestRouterValidate(t *testing.T) {
	for _, r := range routers {
		if err := r.Validate(); err != nil {
			t.Errorf("%+v: %v", r, err)
		}
	}
	for _, r := range []Router{
		{Experts: 0, TopK: 1},
		{Experts: MaxRouterExperts + 1, TopK: 1},
		{Experts: 8, TopK: 9},
		{Experts: 8, TopK: 0},
		{Experts: 8, TopK: 2, Scoring: 3},
		{Experts: 8, TopK: 2, Scale: -1},
		{Experts: 8, TopK: 2, Scale: float32(math.Inf(1))},
		{Experts: 8, TopK: 2, Groups: 3, TopKGroups: 1},
		{Experts: 8, TopK: 2, Groups: 4, TopKGroups: 0},
		{Experts: 8, TopK: 2, Groups: 4, TopKGroups: 5},
		{Experts: 8, TopK: 5, Groups: 4, TopKGroups: 2},
		{Experts: 8, TopK: 2, Groups: 8, TopKGroups: 2, GroupScoring: GroupTop2Sum},
		{Experts: 8, TopK: 2, Groups: 4, TopKGroups: 2, GroupScoring: 2},
		{Experts: 128 * 8, TopK: 2, Groups: 128, TopKGroups: 2},
	} {
		if err := r.Validate(); err == nil {
			t.Errorf("%+v accepted", r)
		}
	}
}

func TestGroupByExpert(t *testing.T) {
	g := NewExpertGroups(5, 2, 4)
	ids := []int32{3, 1, 1, 0, 3, 4, 1, 3}
	w := []float32{0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8}
	if err := g.Group(ids, w, 4); err != nil {
		t.Fatal(err)
	}
	// Expert 0: token 1; expert 1: tokens 0, 1, 3; expert 2: none;
	// expert 3: tokens 0, 2, 3; expert 4: token 2.
	wantOff := []int32{0, 1, 4, 4, 7, 8}
	wantTok := []int32{1, 0, 1, 3, 0, 2, 3, 2}
	wantW := []float32{0.4, 0.2, 0.3, 0.7, 0.1, 0.5, 0.8, 0.6}
	for i, v := range wantOff {
		if g.Offsets[i] != v {
			t.Fatalf("offsets %v, want %v", g.Offsets, wantOff)
		}
	}
	for i := range wantTok {
		if g.Tokens[i] != wantTok[i] || g.Weights[i] != wantW[i] {
			t.Fatalf("tokens %v weights %v, want %v %v", g.Tokens, g.Weights, wantTok, wantW)
		}
	}
	for i, e := range ids {
		s := g.Slots[i]
		if lo, hi := g.Rows(int(e)); int(s) < lo || int(s) >= hi || g.Tokens[s] != int32(i/2) || g.Weights[s] != w[i] {
			t.Fatalf("slot of choice %d is grouped row %d (expert %d rows %d..%d)", i, s, e, lo, hi)
		}
	}
	for _, bad := range [][]int32{{5, 0}, {-1, 0}} {
		if err := g.Group(bad, w, 1); !errors.Is(err, ErrShape) {
			t.Errorf("ids %v: err %v, want ErrShape", bad, err)
		}
	}
	if err := g.Group(make([]int32, 10), make([]float32, 10), 5); !errors.Is(err, ErrShape) {
		t.Errorf("5 tokens in groups sized for 4: err %v, want ErrShape", err)
	}
}

// expertSlice is expert e's matrix in a GGUF-style 3-D expert tensor
// (rows e*per .. (e+1)*per of a [experts*per, cols] matrix).
func expertSlice(m Matrix, e, per int) Matrix {
	rb := m.rowBytes()
	return Matrix{Type: m.Type, Rows: per, Cols: m.Cols, Data: m.Data[e*per*rb : (e+1)*per*rb]}
}

// TestGroupedMoEEqualsDense runs a whole routed-expert block the grouped way
// (Route, Group, gather, one MatMul per expert on its rows, ScatterAdd on
// top of a shared expert's output) and compares it with a dense float64 loop
// over every expert weighted by the router (zero for the unchosen).
func TestGroupedMoEEqualsDense(t *testing.T) {
	const hidden, ff, n = 64, 32, 13
	pools := []*Pool{nil, NewPool(3)}
	defer func() {
		for _, p := range pools {
			p.Close()
		}
	}()
	for _, name := range []string{"qwen3-moe", "deepseek-v3", "gpt-oss"} {
		rt := routers[name]
		for _, dt := range []DType{F32, BF16, Q8_0} {
			for _, p := range pools {
				impls(t, func(t *testing.T) {
					r := newRand(7)
					router := makeMatrix(t, r, F32, rt.Experts, hidden)
					gate := makeMatrix(t, r, dt, rt.Experts*ff, hidden)
					up := makeMatrix(t, r, dt, rt.Experts*ff, hidden)
					down := makeMatrix(t, r, dt, rt.Experts*hidden, ff)
					x := randVec(r, n*hidden, 1)
					var bias []float32
					if rt.Scoring == ScoreSigmoid {
						bias = randVec(r, rt.Experts, 0.01)
					}
					// Reference: dense over all experts, float64.
					logits64, _ := refMatMul(x, n, router)
					gateRef := make([][]float64, rt.Experts)
					upRef := make([][]float64, rt.Experts)
					downRef := make([][]float64, rt.Experts)
					for e := range rt.Experts {
						gateRef[e] = refDecodeMatrix(expertSlice(gate, e, ff))
						upRef[e] = refDecodeMatrix(expertSlice(up, e, ff))
						downRef[e] = refDecodeMatrix(expertSlice(down, e, hidden))
					}
					want := make([]float64, n*hidden)
					shared := randVec(r, n*hidden, 1) // a shared expert's output, accumulated onto
					for i := range n {
						l32 := make([]float32, rt.Experts)
						for e := range l32 {
							l32[e] = float32(logits64[i*rt.Experts+e])
						}
						ids, w, _, _ := refRoute(rt, l32, bias)
						dense := make([]float64, rt.Experts)
						for j, id := range ids {
							dense[id] = w[j]
						}
						for o := range hidden {
							want[i*hidden+o] = float64(shared[i*hidden+o])
						}
						for e := range rt.Experts {
							if dense[e] == 0 {
								continue
							}
							y := refSwiGLUExpert(x[i*hidden:], gateRef[e], upRef[e], downRef[e], hidden, ff, dt.Quantized())
							for o := range hidden {
								want[i*hidden+o] += dense[e] * y[o]
							}
						}
					}
					// Grouped execution.
					logits := make([]float32, n*rt.Experts)
					p.MatMul(logits, x, n, router)
					ids := make([]int32, n*rt.TopK)
					weights := make([]float32, n*rt.TopK)
					p.Route(rt, logits, n, bias, ids, weights)
					g := NewExpertGroups(rt.Experts, rt.TopK, n)
					if err := g.Group(ids, weights, n); err != nil {
						t.Fatal(err)
					}
					rows := n * rt.TopK
					xs := make([]float32, rows*hidden)
					for j, tok := range g.Tokens[:rows] {
						copy(xs[j*hidden:(j+1)*hidden], x[int(tok)*hidden:])
					}
					hg := make([]float32, rows*ff)
					hu := make([]float32, rows*ff)
					ys := make([]float32, rows*hidden)
					used := 0
					for e := range rt.Experts {
						lo, hi := g.Rows(e)
						if lo == hi {
							continue
						}
						used++
						m := hi - lo
						p.MatMul(hg[lo*ff:hi*ff], xs[lo*hidden:hi*hidden], m, expertSlice(gate, e, ff))
						p.MatMul(hu[lo*ff:hi*ff], xs[lo*hidden:hi*hidden], m, expertSlice(up, e, ff))
						SiLUMul(hg[lo*ff:hi*ff], hg[lo*ff:hi*ff], hu[lo*ff:hi*ff])
						p.MatMul(ys[lo*hidden:hi*hidden], hg[lo*ff:hi*ff], m, expertSlice(down, e, hidden))
					}
					out := append([]float32(nil), shared...)
					p.ScatterAdd(out, ys, hidden, g, true)
					if used < 2 {
						t.Fatalf("only %d experts used: the test does not group", used)
					}
					// A block-quantized MatMul multiplies Q8-quantized
					// activation rows (as llama.cpp does), and so does the
					// reference for those weights (refQ8Round); a code that
					// rounds the other way at a tie is the rest.
					rel := 1e-4
					if dt.Quantized() {
						rel = 1e-3
					}
					checkRel(t, fmt.Sprintf("%s %s", name, dt), out, want, rel)
				})
			}
		}
	}
}

// refDecodeMatrix decodes every row of m to float64.
func refDecodeMatrix(m Matrix) []float64 {
	rb := m.rowBytes()
	out := make([]float64, 0, m.Rows*m.Cols)
	for r := range m.Rows {
		out = append(out, refDecode(m.Type, m.Data[r*rb:], m.Cols)...)
	}
	return out
}

// checkRel fails when got differs from want by more than tol relative to
// the largest |want| (the scale of the output).
func checkRel(t *testing.T, name string, got []float32, want []float64, tol float64) {
	t.Helper()
	var scale float64
	for _, v := range want {
		scale = math.Max(scale, math.Abs(v))
	}
	for i := range want {
		if d := math.Abs(float64(got[i]) - want[i]); d > tol*scale || got[i] != got[i] {
			t.Fatalf("%s: element %d = %v, want %v (|diff| %.3g > %.3g)", name, i, got[i], want[i], d, tol*scale)
		}
	}
}

func TestScatterAddOverwrites(t *testing.T) {
	g := NewExpertGroups(3, 2, 2)
	if err := g.Group([]int32{2, 0, 0, 1}, []float32{0.5, 2, 1, -1}, 2); err != nil {
		t.Fatal(err)
	}
	// Grouped rows: expert 0 → tokens 0, 1; expert 1 → token 1; expert 2 →
	// token 0. dim 2; y rows are the grouped rows' values.
	y := []float32{1, 2, 3, 4, 5, 6, 7, 8}
	out := []float32{100, 100, 100, 100}
	var p *Pool
	p.ScatterAdd(out, y, 2, g, false)
	// Token 0: 0.5·row 3 (7, 8) + 2·row 0 (1, 2) = (5.5, 8).
	// Token 1: 1·row 1 (3, 4) + -1·row 2 (5, 6) = (-2, -2).
	want := []float32{5.5, 8, -2, -2}
	for i := range want {
		if out[i] != want[i] {
			t.Fatalf("scatter %v, want %v", out, want)
		}
	}
}

// TestArchKernelsAllocateNothing: the router, the grouping, the scatter-add
// and the activations allocate nothing per call (the decode hot path).
func TestArchKernelsAllocateNothing(t *testing.T) {
	p := NewPool(2)
	defer p.Close()
	rt := routers["deepseek-v3"]
	const n, dim = 4, 256
	r := newRand(3)
	logits := spreadLogits(r, n, rt.Experts, 0.05)
	bias := randVec(r, rt.Experts, 0.01)
	ids := make([]int32, n*rt.TopK)
	w := make([]float32, n*rt.TopK)
	g := NewExpertGroups(rt.Experts, rt.TopK, n)
	y := randVec(r, n*rt.TopK*dim, 1)
	out := make([]float32, n*dim)
	gate, up := randVec(r, dim, 2), randVec(r, dim, 2)
	for _, pool := range []*Pool{nil, p} {
		if a := testing.AllocsPerRun(20, func() {
			pool.Route(rt, logits, n, bias, ids, w)
			if err := g.Group(ids, w, n); err != nil {
				t.Fatal(err)
			}
			pool.ScatterAdd(out, y, dim, g, false)
			GeGLUTanh(out[:dim], gate, up)
			SwiGLUOAI(out[:dim], gate, up, 1.702, 7)
			SoftCap(out, 30)
		}); a != 0 {
			t.Errorf("threads %d: %v allocations per step", pool.Threads(), a)
		}
	}
}
