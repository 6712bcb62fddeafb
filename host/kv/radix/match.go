package radix

import (
	"fmt"
	"slices"
)

// Prefix is a match: the longest cached prefix of some tokens that a new
// sequence can start from. Reuse one Prefix across calls: Match overwrites
// it, growing its slices only when a longer prefix needs it.
type Prefix struct {
	// Tokens is the prefix's length, a whole number of blocks.
	Tokens int
	// Pages, per token pool, are the page ids covering Tokens (Released
	// where a window pool keeps none: positions no later query reads); a
	// sequence takes its own hold on them (kv.Pool.Share) and appends its
	// new pages after them.
	Pages [][]int32
	// Snaps, per state pool, is the snapshot slot holding the state after
	// Tokens: the sequence copies it into its own slot (kv.SlotPool.Copy)
	// and never writes the snapshot. -1 for token pools.
	Snaps []int32

	node *node
	off  int // tokens of node the prefix covers
	gen  uint64
}

// Match finds the longest prefix of tokens the tree can serve and writes it
// to p. A prefix qualifies at a block boundary L when every pool has what a
// sequence resuming at L needs: full pools always do; a window pool needs
// its pages covering positions L−Window+1 … L−1; a state pool needs a
// snapshot after exactly L tokens (at a node's end).
//
// The caller leaves at least one token to compute (the logits of the last
// prompt token come from a forward), so it passes prompt[:len(prompt)−1].
// Match does not change the tree: scoring waiting requests by their cached
// prefix (longest-prefix-first scheduling) may call it freely. p is valid
// for Lock until the tree next changes.
func (t *Tree) Match(tokens []int32, p *Prefix) {
	t.resetPrefix(p)
	var (
		cur      = t.root
		pos      int
		bestNode = t.root
		bestOff  int
		lastHole [maxPool]int
	)
	holes := lastHole[:0]
	if len(t.pools) > maxPool {
		holes = make([]int, 0, len(t.pools))
	}
	for range t.pools {
		holes = append(holes, -1)
	}
	for pos+t.block <= len(tokens) {
		c := cur.child(tokens[pos : pos+t.block])
		if c == nil {
			break
		}
		// Blocks of c matching tokens, one at a time: at each boundary the
		// prefix so far may qualify.
		k := 0
		for k < len(c.key) && pos+k+t.block <= len(tokens) && (k == 0 || slices.Equal(c.key[k:k+t.block], tokens[pos+k:pos+k+t.block])) {
			k += t.block
			at := pos + k
			if t.qualifies(c, k, at, holes) {
				p.Tokens, bestNode, bestOff = at, c, k
			}
		}
		if k < len(c.key) {
			break
		}
		cur, pos = c, pos+k
	}
	p.node, p.off, p.gen = bestNode, bestOff, t.gen
	if p.Tokens == 0 {
		return
	}
	t.gather(bestNode, bestOff, p)
}

// maxPool is how many pools Match tracks without allocating.
const maxPool = 8

// qualifies reports whether a sequence could resume after the first k
// tokens of node c (at == c.start()+k tokens from the root); holes[i] is
// the last Released page index seen so far in window pool i, updated here
// for c's pages up to k.
func (t *Tree) qualifies(c *node, k, at int, holes []int) bool {
	ok := true
	for i, p := range t.pools {
		switch p.Kind {
		case Window:
			// Pages of c in the block just matched.
			for j := (k - t.block) / p.PageSize; j < k/p.PageSize; j++ {
				if c.pages[i][j] == Released {
					holes[i] = c.start()/p.PageSize + j
				}
			}
			if holes[i] >= max(0, at-p.Window+1)/p.PageSize {
				ok = false
			}
		case State:
			if k != len(c.key) || c.snaps[i] < 0 {
				ok = false
			}
		}
	}
	return ok
}

// gather writes the pages of the path from the root to the first off
// tokens of n into p.Pages, and n's snapshots into p.Snaps.
func (t *Tree) gather(n *node, off int, p *Prefix) {
	for i, pl := range t.pools {
		if !pl.tokens() {
			continue
		}
		want := p.Tokens / pl.PageSize
		p.Pages[i] = slices.Grow(p.Pages[i][:0], want)[:want]
	}
	for x, upto := n, off; !x.isRoot(); x, upto = x.parent, len(x.parent.key) {
		for i, pl := range t.pools {
			if pl.tokens() {
				copy(p.Pages[i][x.start()/pl.PageSize:], x.pages[i][:upto/pl.PageSize])
			}
		}
	}
	for i, pl := range t.pools {
		if pl.Kind == State {
			p.Snaps[i] = n.snaps[i]
		}
	}
}

func (t *Tree) resetPrefix(p *Prefix) {
	if len(p.Pages) != len(t.pools) {
		p.Pages, p.Snaps = make([][]int32, len(t.pools)), make([]int32, len(t.pools))
	}
	for i := range p.Pages {
		p.Pages[i] = p.Pages[i][:0]
		p.Snaps[i] = -1
	}
	p.Tokens, p.node, p.off = 0, nil, 0
}

// Handle is a locked prefix: while a running sequence holds it, no page or
// snapshot of the prefix is evicted, but for a window pool's pages that
// its window does not read (window.go; none after ReleaseWindow). The zero
// Handle locks nothing.
type Handle struct {
	n   *node
	win bool // it holds the window pages before its end (window.go)
}

// Tokens is the locked prefix's length.
func (h Handle) Tokens() int {
	if h.n == nil {
		return 0
	}
	return h.n.end
}

// Lock locks p's prefix for a sequence that now holds its pages, splitting
// a node when the prefix ends inside it, and marks the prefix used. Each
// Lock is undone by one Unlock. p must come from the latest Match on an
// unchanged tree.
func (t *Tree) Lock(p *Prefix) Handle {
	if p.gen != t.gen || p.node == nil {
		panic(fmt.Sprintf("radix: Lock of a prefix matched on another tree version (matched at %d, tree at %d)", p.gen, t.gen))
	}
	if p.Tokens == 0 {
		return Handle{}
	}
	n := p.node
	if p.off < len(n.key) {
		n = t.split(n, p.off)
	}
	h := Handle{n: n, win: true}
	t.Relock(h)
	return h
}

// Relock locks h's prefix once more: a fork (one of a request's n choices)
// sharing its parent's pages, or a sequence moving its lock to the prefix
// Insert returned.
func (t *Tree) Relock(h Handle) {
	if h.n == nil {
		return
	}
	if h.win {
		h.n.own++
	}
	now := t.tick()
	for x := h.n; x != nil; x = x.parent {
		if x.lock == 0 && !x.isRoot() {
			t.setEvictable(x, -1)
		}
		x.lock++
		x.access = now
		t.refile(x)
	}
}

// Unlock undoes one Lock (or Relock) of h: when no sequence holds a node
// any more it becomes evictable, most recently used. Unlocking more often
// than locking is a bug and panics.
func (t *Tree) Unlock(h Handle) {
	if h.n == nil {
		return
	}
	if h.n.lock <= 0 {
		panic(fmt.Sprintf("radix: unlock of an unlocked prefix of %d tokens", h.n.end))
	}
	if h.win {
		h.n.own--
	}
	now := t.tick()
	for x := h.n; x != nil; x = x.parent {
		x.lock--
		if x.lock == 0 && !x.isRoot() {
			t.setEvictable(x, +1)
		}
		x.access = now
		t.refile(x)
	}
	t.pruneUseless(h.n)
}
