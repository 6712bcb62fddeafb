package radix

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"maps"
	"slices"
	"sort"
	"testing"
)

// This file is the naive reference the fuzz target checks the tree
// against: a map from every cached block-aligned token prefix to what the
// tree must hold for its last block, plus fake pools that count references.

// entry is what the reference caches for the block ending a prefix.
type entry struct {
	pages  [][]int32 // per token pool: the pages of this block
	snaps  []int32   // per pool: snapshot after this prefix, -1 none
	lock   int
	access uint64
}

// ref is the naive prefix cache.
type ref struct {
	pools []Pool
	block int
	m     map[string]*entry
	clock uint64
}

func key(tokens []int32) string {
	b := make([]byte, 0, 4*len(tokens))
	for _, t := range tokens {
		b = binary.LittleEndian.AppendUint32(b, uint32(t))
	}
	return string(b)
}

func newRef(pools []Pool) *ref {
	return &ref{pools: pools, block: blockOf(pools), m: map[string]*entry{}}
}

func (r *ref) states() bool {
	return slices.ContainsFunc(r.pools, func(p Pool) bool { return p.Kind == State })
}

func (r *ref) fullSet(e *entry) bool {
	for i, p := range r.pools {
		if p.Kind == State && e.snaps[i] < 0 {
			return false
		}
	}
	return true
}

// pagesOf is the pages of block [L−block, L) of pool i in table.
func (r *ref) blockPages(table []int32, i, L int) []int32 {
	ps := r.pools[i].PageSize
	return slices.Clone(table[(L-r.block)/ps : L/ps])
}

// match is the longest qualifying prefix of tokens and its pages.
func (r *ref) match(tokens []int32) (int, [][]int32, []int32) {
	best := 0
	for L := r.block; L <= len(tokens); L += r.block {
		if r.m[key(tokens[:L])] == nil {
			break
		}
		if r.qualifies(tokens, L) {
			best = L
		}
	}
	pages := make([][]int32, len(r.pools))
	snaps := make([]int32, len(r.pools))
	for i, p := range r.pools {
		snaps[i] = -1
		if p.tokens() {
			pages[i] = []int32{}
			for L := r.block; L <= best; L += r.block {
				pages[i] = append(pages[i], r.m[key(tokens[:L])].pages[i]...)
			}
		} else if best > 0 {
			snaps[i] = r.m[key(tokens[:best])].snaps[i]
		}
	}
	return best, pages, snaps
}

func (r *ref) qualifies(tokens []int32, L int) bool {
	for i, p := range r.pools {
		switch p.Kind {
		case Window:
			first := max(0, L-p.Window+1) / p.PageSize
			for pg := first; pg < L/p.PageSize; pg++ {
				blockEnd := (pg*p.PageSize/r.block + 1) * r.block
				e := r.m[key(tokens[:blockEnd])]
				if e.pages[i][(pg*p.PageSize%r.block)/p.PageSize] == Released {
					return false
				}
			}
		case State:
			if r.m[key(tokens[:L])].snaps[i] < 0 {
				return false
			}
		}
	}
	return true
}

// path is the cached boundaries of tokens' prefix up to n, in order.
func (r *ref) path(tokens []int32, n int) []*entry {
	var out []*entry
	for L := r.block; L <= n; L += r.block {
		e := r.m[key(tokens[:L])]
		if e == nil {
			break
		}
		out = append(out, e)
	}
	return out
}

func (r *ref) touch(tokens []int32, n int, lock int) {
	r.clock++
	for _, e := range r.path(tokens, n) {
		e.lock += lock
		e.access = r.clock
	}
}

// insert applies Insert's semantics; it returns the prefix length the
// tree's Handle must have and the pages the tree must have retained and
// the snapshots it must have released.
func (r *ref) insert(tokens []int32, tables [][]int32, snaps []int32, shared func(pool int, pg int32) bool) (end int, retained [][]int32, released [][]int32) {
	n := len(tokens) / r.block * r.block
	retained, released = make([][]int32, len(r.pools)), make([][]int32, len(r.pools))
	withSnaps := r.states() && n == len(tokens) && n > 0
	for i, p := range r.pools {
		if p.Kind == State && (i >= len(snaps) || snaps[i] < 0) {
			withSnaps = false
		}
	}
	// New prefixes stop at the first block holding a page another
	// sequence shares; a state tree stores none short of a snapshot.
	stop := n
	for L := r.block; L <= n && stop == n; L += r.block {
		if r.m[key(tokens[:L])] != nil {
			continue
		}
		for i, p := range r.pools {
			if p.tokens() && slices.ContainsFunc(r.blockPages(tables[i], i, L), func(pg int32) bool { return pg != Released && shared(i, pg) }) {
				stop = L - r.block
			}
		}
	}
	for L := r.block; L <= n; L += r.block {
		e := r.m[key(tokens[:L])]
		if e == nil {
			if L > stop || r.states() && (!withSnaps || stop < n) {
				break
			}
			e = &entry{pages: make([][]int32, len(r.pools)), snaps: make([]int32, len(r.pools))}
			for i, p := range r.pools {
				e.snaps[i] = -1
				if p.tokens() {
					e.pages[i] = r.blockPages(tables[i], i, L)
					retained[i] = append(retained[i], e.pages[i]...)
				}
			}
			r.m[key(tokens[:L])] = e
		} else {
			for i, p := range r.pools {
				if p.Kind != Window {
					continue
				}
				for j, pg := range r.blockPages(tables[i], i, L) {
					if e.pages[i][j] == Released && pg != Released && !shared(i, pg) {
						e.pages[i][j] = pg
						retained[i] = append(retained[i], pg)
					}
				}
			}
		}
		end = L
	}
	for i, p := range r.pools {
		if p.Kind != State || i >= len(snaps) || snaps[i] < 0 {
			continue
		}
		if e := r.m[key(tokens[:n])]; withSnaps && n > 0 && end == n && e.snaps[i] < 0 {
			e.snaps[i] = snaps[i]
		} else {
			released[i] = append(released[i], snaps[i])
		}
	}
	r.touch(tokens, end, 0)
	return end, retained, released
}

// leaf reports whether no cached prefix extends k by one block.
func (r *ref) leaf(k string) bool {
	for k2 := range r.m {
		if len(k2) == len(k)+4*r.block && k2[:len(k)] == k {
			return false
		}
	}
	return true
}

// prune removes, after an unlock of tokens[:n], the useless leaf chain
// ending there (state trees: unlocked leaves without a full snapshot set).
func (r *ref) prune(tokens []int32, n int) (released [][]int32) {
	released = make([][]int32, len(r.pools))
	for L := n; L > 0 && r.states(); L -= r.block {
		k := key(tokens[:L])
		e := r.m[k]
		if e == nil || e.lock > 0 || !r.leaf(k) || r.fullSet(e) {
			break
		}
		r.drop(k, released)
	}
	return released
}

func (r *ref) drop(k string, released [][]int32) {
	e := r.m[k]
	for i, p := range r.pools {
		if p.tokens() {
			for _, pg := range e.pages[i] {
				if pg != Released {
					released[i] = append(released[i], pg)
				}
			}
		} else if e.snaps[i] >= 0 {
			released[i] = append(released[i], e.snaps[i])
		}
	}
	delete(r.m, k)
}

// content is what the tree holds, as the reference keys it.
func content(t *Tree) map[string]*entry {
	out := map[string]*entry{}
	var walk func(n *node, prefix []int32)
	walk = func(n *node, prefix []int32) {
		if !n.isRoot() {
			for b := 1; b*t.block <= len(n.key); b++ {
				L := b * t.block
				e := &entry{pages: make([][]int32, len(t.pools)), snaps: make([]int32, len(t.pools)), lock: int(n.lock), access: n.access}
				for i, p := range t.pools {
					e.snaps[i] = -1
					if p.tokens() {
						e.pages[i] = slices.Clone(n.pages[i][(L-t.block)/p.PageSize : L/p.PageSize])
					} else if L == len(n.key) {
						e.snaps[i] = n.snaps[i]
					}
				}
				out[key(append(slices.Clone(prefix), n.key[:L]...))] = e
			}
			prefix = append(slices.Clone(prefix), n.key...)
		}
		for _, c := range n.kids {
			for ; c != nil; c = c.sibling {
				walk(c, prefix)
			}
		}
	}
	walk(t.root, nil)
	return out
}

// same compares the tree's content with the reference's, access times
// excepted (the reference keeps its own clock in step).
func (r *ref) same(t *Tree) error {
	got := content(t)
	if len(got) != len(r.m) {
		return fmt.Errorf("tree caches %d blocks, reference %d", len(got), len(r.m))
	}
	for k, want := range r.m {
		g := got[k]
		if g == nil {
			return fmt.Errorf("prefix %v missing from the tree", decode(k))
		}
		if g.lock != want.lock {
			return fmt.Errorf("prefix %v: lock %d, want %d", decode(k), g.lock, want.lock)
		}
		if g.access != want.access {
			return fmt.Errorf("prefix %v: access %d, want %d", decode(k), g.access, want.access)
		}
		for i := range r.pools {
			if !slices.Equal(g.pages[i], want.pages[i]) || g.snaps[i] != want.snaps[i] {
				return fmt.Errorf("prefix %v pool %d: pages %v snap %d, want %v snap %d", decode(k), i, g.pages[i], g.snaps[i], want.pages[i], want.snaps[i])
			}
		}
	}
	return nil
}

func decode(k string) []int32 {
	out := make([]int32, len(k)/4)
	for i := range out {
		out[i] = int32(binary.LittleEndian.Uint32([]byte(k[4*i:])))
	}
	return out
}

// testHash is a chained digest for tests (any collision-free function
// serves; package events has vLLM's).
func testHash(parent *Digest, block []int32) Digest {
	h := sha256.New()
	if parent != nil {
		h.Write(parent[:])
	}
	for _, t := range block {
		h.Write(binary.LittleEndian.AppendUint32(nil, uint32(t)))
	}
	return Digest(h.Sum(nil))
}

// digestOf is the chained digest of the block ending tokens.
func digestOf(tokens []int32, block int) Digest {
	var prev *Digest
	var d Digest
	for L := block; L <= len(tokens); L += block {
		d = testHash(prev, tokens[L-block:L])
		prev = &d
	}
	return d
}

// fakePools count the references to every page of every token pool and
// know which state slots the tree owns.
type fakePools struct {
	t     testing.TB
	pools []Pool
	refs  []map[int32]int
	tree  []map[int32]bool // per state pool: slots the tree owns
	next  int32
	freed [][]int32 // pages whose count reached zero, per pool, since the last reset of the log
	rel   [][]int32 // every id the tree released, per pool
	ret   [][]int32 // every page the tree retained, per pool
}

var _ Owner = (*fakePools)(nil)

func newFakePools(t testing.TB, pools []Pool) *fakePools {
	f := &fakePools{t: t, pools: pools, refs: make([]map[int32]int, len(pools)), tree: make([]map[int32]bool, len(pools))}
	for i := range pools {
		f.refs[i], f.tree[i] = map[int32]int{}, map[int32]bool{}
	}
	f.clearLog()
	return f
}

func (f *fakePools) clearLog() {
	f.freed, f.rel, f.ret = make([][]int32, len(f.pools)), make([][]int32, len(f.pools)), make([][]int32, len(f.pools))
}

// alloc hands out a fresh page (count 1) or, for a state pool, slot.
func (f *fakePools) alloc(pool int) int32 {
	f.next++
	if f.pools[pool].tokens() {
		f.refs[pool][f.next] = 1
	}
	return f.next
}

func (f *fakePools) hold(pool int, pages []int32) {
	for _, pg := range pages {
		if pg == Released {
			continue
		}
		if f.refs[pool][pg] <= 0 {
			f.t.Fatalf("pool %d: hold on free page %d", pool, pg)
		}
		f.refs[pool][pg]++
	}
}

func (f *fakePools) drop(pool int, pages []int32) {
	for _, pg := range pages {
		if pg == Released {
			continue
		}
		if f.refs[pool][pg] <= 0 {
			f.t.Fatalf("pool %d: release of free page %d", pool, pg)
		}
		f.refs[pool][pg]--
		if f.refs[pool][pg] == 0 {
			delete(f.refs[pool], pg)
			f.freed[pool] = append(f.freed[pool], pg)
		}
	}
}

func (f *fakePools) Shared(pool int, pg int32) bool { return f.refs[pool][pg] > 1 }

func (f *fakePools) Retain(pool int, pages []int32) {
	if !f.pools[pool].tokens() {
		f.t.Fatalf("Retain on state pool %d", pool)
	}
	f.ret[pool] = append(f.ret[pool], heldOnly(pages)...)
	f.hold(pool, pages)
}

func (f *fakePools) Release(pool int, ids []int32) {
	f.rel[pool] = append(f.rel[pool], heldOnly(ids)...)
	if f.pools[pool].tokens() {
		f.drop(pool, ids)
		return
	}
	for _, s := range ids {
		if !f.tree[pool][s] {
			f.t.Fatalf("state pool %d: tree released slot %d it does not own", pool, s)
		}
		delete(f.tree[pool], s)
	}
}

func heldOnly(ids []int32) []int32 {
	out := []int32{}
	for _, id := range ids {
		if id != Released {
			out = append(out, id)
		}
	}
	return out
}

func sorted(s []int32) []int32 {
	s = slices.Clone(s)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s
}

// recorder is an Observer keeping the set of live digests.
type recorder struct {
	t    testing.TB
	live map[Digest]bool
	log  []string
}

func (r *recorder) BlocksStored(parent *Digest, blocks []Digest, tokens []int32) {
	if parent != nil && !r.live[*parent] {
		r.t.Fatalf("stored after a parent that is not live")
	}
	for _, d := range blocks {
		if r.live[d] {
			r.t.Fatalf("block stored twice")
		}
		r.live[d] = true
	}
	r.log = append(r.log, fmt.Sprintf("stored %d blocks (%d tokens)", len(blocks), len(tokens)))
}

func (r *recorder) BlocksRemoved(blocks []Digest) {
	for _, d := range blocks {
		if !r.live[d] {
			r.t.Fatalf("removal of a block not stored")
		}
		delete(r.live, d)
	}
	r.log = append(r.log, fmt.Sprintf("removed %d blocks", len(blocks)))
}

func (r *recorder) AllCleared() {
	clear(r.live)
	r.log = append(r.log, "cleared")
}

// liveWant is the digest set the reference's prefixes must have.
func (r *ref) digests() map[Digest]bool {
	out := map[Digest]bool{}
	for k := range r.m {
		out[digestOf(decode(k), r.block)] = true
	}
	return out
}

func sameDigests(a, b map[Digest]bool) bool { return maps.Equal(a, b) }
