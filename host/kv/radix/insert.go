package radix

import (
	"fmt"
	"slices"
)

// Insert caches the whole blocks of tokens, whose KV a sequence holds in
// tables (one page table per pool, in pool order; nil for state pools), and
// returns the prefix it ends at for the sequence to lock in place of the
// one it held (Relock the new, then Unlock the old).
//
// Pages the tree lacks it takes its own hold on (Owner.Retain); where it
// already caches a block it keeps its pages and the sequence's duplicates
// stay the sequence's, so concurrent sequences that computed the same
// prefix share the first one's. A window-pool page the tree lacks (a hole)
// is filled from the table when the table holds it. A partial last block is
// not cached: the sequence keeps it and a later request recomputes it. A
// page another sequence also holds (Owner.Shared: a fork sharing it
// copy-on-write) is never adopted, and the insert stops before its block:
// that way every page the tree adopts is covered by the inserter's lock.
//
// snaps, per state pool, is a slot holding the sequence's state after
// exactly len(tokens) tokens, or -1; ownership passes to the tree, which
// keeps it as the snapshot of that boundary, or releases it at once when
// len(tokens) is not a whole number of blocks, some state pool has none, or
// the boundary already has one. In a tree with state pools nothing is
// stored past the longest cached prefix without a full set: a prefix no
// sequence can resume from is not kept.
//
// A table shorter than the blocks it must cover, or a Released entry in a
// full pool's, is a bug in the caller and panics.
func (t *Tree) Insert(tokens []int32, tables [][]int32, snaps []int32) Handle {
	n := len(tokens) / t.block * t.block
	if len(tables) != len(t.pools) {
		panic(fmt.Sprintf("radix: Insert with %d page tables for %d pools", len(tables), len(t.pools)))
	}
	for i, p := range t.pools {
		if p.tokens() && len(tables[i])*p.PageSize < n {
			panic(fmt.Sprintf("radix: pool %s: a table of %d pages does not cover %d tokens", p.Name, len(tables[i]), n))
		}
	}
	now := t.tick()
	withSnaps := t.states && n == len(tokens) && n > 0 && t.fullSet(snaps)
	cur, pos := t.root, 0
	for pos < n {
		c := cur.child(tokens[pos : pos+t.block])
		if c == nil {
			break
		}
		k := t.block
		for k < len(c.key) && pos+k < n && slices.Equal(c.key[k:k+t.block], tokens[pos+k:pos+k+t.block]) {
			k += t.block
		}
		t.fillHoles(c, k, tables)
		if k < len(c.key) {
			c = t.split(c, k)
		}
		cur, pos = c, pos+k
	}
	if stop := t.adoptable(pos, n, tables); stop > pos && (!t.states || withSnaps && stop == n) {
		cur, pos = t.addLeaf(cur, tokens[pos:stop], tables), stop
	}
	for i, p := range t.pools {
		if p.Kind != State || i >= len(snaps) || snaps[i] < 0 {
			continue
		}
		if withSnaps && pos == n && cur.snaps[i] < 0 {
			cur.snaps[i], cur.held[i] = snaps[i], 1
			t.stats.held[i].Add(1)
			if cur.lock == 0 {
				t.stats.evictable[i].Add(1)
			}
		} else {
			t.one[0] = snaps[i]
			t.owner.Release(i, t.one[:])
		}
	}
	for x := cur; x != nil; x = x.parent {
		x.access = now
		t.refile(x)
	}
	if cur.isRoot() {
		return Handle{}
	}
	return Handle{n: cur, win: true}
}

// adoptable is where the tokens from pos to n stop being adoptable: the
// start of the first block holding a page another sequence also holds (a
// fork's copy-on-write share, which no lock of the inserter's covers).
func (t *Tree) adoptable(pos, n int, tables [][]int32) int {
	for b := pos; b < n; b += t.block {
		for i, p := range t.pools {
			if !p.tokens() {
				continue
			}
			for _, pg := range tables[i][b/p.PageSize : (b+t.block)/p.PageSize] {
				if pg != Released && t.owner.Shared(i, pg) {
					return b
				}
			}
		}
	}
	return n
}

// fullSet reports whether snaps holds a slot for every state pool.
func (t *Tree) fullSet(snaps []int32) bool {
	for i, p := range t.pools {
		if p.Kind == State && (i >= len(snaps) || snaps[i] < 0) {
			return false
		}
	}
	return true
}

// fillHoles takes, for the first k tokens of c, the window-pool pages the
// tree lacks from tables where they hold one.
func (t *Tree) fillHoles(c *node, k int, tables [][]int32) {
	for i, p := range t.pools {
		if p.Kind != Window || int(c.held[i]) == len(c.pages[i]) {
			continue
		}
		base := c.start() / p.PageSize
		for j := 0; j < k/p.PageSize; j++ {
			if c.pages[i][j] != Released || tables[i][base+j] == Released || t.owner.Shared(i, tables[i][base+j]) {
				continue
			}
			c.pages[i][j] = tables[i][base+j]
			t.one[0] = c.pages[i][j]
			t.owner.Retain(i, t.one[:])
			c.held[i]++
			t.stats.held[i].Add(1)
			if c.lock == 0 {
				t.stats.evictable[i].Add(1)
			}
		}
	}
}

// addLeaf stores key (the tokens after parent's end) with the sequence's
// pages for it as a new child of parent.
func (t *Tree) addLeaf(parent *node, key []int32, tables [][]int32) *node {
	from, to := parent.end, parent.end+len(key)
	leaf := t.newNode(nil, slices.Clone(key), to)
	for i, p := range t.pools {
		if !p.tokens() {
			continue
		}
		pages := slices.Clone(tables[i][from/p.PageSize : to/p.PageSize])
		if p.Kind == Full && slices.Contains(pages, Released) {
			panic(fmt.Sprintf("radix: pool %s: a full pool's table has a released page", p.Name))
		}
		leaf.pages[i], leaf.held[i] = pages, int32(heldPages(pages))
		t.owner.Retain(i, pages)
	}
	if t.hash != nil {
		leaf.digests = make([]Digest, len(key)/t.block)
		var prev *Digest
		if !parent.isRoot() {
			prev = &parent.digests[len(parent.digests)-1]
		}
		for b := range leaf.digests {
			leaf.digests[b] = t.hash(prev, key[b*t.block:(b+1)*t.block])
			prev = &leaf.digests[b]
		}
	}
	parent.addChild(leaf, t.block)
	t.account(leaf, +1)
	t.stats.nodes.Add(1)
	t.gen++
	if t.obs != nil {
		var prev *Digest
		if !parent.isRoot() {
			prev = &parent.digests[len(parent.digests)-1]
		}
		t.obs.BlocksStored(prev, leaf.digests, leaf.key)
	}
	return leaf
}
