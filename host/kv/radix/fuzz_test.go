package radix

import (
	"errors"
	"maps"
	"slices"
	"testing"
)

// configs are the pool sets the fuzz target draws from: one full pool at
// page sizes 1 and 2, a window pool beside it (same and larger pages, so
// the block is a common multiple), recurrent state, and a window pool
// alone.
var configs = [][]Pool{
	{{Name: "kv", Kind: Full, PageSize: 1}},
	{{Name: "kv", Kind: Full, PageSize: 2}},
	{{Name: "kv", Kind: Full, PageSize: 2}, {Name: "swa", Kind: Window, PageSize: 2, Window: 3}},
	{{Name: "kv", Kind: Full, PageSize: 2}, {Name: "swa", Kind: Window, PageSize: 4, Window: 5}},
	{{Name: "kv", Kind: Full, PageSize: 1}, {Name: "ssm", Kind: State}},
	{{Name: "kv", Kind: Full, PageSize: 2}, {Name: "swa", Kind: Window, PageSize: 2, Window: 4}, {Name: "ssm", Kind: State}},
	{{Name: "swa", Kind: Window, PageSize: 1, Window: 2}},
}

// harness drives a tree and the reference through the same operations the
// engine performs, with sequences holding pages in fake pools.
type harness struct {
	t    *testing.T
	tree *Tree
	ref  *ref
	fp   *fakePools
	rec  *recorder
	seqs []*hseq
	hist [][]int32 // token lists seen, to draw shared prefixes from
	p    Prefix
	data []byte
	done bool
}

// hseq is a running sequence: its tokens, its page tables (its own
// references), its own state slots and the prefix it locks.
type hseq struct {
	tokens []int32
	tables [][]int32
	h      Handle
}

// next is the next byte of the fuzz input, 0 once it is used up (done
// says so).
func (h *harness) next() int {
	if len(h.data) == 0 {
		h.done = true
		return 0
	}
	b := h.data[0]
	h.data = h.data[1:]
	return int(b)
}

func (h *harness) check(what string) {
	h.t.Helper()
	if err := h.ref.same(h.tree); err != nil {
		h.t.Fatalf("after %s: %v", what, err)
	}
	if h.rec != nil && !sameDigests(h.rec.live, h.ref.digests()) {
		h.t.Fatalf("after %s: %d live digests, the reference's prefixes have %d", what, len(h.rec.live), len(h.ref.digests()))
	}
	h.tree.Refresh() // as the engine does once a step's windows are trimmed
	st := h.tree.Stats()
	tokens, evictTokens := 0, 0
	pages, evictable := make([]int, len(h.ref.pools)), make([]int, len(h.ref.pools))
	for _, e := range h.ref.m {
		tokens += h.ref.block
		if e.lock == 0 {
			evictTokens += h.ref.block
		}
		for i, p := range h.ref.pools {
			n := 0
			if p.tokens() {
				n = len(heldOnly(e.pages[i]))
			} else if e.snaps[i] >= 0 {
				n = 1
			}
			pages[i] += n
			if e.lock == 0 {
				evictable[i] += n
			}
		}
	}
	for i := range h.ref.pools {
		for _, js := range h.spare(i) {
			evictable[i] += len(js)
		}
	}
	if st.Tokens != tokens || st.EvictableTokens != evictTokens || !slices.Equal(st.Pages, pages) || !slices.Equal(st.Evictable, evictable) {
		h.t.Fatalf("after %s: stats %+v, reference tokens %d/%d pages %v evictable %v", what, st, tokens, evictTokens, pages, evictable)
	}
}

// newTokens draws a token list, often starting with a prefix of one seen
// before.
func (h *harness) newTokens() []int32 {
	var out []int32
	if len(h.hist) > 0 && h.next()%4 != 0 {
		prev := h.hist[h.next()%len(h.hist)]
		out = append(out, prev[:h.next()%(len(prev)+1)]...)
	}
	for n := h.next() % 9; n >= 0; n-- {
		out = append(out, int32(h.next()%3))
	}
	if len(out) == 0 {
		out = append(out, 0)
	}
	return out
}

// grow gives s fresh pages up to its length and trims its window pools,
// as the engine does after a forward.
func (h *harness) grow(s *hseq) {
	for i, p := range h.ref.pools {
		if !p.tokens() {
			continue
		}
		for len(s.tables[i])*p.PageSize < len(s.tokens) {
			s.tables[i] = append(s.tables[i], h.fp.alloc(i))
		}
		if p.Kind == Window {
			from := len(s.tokens) - p.Window + 1
			for j := 0; j < max(0, from)/p.PageSize; j++ {
				if s.tables[i][j] != Released {
					h.fp.drop(i, s.tables[i][j:j+1])
					s.tables[i][j] = Released
				}
			}
		}
	}
	// Once s trimmed every window page of the prefix it locks, it gives up
	// its hold on them (the engine's trimKV).
	windows, past := false, s.h.Win()
	for _, p := range h.ref.pools {
		if p.Kind == Window {
			windows, past = true, past && len(s.tokens)-p.Window+1 >= s.h.Tokens()
		}
	}
	if windows && past {
		h.tree.ReleaseWindow(&s.h)
	}
}

// spare is the reference's account of window pool i's spare pages (the
// rule in window.go, from the sequences rather than the tree): for every
// locked prefix, the indexes of its last block's pages that no sequence's
// table holds and that no window-holding sequence whose locked prefix runs
// through the block reads — one reads page g while its prefix ends before
// (g+1)·PageSize + Window − 1.
func (h *harness) spare(i int) map[string][]int {
	p := h.ref.pools[i]
	out := map[string][]int{}
	if p.Kind != Window {
		return out
	}
	for k, e := range h.ref.m {
		if e.lock == 0 {
			continue
		}
		L := len(k) / 4
		for j, pg := range e.pages[i] {
			if pg == Released || h.fp.Shared(i, pg) {
				continue
			}
			g := (L-h.ref.block)/p.PageSize + j
			read := slices.ContainsFunc(h.seqs, func(s *hseq) bool {
				end := s.h.Tokens()
				return s.h.Win() && end >= L && key(s.tokens[:L]) == k && end < (g+1)*p.PageSize+p.Window-1
			})
			if !read {
				out[k] = append(out[k], j)
			}
		}
	}
	return out
}

// unshare gives s a private copy of a shared page it is about to write
// into (the engine's copy-on-write before a decode).
func (h *harness) unshare(s *hseq) {
	for i, p := range h.ref.pools {
		if !p.tokens() || len(s.tokens)%p.PageSize == 0 {
			continue
		}
		j := len(s.tokens) / p.PageSize
		if s.tables[i][j] == Released || !h.fp.Shared(i, s.tables[i][j]) {
			continue
		}
		h.fp.drop(i, s.tables[i][j:j+1])
		s.tables[i][j] = h.fp.alloc(i)
	}
}

// admit matches a new sequence, locks its hit, holds its pages and
// computes the rest.
func (h *harness) admit() {
	tokens := h.newTokens()
	h.hist = append(h.hist, tokens)
	h.match(tokens[:len(tokens)-1])
	s := &hseq{tokens: tokens, tables: make([][]int32, len(h.ref.pools))}
	s.h = h.tree.Lock(&h.p)
	h.ref.touch(tokens, h.p.Tokens, 1)
	if h.p.Tokens == 0 {
		h.ref.clock-- // a zero hit locks nothing and keeps the clock
	}
	for i, p := range h.ref.pools {
		if p.tokens() {
			s.tables[i] = slices.Clone(h.p.Pages[i])
			h.fp.hold(i, s.tables[i])
		}
	}
	h.grow(s)
	h.seqs = append(h.seqs, s)
	h.check("admit")
}

// match checks Match against the reference.
func (h *harness) match(tokens []int32) {
	h.tree.Match(tokens, &h.p)
	n, pages, snaps := h.ref.match(tokens)
	if h.p.Tokens != n {
		h.t.Fatalf("match %v: %d tokens, reference %d", tokens, h.p.Tokens, n)
	}
	for i, p := range h.ref.pools {
		if p.tokens() && !slices.Equal(h.p.Pages[i], pages[i]) || h.p.Snaps[i] != snaps[i] {
			h.t.Fatalf("match %v pool %d: pages %v snap %d, reference %v snap %d", tokens, i, h.p.Pages[i], h.p.Snaps[i], pages[i], snaps[i])
		}
	}
}

// insert caches s's tokens (with fresh snapshots when asked) and moves its
// lock to the prefix Insert returns.
func (h *harness) insert(s *hseq, snap bool) {
	snaps := make([]int32, len(h.ref.pools))
	for i, p := range h.ref.pools {
		snaps[i] = -1
		if p.Kind == State && snap {
			snaps[i] = h.fp.alloc(i)
			h.fp.tree[i][snaps[i]] = true
		}
	}
	h.fp.clearLog()
	// The reference decides on sharing as it was before the insert.
	counts := make([]map[int32]int, len(h.ref.pools))
	for i := range counts {
		counts[i] = maps.Clone(h.fp.refs[i])
	}
	nh := h.tree.Insert(s.tokens, s.tables, snaps)
	end, retained, released := h.ref.insert(s.tokens, s.tables, snaps, func(pool int, pg int32) bool { return counts[pool][pg] > 1 })
	if nh.Tokens() != end {
		h.t.Fatalf("insert %v: handle at %d, reference %d", s.tokens, nh.Tokens(), end)
	}
	for i := range h.ref.pools {
		if !slices.Equal(sorted(h.fp.ret[i]), sorted(heldOnly(retained[i]))) || !slices.Equal(sorted(h.fp.rel[i]), sorted(released[i])) {
			h.t.Fatalf("insert %v pool %d: retained %v released %v, reference %v %v", s.tokens, i, h.fp.ret[i], h.fp.rel[i], retained[i], released[i])
		}
	}
	h.tree.Relock(nh)
	h.ref.touch(s.tokens, nh.Tokens(), 1)
	if nh.Tokens() == 0 {
		h.ref.clock--
	}
	h.unlock(s)
	s.h = nh
	h.check("insert")
}

// unlock drops s's lock in both, with the pruning that may follow.
func (h *harness) unlock(s *hseq) {
	h.fp.clearLog()
	h.tree.Unlock(s.h)
	if s.h.Tokens() > 0 {
		h.ref.touch(s.tokens, s.h.Tokens(), -1)
		released := h.ref.prune(s.tokens, s.h.Tokens())
		for i := range h.ref.pools {
			if !slices.Equal(sorted(h.fp.rel[i]), sorted(released[i])) {
				h.t.Fatalf("unlock %v pool %d: released %v, reference %v", s.tokens, i, h.fp.rel[i], released[i])
			}
		}
	}
	s.h = Handle{}
}

// release drops s's own references and lock (finish or preemption).
func (h *harness) release(i int) {
	s := h.seqs[i]
	h.unlock(s)
	for j, p := range h.ref.pools {
		if p.tokens() {
			h.fp.drop(j, s.tables[j])
		}
	}
	h.seqs = slices.Delete(h.seqs, i, i+1)
	h.check("release")
}

// evict runs Evict and checks it against the reference's invariants, then
// brings the reference in step with what the tree removed.
func (h *harness) evict(pool, want int) {
	h.tree.Refresh()
	spareBefore := h.spare(pool)
	before := content(h.tree)
	h.fp.clearLog()
	got := h.tree.Evict(pool, want)
	after := content(h.tree)
	var maxGone uint64
	gone := 0
	released := make([][]int32, len(h.ref.pools))
	for k, e := range before {
		if after[k] != nil {
			continue
		}
		if e.lock != 0 {
			h.t.Fatalf("evict freed locked prefix %v", decode(k))
		}
		if !h.ref.states() || h.ref.fullSet(e) {
			// A state tree's prefix without snapshots goes with the
			// last child it was kept for (nothing resumes from it),
			// whenever that child was used: it is not a choice.
			maxGone = max(maxGone, e.access)
		}
		for i, p := range h.ref.pools {
			if i == pool {
				if p.tokens() {
					gone += len(heldOnly(e.pages[i]))
				} else if e.snaps[i] >= 0 {
					gone++
				}
			}
		}
		h.ref.drop(k, released)
	}
	// Pages released from prefixes that stay are punched holes: each must
	// have been spare in pool, and the reference's block gets the hole.
	punched := 0
	var maxPunched uint64
	for k, e := range h.ref.m {
		for i, p := range h.ref.pools {
			if !p.tokens() {
				continue
			}
			for j, pg := range e.pages[i] {
				if pg == Released || after[k].pages[i][j] != Released {
					continue
				}
				if i != pool || !slices.Contains(spareBefore[k], j) {
					h.t.Fatalf("evict(%d, %d) punched page %d of %v in pool %d, which was not spare (spare: %v)", pool, want, pg, decode(k), i, spareBefore[k])
				}
				released[i] = append(released[i], pg)
				e.pages[i][j] = Released
				punched++
				maxPunched = max(maxPunched, e.access)
			}
		}
	}
	if got != gone+punched {
		h.t.Fatalf("evict(%d, %d) says %d, removed prefixes held %d and %d were punched", pool, want, got, gone, punched)
	}
	spareLeft := 0
	for k, js := range h.spare(pool) {
		spareLeft += len(js)
		if punched > 0 && h.ref.m[k].access < maxPunched {
			h.t.Fatalf("evict punched a prefix used at %d and kept spare pages of %v used at %d: not least recently used first", maxPunched, decode(k), h.ref.m[k].access)
		}
	}
	if got < want && spareLeft > 0 {
		h.t.Fatalf("evict(%d, %d) stopped at %d with %d spare pages left", pool, want, got, spareLeft)
	}
	for i := range h.ref.pools {
		if !slices.Equal(sorted(h.fp.rel[i]), sorted(released[i])) {
			h.t.Fatalf("evict pool %d: released %v, removed prefixes held %v", i, h.fp.rel[i], released[i])
		}
		// Every page the tree released was its alone: it is free now.
		if h.ref.pools[i].tokens() && !slices.Equal(sorted(h.fp.freed[i]), sorted(released[i])) {
			h.t.Fatalf("evict pool %d: freed %v, released %v (a released page was still held)", i, h.fp.freed[i], released[i])
		}
	}
	evictableLeft := false
	for k, e := range after {
		if e.lock == 0 && h.ref.leaf(k) {
			evictableLeft = true
			if e.access < maxGone {
				h.t.Fatalf("evict kept %v (used at %d) and freed one used at %d: not least recently used first", decode(k), e.access, maxGone)
			}
		}
	}
	if (got < want || punched > 0) && evictableLeft {
		h.t.Fatalf("evict(%d, %d) stopped at %d with unlocked leaves left", pool, want, got)
	}
	h.check("evict")
}

// fork makes a choice of s sharing its pages, as the engine's n > 1 does.
func (h *harness) fork(s *hseq) {
	c := &hseq{tokens: slices.Clone(s.tokens), tables: make([][]int32, len(h.ref.pools)), h: s.h}
	for i, p := range h.ref.pools {
		if p.tokens() {
			c.tables[i] = slices.Clone(s.tables[i])
			h.fp.hold(i, c.tables[i])
		}
	}
	h.tree.Relock(c.h)
	if c.h.Tokens() > 0 {
		h.ref.touch(c.tokens, c.h.Tokens(), 1)
	}
	h.seqs = append(h.seqs, c)
	h.check("fork")
}

func (h *harness) run() {
	for {
		op := h.next()
		if h.done {
			break
		}
		var s *hseq
		i := 0
		if len(h.seqs) > 0 {
			i = h.next() % len(h.seqs)
			s = h.seqs[i]
		}
		if traceOps {
			h.t.Logf("op %d seq %d of %d; seqs: %v", op%9, i, len(h.seqs), h.seqDump())
		}
		switch op % 9 {
		case 0, 1:
			if len(h.seqs) < 12 {
				h.admit()
			}
		case 2:
			if s != nil {
				h.insert(s, h.next()%2 == 0)
			}
		case 3:
			if s != nil { // decode a few tokens
				h.unshare(s)
				for n := 1 + h.next()%5; n > 0; n-- {
					s.tokens = append(s.tokens, int32(h.next()%3))
				}
				h.grow(s)
			}
		case 4:
			if s != nil { // finish
				h.insert(s, h.next()%2 == 0)
				h.release(i)
			}
		case 5:
			if s != nil { // preempt
				h.release(i)
			}
		case 6:
			h.evict(h.next()%len(h.ref.pools), 1+h.next()%6)
		case 7:
			if s != nil && len(h.seqs) < 12 {
				h.fork(s)
			}
		case 8:
			h.match(h.newTokens()) // scoring a waiting request
			h.reset()
		}
	}
	for len(h.seqs) > 0 {
		h.release(len(h.seqs) - 1)
	}
	h.reset()
	for i := range h.ref.pools {
		if len(h.fp.refs[i]) != 0 || len(h.fp.tree[i]) != 0 {
			h.t.Fatalf("pool %d: %d pages and %d slots still held after every release and Reset", i, len(h.fp.refs[i]), len(h.fp.tree[i]))
		}
	}
}

// reset calls Reset: refused while any sequence locks a prefix, else the
// reference empties too.
func (h *harness) reset() {
	locked := slices.ContainsFunc(h.seqs, func(s *hseq) bool { return s.h.Tokens() > 0 })
	err := h.tree.Reset()
	if locked != errors.Is(err, ErrLocked) {
		h.t.Fatalf("Reset with locks %v: %v", locked, err)
	}
	if err == nil {
		h.ref.m = map[string]*entry{}
	}
	h.check("reset")
}

// FuzzTree drives the tree and a naive reference (a map from token
// prefixes to pages) through random admissions with matches and locks,
// prompt and finish inserts with snapshots, decodes with window trims,
// preemptions, n > 1 forks, evictions and resets, over pools of every kind,
// checking after each step that both cache the same prefixes with the same
// pages, locks and use times, that matches agree, that Evict frees exactly
// unlocked least-recently-used prefixes and that every page it releases is
// free, that the stats and events agree, and that nothing leaks.
func FuzzTree(f *testing.F) {
	f.Add([]byte{0, 0, 1, 2, 4, 5, 0, 2, 0, 1, 0, 3, 2, 6, 0, 3, 7, 1, 4, 0, 6, 0, 8})
	f.Add([]byte{2, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 0, 1, 1, 1, 2, 0, 0, 2, 1, 4, 1, 0, 6, 1, 9, 3, 2, 2, 0, 0})
	f.Add([]byte{4, 0, 0, 3, 1, 2, 0, 1, 2, 0, 0, 4, 0, 1, 0, 2, 0, 1, 3, 3, 1, 2, 1, 0, 5, 0, 6, 1, 2, 8})
	f.Add([]byte{5, 1, 0, 5, 2, 1, 2, 0, 2, 1, 3, 0, 4, 0, 1, 7, 0, 2, 0, 1, 4, 1, 0, 6, 2, 3, 6, 0, 5, 5, 0})
	f.Add([]byte{3, 0, 1, 1, 8, 1, 1, 1, 1, 1, 1, 1, 1, 2, 0, 1, 0, 0, 1, 3, 0, 7, 2, 2, 1, 6, 1, 9, 5})
	f.Add([]byte{6, 0, 0, 7, 0, 1, 2, 0, 1, 2, 0, 3, 0, 4, 0, 2, 0, 0, 0, 6, 0, 3})
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) == 0 {
			return
		}
		pools := configs[int(data[0])%len(configs)]
		h := &harness{t: t, ref: newRef(pools), fp: newFakePools(t, pools), data: data[1:]}
		h.rec = &recorder{t: t, live: map[Digest]bool{}}
		tree, err := New(Config{Pools: pools, Owner: h.fp, Hash: testHash, Observer: h.rec})
		if err != nil {
			t.Fatal(err)
		}
		h.tree = tree
		h.run()
	})
}

var traceOps = false

func (h *harness) seqDump() [][]any {
	var out [][]any
	for _, s := range h.seqs {
		out = append(out, []any{s.tokens, s.tables, s.h.Tokens()})
	}
	return out
}
