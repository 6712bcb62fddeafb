package radix

import (
	"math"
	"slices"
)

// Window pages under locks (SGLang's SWARadixCache: a prefix stays valid
// for the full pools, and for matching only where its window pages still
// exist).
//
// A running sequence locks its whole cached path, so its full-pool pages
// stay put; of a window pool it reads only positions after
// end − Window of the prefix it locks (end: the Handle's Tokens), and none
// once it has decoded a window past it (ReleaseWindow). A locked node's
// window page at index g is therefore needed only while some window-holding
// Handle at or below the node ends before (g+1)·PageSize + Window − 1;
// the others are spare: Evict turns them into holes (least recently used
// node first) when the pool is short, exactly as it evicts an unlocked
// leaf, and Match then stops qualifying boundaries that need them. Spare
// pages another table still holds (a sequence admitted on the prefix that
// has not trimmed yet) are not counted: releasing them frees nothing.
//
// Refresh recounts the spare pages (over the locked nodes only: the paths
// of running sequences); Evictable and Stats add them to the unlocked
// pages.

// Win reports whether h still holds the window of its prefix.
func (h Handle) Win() bool { return h.n != nil && h.win }

// ReleaseWindow gives up h's hold on the window pages of its prefix (the
// sequence holding it has trimmed every page of them: it decoded a window
// past the prefix's end) while keeping the prefix locked for the full
// pools. It clears h.win; Unlock of the same Handle then leaves the window
// alone.
func (t *Tree) ReleaseWindow(h *Handle) {
	if !h.Win() {
		return
	}
	h.n.own--
	h.win = false
}

// Refresh recounts every window pool's spare pages (what Evict can punch
// out of locked nodes) for Evictable and Stats. The engine calls it once
// its sequences trimmed their windows; Evict refreshes itself.
func (t *Tree) Refresh() {
	if !t.windows {
		return
	}
	t.lockedNodes()
	for i, p := range t.pools {
		if p.Kind != Window {
			continue
		}
		n := 0
		for _, x := range t.locked {
			n += t.spareIn(x, i, false)
		}
		t.stats.spare[i].Store(int64(n))
	}
}

// lockedNodes lists the locked nodes in preorder (t.locked) and sets each
// one's minEnd: the least end of a window-holding Handle at or below it
// (math.MaxInt when none).
func (t *Tree) lockedNodes() {
	t.locked = t.locked[:0]
	t.walk = append(t.walk[:0], t.root)
	for len(t.walk) > 0 {
		x := t.walk[len(t.walk)-1]
		t.walk = t.walk[:len(t.walk)-1]
		if !x.isRoot() {
			t.locked = append(t.locked, x)
		}
		for _, c := range x.kids {
			for ; c != nil; c = c.sibling {
				if c.lock > 0 {
					t.walk = append(t.walk, c)
				}
			}
		}
	}
	for _, x := range t.locked {
		x.minEnd = math.MaxInt
	}
	for _, x := range slices.Backward(t.locked) { // children before parents
		if x.own > 0 {
			x.minEnd = min(x.minEnd, x.end)
		}
		if p := x.parent; !p.isRoot() {
			p.minEnd = min(p.minEnd, x.minEnd)
		}
	}
}

// spareIn counts (punch: and turns into holes, releasing them) window pool
// i's spare pages of the locked node x.
func (t *Tree) spareIn(x *node, i int, punch bool) int {
	p := t.pools[i]
	if x.held[i] == 0 {
		return 0
	}
	n := 0
	base := x.start() / p.PageSize
	for j, pg := range x.pages[i] {
		if pg == Released {
			continue
		}
		if x.minEnd != math.MaxInt && x.minEnd < (base+j+1)*p.PageSize+p.Window-1 {
			break // this page and every later one of x is read
		}
		if t.owner.Shared(i, pg) {
			continue
		}
		n++
		if punch {
			x.pages[i][j] = Released
			x.held[i]--
			t.stats.held[i].Add(-1)
			t.one[0] = pg
			t.owner.Release(i, t.one[:])
		}
	}
	if punch && n > 0 {
		t.gen++ // a Prefix matched before may rely on these pages
	}
	return n
}

// punch turns up to want spare pages of window pool i into holes, least
// recently used locked node first, and returns how many it freed.
func (t *Tree) punch(i, want int) int {
	t.lockedNodes()
	slices.SortStableFunc(t.locked, func(a, b *node) int {
		switch {
		case a.access < b.access:
			return -1
		case a.access > b.access:
			return 1
		}
		return b.end - a.end // deeper first, as the leaf heap
	})
	got := 0
	for _, x := range t.locked {
		if got >= want {
			break
		}
		got += t.spareIn(x, i, true)
	}
	return got
}
