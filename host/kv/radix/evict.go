package radix

import (
	"container/heap"
	"fmt"
)

// Evict frees cached prefixes no running sequence locks, least recently
// used leaf first, until want pages (snapshot slots, for a state pool) of
// pool came back or nothing unlocked is left, and returns how many of pool
// came back. A leaf goes whole, so its pages in the other pools come back
// too; a parent left a leaf becomes a candidate in its turn. Every page an
// evicted node held only the tree held (sequences lock what they hold), so
// each one released returns to its pool's free list. A window pool short
// after the leaves then loses the spare pages of locked nodes, which become
// holes (window.go).
func (t *Tree) Evict(pool, want int) int {
	if pool < 0 || pool >= len(t.pools) {
		panic(fmt.Sprintf("radix: Evict of pool %d, the tree has %d", pool, len(t.pools)))
	}
	got := 0
	for got < want && t.heap.Len() > 0 {
		got += t.remove(heap.Pop(&t.heap).(*node), pool)
	}
	if got < want && t.pools[pool].Kind == Window {
		got += t.punch(pool, want-got) // window.go
	}
	t.Refresh()
	return got
}

// remove takes the unlocked leaf n (already out of the heap) out of the
// tree and releases what it holds, then its parent when that is left a leaf
// no sequence can resume from (a state tree's leaf without snapshots). It
// returns what came back of pool (-1: none counted).
func (t *Tree) remove(n *node, pool int) int {
	got := 0
	for {
		if pool >= 0 {
			got += int(n.held[pool])
		}
		t.release(n)
		t.account(n, -1)
		t.stats.nodes.Add(-1)
		t.gen++
		if t.obs != nil {
			t.obs.BlocksRemoved(n.digests)
		}
		p := n.parent
		p.removeChild(n, t.block)
		n.parent = nil
		if !t.useless(p) {
			t.refile(p)
			return got
		}
		if p.heapAt >= 0 {
			heap.Remove(&t.heap, p.heapAt)
		}
		n = p
	}
}

// useless reports whether n is an unlocked leaf of a state tree without a
// full set of snapshots: no sequence can resume inside or after it.
func (t *Tree) useless(n *node) bool {
	return t.states && !n.isRoot() && n.leaf() && n.lock == 0 && !t.snapshotted(n)
}

// pruneUseless removes n (and ancestors in turn) if it is useless.
func (t *Tree) pruneUseless(n *node) {
	if !t.useless(n) {
		return
	}
	if n.heapAt >= 0 {
		heap.Remove(&t.heap, n.heapAt)
	}
	t.remove(n, -1)
}

// release gives back n's pages and snapshots to the owner.
func (t *Tree) release(n *node) {
	for i, p := range t.pools {
		switch {
		case p.tokens():
			t.owner.Release(i, n.pages[i])
		case n.snaps[i] >= 0:
			t.one[0] = n.snaps[i]
			t.owner.Release(i, t.one[:])
		}
	}
}

// Reset empties the tree, releasing every page and snapshot it holds
// (vLLM's reset_prefix_cache; observers hear AllCleared). It refuses with
// ErrLocked while a running sequence holds a prefix.
func (t *Tree) Reset() error {
	if t.root.lock > 0 {
		return fmt.Errorf("%w: %d holds", ErrLocked, t.root.lock)
	}
	stack := []*node{t.root}
	for len(stack) > 0 {
		n := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		for _, c := range n.kids {
			for ; c != nil; c = c.sibling {
				stack = append(stack, c)
			}
		}
		if !n.isRoot() {
			t.release(n)
		}
	}
	t.root = t.newNode(nil, nil, 0)
	clear(t.heap)
	t.heap = t.heap[:0]
	t.stats.nodes.Store(0)
	t.stats.tokens.Store(0)
	t.stats.evictTokens.Store(0)
	for i := range t.pools {
		t.stats.held[i].Store(0)
		t.stats.evictable[i].Store(0)
		t.stats.spare[i].Store(0)
	}
	t.gen++
	if t.obs != nil {
		t.obs.AllCleared()
	}
	return nil
}
