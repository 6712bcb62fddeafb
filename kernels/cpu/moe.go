package cpu

import (
	"fmt"
	"math"
)

// RouterScoring is how a mixture-of-experts router turns its logits into
// the scores experts are selected by and weighted with.
type RouterScoring uint8

const (
	// ScoreSoftmax: softmax over all experts; the selected experts' scores
	// are their weights (Qwen3-MoE, DeepSeek-V2, Mixtral; GGUF
	// expert_gating_func 1).
	ScoreSoftmax RouterScoring = iota
	// ScoreSigmoid: an independent sigmoid per expert (DeepSeek-V3; GGUF
	// expert_gating_func 2).
	ScoreSigmoid
	// ScoreSoftmaxTopK: select on the raw logits, then softmax over the
	// selected ones only (gpt-oss; llama.cpp's SOFTMAX_WEIGHT, 3).
	ScoreSoftmaxTopK
)

// GroupScoring ranks expert groups for group-limited routing.
type GroupScoring uint8

const (
	// GroupMax: a group's score is its best expert's (DeepSeek-V2's
	// topk_method "group_limited_greedy").
	GroupMax GroupScoring = iota
	// GroupTop2Sum: the sum of its two best (biased) scores (DeepSeek-V3's
	// "noaux_tc"; what llama.cpp does for every grouped model).
	GroupTop2Sum
)

// Router limits: experts and groups a router may have (the selection keeps
// a bitset and the group scores on the stack).
const (
	MaxRouterExperts = 1024
	MaxRouterGroups  = 64
)

// Router is a mixture-of-experts routing rule. For each token it computes
// scores from the logits (Scoring), optionally restricts the choice to the
// TopKGroups best of Groups equal groups of consecutive experts (ranked by
// GroupScoring), selects the TopK best experts, and returns their weights:
// the selected scores (ScoreSoftmaxTopK: the softmax of the selected
// logits), divided by their sum when NormTopK, then multiplied by Scale.
//
// Selection compares scores plus the optional per-expert bias (DeepSeek-V3's
// e_score_correction_bias; GGUF exp_probs_b); weights never include the
// bias. Experts in groups that were not chosen are excluded outright, as
// DeepSeek's inference code, SGLang and llama.cpp do (HF's remote V3 code
// sets their biased score to 0 instead, which differs only when fewer than
// TopK allowed experts have a positive biased score).
//
// Ties go to the lowest index, for groups and experts alike; NaN scores lose
// to every number. Everything is float32 except the sums that normalise
// (softmax denominators, NormTopK), which are float64 as elsewhere here.
//
// DeepSeek-V2's HF code multiplies by routed_scaling_factor only when it does
// not normalise; V3 always does. A model reproduces V2 by passing Scale 1
// with NormTopK (no published V2 checkpoint normalises with a factor other
// than 1).
type Router struct {
	Experts, TopK      int
	Scoring            RouterScoring
	Groups, TopKGroups int // Groups <= 1: no group limit
	GroupScoring       GroupScoring
	NormTopK           bool
	Scale              float32 // routed_scaling_factor; 0 means 1
}

// Validate names the first field out of range.
func (r Router) Validate() error {
	switch {
	case r.Experts < 1 || r.Experts > MaxRouterExperts:
		return fmt.Errorf("cpu: router experts %d must be in [1, %d]", r.Experts, MaxRouterExperts)
	case r.TopK < 1 || r.TopK > r.Experts:
		return fmt.Errorf("cpu: router top-k %d must be in [1, experts %d]", r.TopK, r.Experts)
	case r.Scoring > ScoreSoftmaxTopK:
		return fmt.Errorf("cpu: router scoring %d unknown (softmax 0, sigmoid 1, softmax over the top-k 2)", r.Scoring)
	case r.Scale < 0 || math.IsInf(float64(r.Scale), 0) || r.Scale != r.Scale:
		return fmt.Errorf("cpu: router scale (routed_scaling_factor) %v must be finite and not negative", r.Scale)
	case r.Groups <= 1:
		return nil
	case r.Groups > MaxRouterGroups || r.Experts%r.Groups != 0:
		return fmt.Errorf("cpu: router groups %d must divide experts %d and be at most %d", r.Groups, r.Experts, MaxRouterGroups)
	case r.TopKGroups < 1 || r.TopKGroups > r.Groups:
		return fmt.Errorf("cpu: router top-k groups %d must be in [1, groups %d]", r.TopKGroups, r.Groups)
	case r.TopKGroups*(r.Experts/r.Groups) < r.TopK:
		return fmt.Errorf("cpu: router top-k groups %d × %d experts per group leaves fewer than top-k %d experts", r.TopKGroups, r.Experts/r.Groups, r.TopK)
	case r.GroupScoring > GroupTop2Sum:
		return fmt.Errorf("cpu: router group scoring %d unknown (max 0, top-2 sum 1)", r.GroupScoring)
	case r.GroupScoring == GroupTop2Sum && r.Experts/r.Groups < 2:
		return fmt.Errorf("cpu: router top-2 group scoring needs at least 2 experts per group, have %d", r.Experts/r.Groups)
	}
	return nil
}

// routeTask is one Route call split into chunks of tokens.
type routeTask struct {
	r          Router
	logits     []float32
	bias       []float32
	ids        []int32
	weights    []float32
	n, perTask int
	ch         chunker
}

func (t *routeTask) run(int) {
	for c := t.ch.take(); c >= 0; c = t.ch.take() {
		for i := c * t.perTask; i < min((c+1)*t.perTask, t.n); i++ {
			t.r.token(t.logits[i*t.r.Experts:(i+1)*t.r.Experts], t.bias, t.ids[i*t.r.TopK:(i+1)*t.r.TopK], t.weights[i*t.r.TopK:(i+1)*t.r.TopK])
		}
	}
}

// routeChunk is how many tokens one pool chunk routes.
const routeChunk = 16

// Route routes n tokens: logits is [n, r.Experts] and is overwritten with
// the scores (softmax or sigmoid; unchanged for ScoreSoftmaxTopK); ids and
// weights ([n, r.TopK]) receive each token's experts in descending order of
// selection score and their weights. bias is nil or r.Experts values. Tokens
// are split over the pool; nothing is allocated. Panics on an invalid router
// or short slices.
func (p *Pool) Route(r Router, logits []float32, n int, bias []float32, ids []int32, weights []float32) {
	if err := r.Validate(); err != nil {
		panic(err.Error())
	}
	if n < 0 || len(logits) < n*r.Experts || len(ids) < n*r.TopK || len(weights) < n*r.TopK || (bias != nil && len(bias) < r.Experts) {
		panic(fmt.Sprintf("cpu: route %d tokens of %d experts (top %d): logits %d, ids %d, weights %d, bias %d", n, r.Experts, r.TopK, len(logits), len(ids), len(weights), len(bias)))
	}
	if n == 0 {
		return
	}
	chunks := (n + routeChunk - 1) / routeChunk
	if p.Threads() == 1 || chunks == 1 {
		t := routeTask{r: r, logits: logits, bias: bias, ids: ids, weights: weights, n: n, perTask: routeChunk}
		t.ch.reset(chunks)
		t.run(0)
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.moe.route = routeTask{r: r, logits: logits, bias: bias, ids: ids, weights: weights, n: n, perTask: routeChunk}
	p.moe.route.ch.reset(chunks)
	p.parallel(&p.moe.route)
	p.moe.route = routeTask{}
}

// better reports whether score a beats b (NaN loses to every number; equal
// scores keep the earlier candidate, so callers scan in index order).
func better(a, b float32) bool { return a > b || (b != b && a == a) }

// sigmoidInPlace sets x = 1/(1 + e^(-x)), the exponentials through the
// vectorised exp (expSubSum with a zero maximum over the negated values):
// where e^(-x) would overflow the result is 0, as with expf's +Inf.
func sigmoidInPlace(x []float32) {
	for i := range x {
		x[i] = -x[i]
	}
	expSubSum(x, 0)
	for i, v := range x {
		x[i] = 1 / (1 + v)
	}
}

// token routes one token: s holds its logits and becomes its scores.
func (r Router) token(s, bias []float32, ids []int32, w []float32) {
	switch r.Scoring {
	case ScoreSoftmax:
		Softmax(s)
	case ScoreSigmoid:
		sigmoidInPlace(s)
	}
	sel := s
	var biased [MaxRouterExperts]float32
	if bias != nil {
		sel = biased[:r.Experts]
		for e := range sel {
			sel[e] = s[e] + bias[e]
		}
	}
	groups, size := 1, r.Experts
	var chosen [MaxRouterGroups]bool
	if r.Groups > 1 {
		groups, size = r.Groups, r.Experts/r.Groups
		var gs [MaxRouterGroups]float32
		for g := range groups {
			b1, b2 := float32(math.NaN()), float32(math.NaN())
			for _, v := range sel[g*size : (g+1)*size] {
				switch {
				case better(v, b1):
					b1, b2 = v, b1
				case better(v, b2):
					b2 = v
				}
			}
			gs[g] = b1
			if r.GroupScoring == GroupTop2Sum {
				gs[g] = b1 + b2
			}
		}
		for range r.TopKGroups {
			best := -1
			for g := range groups {
				if !chosen[g] && (best < 0 || better(gs[g], gs[best])) {
					best = g
				}
			}
			chosen[best] = true
		}
	} else {
		chosen[0] = true
	}
	// Keep ids/w as the list of the best so far, sorted by selection value
	// (w holds the values until the weights replace them). Experts arrive
	// in index order and only a strictly better one moves ahead, so equal
	// values keep the lower index first: the same order as repeated argmax
	// with lowest-index ties (the CUDA kernel's).
	k := r.TopK
	have := 0
	for g := range groups {
		if !chosen[g] {
			continue
		}
		for e := g * size; e < (g+1)*size; e++ {
			v := sel[e]
			if have == k && !better(v, w[k-1]) {
				continue
			}
			j := have
			if have == k {
				j = k - 1
			} else {
				have++
			}
			for ; j > 0 && better(v, w[j-1]); j-- {
				w[j], ids[j] = w[j-1], ids[j-1]
			}
			w[j], ids[j] = v, int32(e)
		}
	}
	for j, id := range ids[:k] {
		w[j] = s[id]
	}
	if r.Scoring == ScoreSoftmaxTopK {
		Softmax(w)
	}
	scale := r.Scale
	if scale == 0 {
		scale = 1
	}
	if r.NormTopK {
		var sum float64
		for _, v := range w {
			sum += float64(v)
		}
		if sum > 0 {
			scale = float32(float64(scale) / sum)
		}
	}
	if scale != 1 {
		for j := range w {
			w[j] *= scale
		}
	}
}
