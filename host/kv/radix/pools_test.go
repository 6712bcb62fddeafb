package radix_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/kvhost/kvhost/host/kv/radix"
)

// pools is a small stand-in for kv.Set: token pools with free lists and
// reference counts (kv.Pool's semantics: Grow, Share, Release, Shared,
// Trim for a window pool) and slot pools, behind the radix.Owner the tree
// uses.
type pools struct {
	t     testing.TB
	spec  []radix.Pool
	refs  [][]int32 // per token pool, per page
	free  [][]int32
	slots []map[int32]bool // per state pool: slots in use
	next  int32
}

var _ radix.Owner = (*pools)(nil)

func newPools(t testing.TB, spec []radix.Pool, pages int) *pools {
	p := &pools{t: t, spec: spec, refs: make([][]int32, len(spec)), free: make([][]int32, len(spec)), slots: make([]map[int32]bool, len(spec))}
	for i, s := range spec {
		if s.Kind == radix.State {
			p.slots[i] = map[int32]bool{}
			continue
		}
		p.refs[i] = make([]int32, pages)
		for pg := pages - 1; pg >= 0; pg-- {
			p.free[i] = append(p.free[i], int32(pg))
		}
	}
	return p
}

// grow appends pages to table until it covers n tokens of pool i.
func (p *pools) grow(i int, table []int32, n int) []int32 {
	ps := p.spec[i].PageSize
	for len(table)*ps < n {
		if len(p.free[i]) == 0 {
			p.t.Fatalf("pool %d exhausted", i)
		}
		pg := p.free[i][len(p.free[i])-1]
		p.free[i] = p.free[i][:len(p.free[i])-1]
		p.refs[i][pg] = 1
		table = append(table, pg)
	}
	return table
}

func (p *pools) Shared(i int, pg int32) bool { return pg != radix.Released && p.refs[i][pg] > 1 }

func (p *pools) Retain(i int, pages []int32) {
	for _, pg := range pages {
		if pg == radix.Released {
			continue
		}
		if p.refs[i][pg] <= 0 {
			p.t.Fatalf("pool %d: retain of free page %d", i, pg)
		}
		p.refs[i][pg]++
	}
}

func (p *pools) Release(i int, ids []int32) {
	for _, id := range ids {
		if p.spec[i].Kind == radix.State {
			if !p.slots[i][id] {
				p.t.Fatalf("state pool %d: release of free slot %d", i, id)
			}
			delete(p.slots[i], id)
			continue
		}
		if id == radix.Released {
			continue
		}
		if p.refs[i][id] <= 0 {
			p.t.Fatalf("pool %d: release of free page %d", i, id)
		}
		p.refs[i][id]--
		if p.refs[i][id] == 0 {
			p.free[i] = append(p.free[i], id)
		}
	}
}

// slot takes a fresh state slot of pool i.
func (p *pools) slot(i int) int32 {
	p.next++
	p.slots[i][p.next] = true
	return p.next
}

// trim releases the pages of a window pool's table that lie before from.
func (p *pools) trim(i int, table []int32, from int) {
	for j := 0; j < min(max(0, from)/p.spec[i].PageSize, len(table)); j++ {
		if table[j] != radix.Released {
			p.Release(i, table[j:j+1])
			table[j] = radix.Released
		}
	}
}

func (p *pools) freePages(i int) int { return len(p.free[i]) }

// allFree fails the test unless every page and slot came back.
func (p *pools) allFree(pages int) {
	p.t.Helper()
	for i, s := range p.spec {
		if s.Kind == radix.State {
			if len(p.slots[i]) != 0 {
				p.t.Fatalf("state pool %d: slots %v still held", i, p.slots[i])
			}
		} else if len(p.free[i]) != pages {
			p.t.Fatalf("pool %d: %d of %d pages free", i, len(p.free[i]), pages)
		}
	}
}

// seq is a running sequence as the engine keeps one.
type seq struct {
	tokens []int32
	tables [][]int32
	slots  []int32 // per state pool, its own
	h      radix.Handle
}

// admit matches tokens (all but the last, which is always computed), locks
// the hit, shares its pages and grows the tables over the rest; a state
// pool's slot copies the snapshot (nothing to copy in these stand-ins).
func admit(t *testing.T, tree *radix.Tree, p *pools, tokens []int32) (*seq, int) {
	t.Helper()
	var pre radix.Prefix
	tree.Match(tokens[:len(tokens)-1], &pre)
	s := &seq{tokens: tokens, tables: make([][]int32, len(p.spec)), slots: make([]int32, len(p.spec))}
	s.h = tree.Lock(&pre)
	for i, sp := range p.spec {
		s.slots[i] = -1
		if sp.Kind == radix.State {
			s.slots[i] = p.slot(i)
			continue
		}
		s.tables[i] = slices.Clone(pre.Pages[i])
		p.Retain(i, s.tables[i])
		s.tables[i] = p.grow(i, s.tables[i], len(tokens))
		if sp.Kind == radix.Window {
			p.trim(i, s.tables[i], len(tokens)-sp.Window+1)
		}
	}
	return s, pre.Tokens
}

// insert caches s's tokens and moves its lock; withState hands over a
// snapshot of each state pool (a fresh slot holding a copy of its state).
func insert(tree *radix.Tree, p *pools, s *seq, withState bool) {
	snaps := make([]int32, len(p.spec))
	for i, sp := range p.spec {
		snaps[i] = -1
		if sp.Kind == radix.State && withState {
			snaps[i] = p.slot(i)
		}
	}
	h := tree.Insert(s.tokens, s.tables, snaps)
	tree.Relock(h)
	tree.Unlock(s.h)
	s.h = h
}

// release is a finish or a preemption: the sequence's references and lock
// go, the tree's stay.
func release(tree *radix.Tree, p *pools, s *seq) {
	tree.Unlock(s.h)
	s.h = radix.Handle{}
	for i, sp := range p.spec {
		if sp.Kind == radix.State {
			p.Release(i, []int32{s.slots[i]})
		} else {
			p.Release(i, s.tables[i])
		}
	}
}

func toks(n int, from int32) []int32 {
	out := make([]int32, n)
	for i := range out {
		out[i] = from + int32(i)
	}
	return out
}

func cat(parts ...[]int32) []int32 {
	var out []int32
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

func newTree(t testing.TB, spec []radix.Pool, p *pools, obs radix.Observer, hash radix.Hasher) *radix.Tree {
	t.Helper()
	tree, err := radix.New(radix.Config{Pools: spec, Owner: p, Observer: obs, Hash: hash})
	if err != nil {
		t.Fatal(err)
	}
	return tree
}

func (s *seq) String() string {
	return fmt.Sprintf("seq(%d tokens, lock %d)", len(s.tokens), s.h.Tokens())
}
