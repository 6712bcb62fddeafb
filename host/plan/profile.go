package plan

import (
	"github.com/kvhost/kvhost/host/kv"
	"github.com/kvhost/kvhost/host/model"
)

// SeqShape is one sequence of a forward: N new tokens at positions Start..,
// with LogitRows rows of logits.
type SeqShape struct {
	N, Start, LogitRows int
}

// ProfileBatches are the worst-case forwards the slack must hold (engine
// rules: at most chunk new tokens per forward, decodes first, at most
// maxRunning sequences, positions below the context): a single prefill
// chunk ending at the last prompt position (the longest attention), then
// a mixed batch of min(maxRunning, chunk) − 1 decodes at the last position
// plus a prefill filling the chunk (most logits rows), then a chunk whose
// every row wants logits (input logprobs: full-vocabulary rows, computed in
// logits chunks). Boot runs exactly these as the profile forward; plan
// replays them.
func ProfileBatches(contextLen, chunk, maxRunning int) [][]SeqShape {
	n := min(chunk, contextLen-1)
	a := []SeqShape{{N: n, Start: contextLen - 1 - n, LogitRows: 1}}
	r := min(maxRunning, n)
	var b []SeqShape
	for range r - 1 {
		b = append(b, SeqShape{N: 1, Start: contextLen - 2, LogitRows: 1})
	}
	pn := n - (r - 1)
	b = append(b, SeqShape{N: pn, Start: contextLen - 1 - pn, LogitRows: 1})
	lp := []SeqShape{{N: n, Start: contextLen - 1 - n, LogitRows: n}}
	return [][]SeqShape{a, b, lp}
}

// ProfileUnits are the units a profile set of pools needs: page tables
// wrap around a small pool, so one chunk's worth of pages of each token
// pool is enough, and one slot of each state pool (slots wrap too); never
// more than upper.
func ProfileUnits(l *kv.Layout, chunk int, upper []int) []int {
	out := make([]int, len(l.Pools))
	for i, p := range l.Pools {
		out[i] = 1
		if p.Tokens() {
			out[i] = (chunk + p.PageSize - 1) / p.PageSize * p.PageSize
		}
		out[i] = min(out[i], upper[i])
	}
	return out
}

// ProfileSeqs turns shapes into model sequences over pools: page tables
// wrap around each token pool, so any position maps to a valid page, and
// slots wrap around each state pool.
func ProfileSeqs(shapes []SeqShape, pools *kv.Set) []model.Seq {
	out := make([]model.Seq, len(shapes))
	for i, s := range shapes {
		seq := model.Seq{Start: s.Start, LogitRows: s.LogitRows}
		for _, p := range pools.TokenPools() {
			table := make([]int32, p.PagesFor(s.Start+s.N))
			for j := range table {
				table[j] = int32((j + i) % p.Pages())
			}
			seq.Pages = append(seq.Pages, table)
		}
		for _, p := range pools.SlotPools() {
			seq.Slots = append(seq.Slots, int32(i%p.Slots()))
		}
		seq.Tokens = make([]int32, s.N)
		for j := range seq.Tokens {
			seq.Tokens[j] = int32((j*7 + i) % 13)
		}
		out[i] = seq
	}
	return out
}
