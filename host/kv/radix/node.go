package radix

import (
	"container/heap"
	"hash/maphash"
	"slices"
	"unsafe"
)

// node is one edge of the tree with what it caches: key is a whole number
// of blocks of tokens, following its parent's; pages[i] covers key in token
// pool i (len(key)/PageSize entries, Released where a window pool keeps
// none); snaps[i] is state pool i's snapshot after the node's last token
// (-1: none).
type node struct {
	parent  *node
	key     []int32
	end     int // tokens from the root to the node's end
	pages   [][]int32
	snaps   []int32
	held    []int32 // per pool: pages (a snapshot) not Released
	digests []Digest

	kids    map[uint64]*node // by the hash of the child's first block
	nkids   int
	sibling *node // the next child of parent whose first block hashes alike

	lock   int32 // running sequences holding this node's prefix
	own    int32 // window-holding Handles ending at this node (window.go)
	minEnd int   // scratch of lockedNodes: least window-holding end at or below
	access uint64
	heapAt int // index in the evictable heap, -1 when not in it
}

func (t *Tree) newNode(parent *node, key []int32, end int) *node {
	n := &node{parent: parent, key: key, end: end, pages: make([][]int32, len(t.pools)), held: make([]int32, len(t.pools)), heapAt: -1}
	if t.states {
		n.snaps = make([]int32, len(t.pools))
		for i := range n.snaps {
			n.snaps[i] = -1
		}
	}
	return n
}

func (n *node) start() int   { return n.end - len(n.key) }
func (n *node) leaf() bool   { return n.nkids == 0 }
func (n *node) isRoot() bool { return n.parent == nil }

// snapshotted reports whether the node holds a snapshot in every state pool
// (true when the tree keeps no state).
func (t *Tree) snapshotted(n *node) bool {
	for i, p := range t.pools {
		if p.Kind == State && n.snaps[i] < 0 {
			return false
		}
	}
	return true
}

var seed = maphash.MakeSeed()

// blockKey hashes one block of tokens for a parent's child index; equal
// blocks hash alike and a collision only chains siblings.
func blockKey(block []int32) uint64 {
	if len(block) == 1 {
		return uint64(uint32(block[0]))
	}
	return maphash.Bytes(seed, unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(block))), 4*len(block)))
}

// child is n's child whose first block equals block, or nil.
func (n *node) child(block []int32) *node {
	for c := n.kids[blockKey(block)]; c != nil; c = c.sibling {
		if slices.Equal(c.key[:len(block)], block) {
			return c
		}
	}
	return nil
}

func (n *node) addChild(c *node, block int) {
	if n.kids == nil {
		n.kids = make(map[uint64]*node, 1)
	}
	k := blockKey(c.key[:block])
	c.sibling, n.kids[k] = n.kids[k], c
	c.parent = n
	n.nkids++
}

func (n *node) removeChild(c *node, block int) {
	k := blockKey(c.key[:block])
	if head := n.kids[k]; head == c {
		if c.sibling == nil {
			delete(n.kids, k)
		} else {
			n.kids[k] = c.sibling
		}
	} else {
		for x := head; x != nil; x = x.sibling {
			if x.sibling == c {
				x.sibling = c.sibling
				break
			}
		}
	}
	c.sibling = nil
	n.nkids--
}

// replaceChild puts c in old's place among n's children (same first block).
func (n *node) replaceChild(old, c *node, block int) {
	k := blockKey(old.key[:block])
	if n.kids[k] == old {
		n.kids[k] = c
	} else {
		for x := n.kids[k]; x != nil; x = x.sibling {
			if x.sibling == old {
				x.sibling = c
				break
			}
		}
	}
	c.sibling, old.sibling = old.sibling, nil
	c.parent = n
}

// split cuts n after m of its tokens (a whole number of blocks, 0 < m <
// len(n.key)): a new node takes n's first m tokens and pages and n's place
// under its parent, with n as its only child. Locks and access carry over,
// so a Handle on n stays valid; snapshots stay with n (they are at its
// end).
func (t *Tree) split(n *node, m int) *node {
	mid := t.newNode(nil, n.key[:m:m], n.start()+m)
	for i, p := range t.pools {
		if !p.tokens() {
			continue
		}
		k := m / p.PageSize
		mid.pages[i], n.pages[i] = n.pages[i][:k:k], n.pages[i][k:]
		mid.held[i] = int32(heldPages(mid.pages[i]))
		n.held[i] -= mid.held[i]
	}
	if n.digests != nil {
		b := m / t.block
		mid.digests, n.digests = n.digests[:b:b], n.digests[b:]
	}
	mid.lock, mid.access = n.lock, n.access
	n.parent.replaceChild(n, mid, t.block)
	n.key = n.key[m:]
	mid.addChild(n, t.block)
	t.stats.nodes.Add(1)
	t.gen++
	return mid
}

func heldPages(pages []int32) int {
	n := 0
	for _, pg := range pages {
		if pg != Released {
			n++
		}
	}
	return n
}

// account adds (sign +1) or takes away (−1) n's tokens and pages from the
// totals; evictable ones too when n is unlocked.
func (t *Tree) account(n *node, sign int64) {
	t.stats.tokens.Add(sign * int64(len(n.key)))
	if n.lock == 0 {
		t.stats.evictTokens.Add(sign * int64(len(n.key)))
	}
	for i, h := range n.held {
		t.stats.held[i].Add(sign * int64(h))
		if n.lock == 0 {
			t.stats.evictable[i].Add(sign * int64(h))
		}
	}
}

// setEvictable moves n's tokens and pages into (+1) or out of (−1) the
// evictable totals when its lock count leaves or reaches zero.
func (t *Tree) setEvictable(n *node, sign int64) {
	t.stats.evictTokens.Add(sign * int64(len(n.key)))
	for i, h := range n.held {
		t.stats.evictable[i].Add(sign * int64(h))
	}
}

// evictHeap orders the unlocked leaves least recently used first (deeper
// first on a tie), the order Evict removes them in.
type evictHeap []*node

func (h evictHeap) Len() int { return len(h) }
func (h evictHeap) Less(i, j int) bool {
	if h[i].access != h[j].access {
		return h[i].access < h[j].access
	}
	return h[i].end > h[j].end
}
func (h evictHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].heapAt, h[j].heapAt = i, j
}
func (h *evictHeap) Push(x any) {
	n := x.(*node)
	n.heapAt = len(*h)
	*h = append(*h, n)
}
func (h *evictHeap) Pop() any {
	old := *h
	n := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	n.heapAt = -1
	return n
}

// refile puts n in the evictable heap when it is an unlocked leaf, takes it
// out otherwise, and reorders it after its access time changed.
func (t *Tree) refile(n *node) {
	want := !n.isRoot() && n.leaf() && n.lock == 0
	switch {
	case want && n.heapAt < 0:
		heap.Push(&t.heap, n)
	case want:
		heap.Fix(&t.heap, n.heapAt)
	case n.heapAt >= 0:
		heap.Remove(&t.heap, n.heapAt)
	}
}
