package cpu

import "fmt"

// ExpertGroups is one step's routing regrouped by expert, so that each
// expert's weights are read once for all the tokens routed to it: grouped
// rows Offsets[e] .. Offsets[e+1]-1 belong to expert e, in token order.
// Grouped row r carries token Tokens[r] with router weight Weights[r];
// Slots[i*K+j] is the grouped row of token i's j-th choice, which is how
// ScatterAdd finds a token's expert outputs.
//
// A model gathers the rows (GatherRows with Tokens), runs each expert's
// MatMul on its range of the gathered buffer (skipping empty experts), and
// ScatterAdds the expert outputs back. Everything is sized once by
// NewExpertGroups; Group allocates nothing.
type ExpertGroups struct {
	Experts, K, N int
	Offsets       []int32 // Experts+1 values
	Tokens        []int32
	Weights       []float32
	Slots         []int32
	cursor        []int32
}

// NewExpertGroups sizes the groups for up to maxTokens tokens of k choices
// among experts.
func NewExpertGroups(experts, k, maxTokens int) *ExpertGroups {
	if experts < 1 || k < 1 || k > experts || maxTokens < 0 {
		panic(fmt.Sprintf("cpu: expert groups of %d experts, top %d, %d tokens", experts, k, maxTokens))
	}
	return &ExpertGroups{
		Experts: experts, K: k,
		Offsets: make([]int32, experts+1),
		Tokens:  make([]int32, maxTokens*k),
		Weights: make([]float32, maxTokens*k),
		Slots:   make([]int32, maxTokens*k),
		cursor:  make([]int32, experts),
	}
}

// Rows is the grouped row range of expert e.
func (g *ExpertGroups) Rows(e int) (lo, hi int) { return int(g.Offsets[e]), int(g.Offsets[e+1]) }

// Group fills g from Route's output for n tokens (ids and weights [n, K]) by
// a counting sort over the experts: stable, so each expert's rows are in
// token order and the result does not depend on anything but its inputs.
// An expert id out of range, or more tokens than g was sized for, is an
// error wrapping ErrShape and leaves g unusable until the next Group.
func (g *ExpertGroups) Group(ids []int32, weights []float32, n int) error {
	nk := n * g.K
	if n < 0 || nk > len(g.Slots) || len(ids) < nk || len(weights) < nk {
		return fmt.Errorf("cpu: group %d tokens × %d choices (room for %d): ids %d, weights %d: %w", n, g.K, len(g.Slots)/g.K, len(ids), len(weights), ErrShape)
	}
	g.N = n
	clear(g.Offsets)
	for _, e := range ids[:nk] {
		if e < 0 || int(e) >= g.Experts {
			return fmt.Errorf("cpu: group: expert %d outside [0, %d): %w", e, g.Experts, ErrShape)
		}
		g.Offsets[e+1]++
	}
	for e := range g.Experts {
		g.Offsets[e+1] += g.Offsets[e]
	}
	copy(g.cursor, g.Offsets[:g.Experts])
	for i, e := range ids[:nk] {
		r := g.cursor[e]
		g.cursor[e]++
		g.Tokens[r] = int32(i / g.K)
		g.Weights[r] = weights[i]
		g.Slots[i] = r
	}
	return nil
}

// scatterTask is one ScatterAdd split into (token, column block) items.
type scatterTask struct {
	out, y     []float32
	dim        int
	g          *ExpertGroups
	accumulate bool
	ch         chunker
}

// scatterCols is the column block of one ScatterAdd item: a decode step's
// single token still spreads over the pool.
const scatterCols = 1024

func (t *scatterTask) run(int) {
	blocks := (t.dim + scatterCols - 1) / scatterCols
	for c := t.ch.take(); c >= 0; c = t.ch.take() {
		t.item(c/blocks, c%blocks*scatterCols)
	}
}

func (t *scatterTask) item(i, c0 int) {
	c1 := min(c0+scatterCols, t.dim)
	row := t.out[i*t.dim+c0 : i*t.dim+c1]
	if !t.accumulate {
		clear(row)
	}
	for _, s := range t.g.Slots[i*t.g.K : (i+1)*t.g.K] {
		axpy(row, t.g.Weights[s], t.y[int(s)*t.dim+c0:int(s)*t.dim+c1])
	}
}

// ScatterAdd writes out[i] = Σ_j Weights[s]·y[s] over token i's grouped rows
// s = Slots[i*K+j], j in choice order (a fixed summation order, so the result
// is deterministic), for the g.N tokens; with accumulate it adds to out
// instead (a shared expert's output already there). y is [rows, dim] in
// grouped order (the experts' outputs), out [g.N, dim]. Items are split over
// the pool; nothing is allocated. Panics on short slices.
func (p *Pool) ScatterAdd(out, y []float32, dim int, g *ExpertGroups, accumulate bool) {
	nk := g.N * g.K
	if dim < 0 || len(out) < g.N*dim || len(y) < nk*dim {
		panic(fmt.Sprintf("cpu: scatter-add %d tokens × %d choices of dim %d: out has %d floats, y %d", g.N, g.K, dim, len(out), len(y)))
	}
	if g.N == 0 || dim == 0 {
		return
	}
	items := g.N * ((dim + scatterCols - 1) / scatterCols)
	if p.Threads() == 1 || items == 1 {
		t := scatterTask{out: out, y: y, dim: dim, g: g, accumulate: accumulate}
		t.ch.reset(items)
		t.run(0)
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.moe.scatter = scatterTask{out: out, y: y, dim: dim, g: g, accumulate: accumulate}
	p.moe.scatter.ch.reset(items)
	p.parallel(&p.moe.scatter)
	p.moe.scatter = scatterTask{}
}

// moeTasks holds the Pool's task state for the mixture-of-experts kernels.
type moeTasks struct {
	route   routeTask
	scatter scatterTask
}
