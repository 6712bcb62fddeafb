package radix_test

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/kvhost/kvhost/host/kv/radix"
)

var full4 = []radix.Pool{{Name: "kv", Kind: radix.Full, PageSize: 4}}

// TestHitEndsMidPage: a prompt that shares 10 tokens with a cached
// sequence hits the 8 of its whole pages; the 2 shared tokens of the third
// page are recomputed into a fresh page of its own, and the cached third
// page is never written.
func TestHitEndsMidPage(t *testing.T) {
	p := newPools(t, full4, 16)
	tree := newTree(t, full4, p, nil, nil)
	a, _ := admit(t, tree, p, toks(12, 100))
	insert(tree, p, a, false)
	release(tree, p, a)
	if st := tree.Stats(); st.Tokens != 12 || st.Pages[0] != 3 || st.Evictable[0] != 3 {
		t.Fatalf("after caching 12 tokens: %+v", st)
	}
	b, hit := admit(t, tree, p, cat(toks(10, 100), toks(5, 900)))
	if hit != 8 || !slices.Equal(b.tables[0][:2], a.tables[0][:2]) || b.tables[0][2] == a.tables[0][2] {
		t.Fatalf("hit %d tokens, pages %v (cached %v): want 8 tokens on the first two cached pages and a fresh third", hit, b.tables[0], a.tables[0])
	}
	// The same 12 tokens as a prompt: the last is computed, so the hit
	// stops at the page before it; 13 tokens hit all 12.
	c, hit := admit(t, tree, p, toks(12, 100))
	if hit != 8 {
		t.Fatalf("identical prompt hit %d tokens, want 8 (the last token is always computed)", hit)
	}
	d, hit := admit(t, tree, p, toks(13, 100))
	if hit != 12 || !slices.Equal(d.tables[0][:3], a.tables[0]) {
		t.Fatalf("13-token prompt hit %d on %v, want 12 on %v", hit, d.tables[0], a.tables[0])
	}
	// Inserting b caches only its whole pages: 3 of its 15 tokens' 4
	// pages; its partial last page stays its own.
	insert(tree, p, b, false)
	if st := tree.Stats(); st.Tokens != 12+4 {
		t.Fatalf("after b: %d cached tokens, want 16 (b's third page; its partial fourth is not cached)", st.Tokens)
	}
	for _, s := range []*seq{b, c, d} {
		release(tree, p, s)
	}
	if tree.Evict(0, 100) != 4 || p.freePages(0) != 16 {
		t.Fatalf("evicting everything left %d of 16 pages free", p.freePages(0))
	}
	p.allFree(16)
}

// TestPrefixStillPrefilling: a request arriving while another prefills the
// same prompt in chunks shares the chunks already inserted, computes the
// rest itself, and its duplicate pages stay its own (freed with it) while
// the tree keeps the first one's.
func TestPrefixStillPrefilling(t *testing.T) {
	p := newPools(t, full4, 32)
	tree := newTree(t, full4, p, nil, nil)
	prompt := toks(24, 1)
	// A prefills 8 tokens, then inserts them (chunk done).
	a, _ := admit(t, tree, p, prompt[:8])
	a.tokens = prompt[:8]
	insert(tree, p, a, false)
	// B arrives with the same prompt: it hits the 8 tokens.
	b, hit := admit(t, tree, p, prompt)
	if hit != 8 || !slices.Equal(b.tables[0][:2], a.tables[0][:2]) {
		t.Fatalf("B hit %d tokens (%v): want A's first chunk", hit, b.tables[0])
	}
	// A finishes its prefill (16 more tokens) and inserts; B, which
	// computed the same 16 itself, inserts after: the tree keeps A's.
	a.tokens = prompt
	a.tables[0] = p.grow(0, a.tables[0], len(prompt))
	insert(tree, p, a, false)
	free := p.freePages(0)
	insert(tree, p, b, false)
	if p.freePages(0) != free || tree.Stats().Pages[0] != 6 {
		t.Fatalf("B's insert retained duplicates: %d free (was %d), tree holds %d pages", p.freePages(0), free, tree.Stats().Pages[0])
	}
	var pre radix.Prefix
	tree.Match(prompt, &pre)
	if pre.Tokens != 24 || !slices.Equal(pre.Pages[0], a.tables[0]) {
		t.Fatalf("cached %d tokens on %v, want A's pages %v", pre.Tokens, pre.Pages[0], a.tables[0])
	}
	// B's lock moved to the whole prompt: nothing is evictable while
	// either runs, and B's release frees its 4 duplicate pages at once.
	if tree.Evict(0, 100) != 0 {
		t.Fatal("evicted a prefix a running sequence holds")
	}
	release(tree, p, b)
	if p.freePages(0) != free+4 {
		t.Fatalf("B's release freed %d pages, want its 4 duplicates", p.freePages(0)-free)
	}
	release(tree, p, a)
	if tree.Evict(0, 100) != 6 {
		t.Fatal("the prompt's 6 pages are not evictable after both finished")
	}
	p.allFree(32)
}

// TestEvictUnderPressure fills the pool with cached prefixes, some held by
// running sequences, and evicts: exactly the unlocked pages come back,
// least recently used first, and locked prefixes keep every page.
func TestEvictUnderPressure(t *testing.T) {
	const pages = 40
	p := newPools(t, full4, pages)
	tree := newTree(t, full4, p, nil, nil)
	system := toks(8, 1)
	var running []*seq
	for i := range 8 {
		s, _ := admit(t, tree, p, cat(system, toks(8, int32(100*(i+1)))))
		insert(tree, p, s, false)
		if i%3 == 0 {
			running = append(running, s) // i = 0, 3, 6 keep running
		} else {
			release(tree, p, s)
		}
	}
	// 2 system pages + 8 × 2 private pages = 18 cached; 3 running hold 2
	// private each plus the system pages.
	st := tree.Stats()
	if st.Pages[0] != 18 || st.Evictable[0] != 10 || p.freePages(0) != pages-18 {
		t.Fatalf("stats %+v, %d free", st, p.freePages(0))
	}
	// Ask for 3 pages: the two oldest unlocked leaves (i = 1, 2) go.
	if got := tree.Evict(0, 3); got != 4 || p.freePages(0) != pages-18+4 {
		t.Fatalf("Evict(3) freed %d (free %d), want the 2 oldest leaves' 4 pages", got, p.freePages(0))
	}
	var pre radix.Prefix
	for i, wantHit := range []int{16, 8, 8, 16, 16, 16, 16, 16} {
		tree.Match(cat(system, toks(8, int32(100*(i+1))), []int32{0}), &pre)
		if pre.Tokens != wantHit {
			t.Errorf("sequence %d: hit %d after eviction, want %d", i, pre.Tokens, wantHit)
		}
	}
	// Everything else unlocked goes; the running three keep theirs.
	if got := tree.Evict(0, 100); got != 6 || tree.Stats().Pages[0] != 8 || tree.Stats().Evictable[0] != 0 {
		t.Fatalf("Evict(all) freed %d, tree keeps %+v", got, tree.Stats())
	}
	if p.freePages(0) != pages-8 {
		t.Fatalf("%d pages free, want all but the running three's 8", p.freePages(0))
	}
	for _, s := range running {
		release(tree, p, s)
	}
	if got := tree.Evict(0, 100); got != 8 {
		t.Fatalf("after the last release Evict freed %d, want 8", got)
	}
	p.allFree(pages)
}

// TestForkSharing: the n choices of a request share the prompt's cached
// pages (each fork locks the parent's prefix), and the prefix stays until
// the last choice ends.
func TestForkSharing(t *testing.T) {
	p := newPools(t, full4, 32)
	tree := newTree(t, full4, p, nil, nil)
	parent, _ := admit(t, tree, p, toks(10, 1))
	insert(tree, p, parent, false) // prompt done: 8 tokens cached, the partial page stays shared
	choices := []*seq{parent}
	for range 3 {
		c := &seq{tokens: slices.Clone(parent.tokens), tables: [][]int32{slices.Clone(parent.tables[0])}, h: parent.h}
		p.Retain(0, c.tables[0])
		tree.Relock(c.h)
		choices = append(choices, c)
	}
	// Each choice writes its own tokens: copy-on-write of the partial
	// page, then pages of its own.
	for i, c := range choices {
		last := len(c.tables[0]) - 1
		p.Release(0, c.tables[0][last:])
		c.tables[0] = p.grow(0, c.tables[0][:last], len(c.tables[0])*4)
		c.tokens = append(c.tokens, toks(6, int32(50*(i+1)))...)
		c.tables[0] = p.grow(0, c.tables[0], len(c.tokens))
	}
	var pre radix.Prefix
	for i, c := range choices {
		insert(tree, p, c, false)
		release(tree, p, c)
		tree.Evict(0, 100)
		tree.Match(toks(10, 1), &pre)
		if left := len(choices) - 1 - i; left > 0 && (pre.Tokens != 8 || !slices.Equal(pre.Pages[0], parent.tables[0][:2])) {
			t.Fatalf("the prompt's pages were evicted while %d choices still run: hit %d", left, pre.Tokens)
		}
	}
	if pre.Tokens != 0 {
		t.Fatalf("the prompt is still cached after every choice ended and Evict")
	}
	p.allFree(32)
}

// TestWindowReuse: a window pool keeps what a sequence held at insert; a
// prefix is reusable where the window before it is held.
func TestWindowReuse(t *testing.T) {
	spec := []radix.Pool{{Name: "kv", Kind: radix.Full, PageSize: 4}, {Name: "swa", Kind: radix.Window, PageSize: 4, Window: 8}}
	p := newPools(t, spec, 32)
	tree := newTree(t, spec, p, nil, nil)
	a, _ := admit(t, tree, p, toks(32, 1))
	// A's window table gave back pages 0…5 (positions < 25, which no
	// later query reads) and holds 6 and 7.
	if slices.ContainsFunc(a.tables[1][:6], func(pg int32) bool { return pg != radix.Released }) || slices.Contains(a.tables[1][6:], radix.Released) {
		t.Fatalf("window table %v", a.tables[1])
	}
	insert(tree, p, a, false)
	release(tree, p, a)
	if st := tree.Stats(); st.Pages[0] != 8 || st.Pages[1] != 2 {
		t.Fatalf("tree holds %v pages, want 8 full and the window's last 2", st.Pages)
	}
	var pre radix.Prefix
	// At 32 the window 25…31 is held: reusable.
	tree.Match(toks(33, 1), &pre)
	if pre.Tokens != 32 || pre.Pages[1][5] != radix.Released || pre.Pages[1][7] == radix.Released {
		t.Fatalf("hit %d, window pages %v", pre.Tokens, pre.Pages[1])
	}
	// Diverging at 20: the window 13…19 is gone, and so is every shorter
	// boundary's but those within the first window (≤ 8 tokens, pages 0
	// and 1 released too): no hit.
	tree.Match(cat(toks(20, 1), []int32{999, 999}), &pre)
	if pre.Tokens != 0 {
		t.Fatalf("hit %d tokens at a boundary whose window is released", pre.Tokens)
	}
	// B fills the holes for positions < 24 by inserting the same prefix
	// while it still holds its window there; now 20 is reusable.
	b, hit := admit(t, tree, p, cat(toks(20, 1), []int32{7}))
	if hit != 0 {
		t.Fatalf("b hit %d", hit)
	}
	b.tokens = b.tokens[:20]
	insert(tree, p, b, false)
	tree.Match(cat(toks(20, 1), []int32{999, 999}), &pre)
	if pre.Tokens != 20 {
		t.Fatalf("after b filled the holes: hit %d, want 20", pre.Tokens)
	}
	release(tree, p, b)
	tree.Evict(0, 100)
	p.allFree(32)
}

// TestStateSnapshots: a model with recurrent state caches a prefix only
// with a snapshot at its end; a hit resumes only there, and eviction gives
// the snapshot slot back.
func TestStateSnapshots(t *testing.T) {
	spec := []radix.Pool{{Name: "kv", Kind: radix.Full, PageSize: 2}, {Name: "ssm", Kind: radix.State}}
	p := newPools(t, spec, 32)
	tree := newTree(t, spec, p, nil, nil)
	a, _ := admit(t, tree, p, toks(10, 1))
	insert(tree, p, a, false)
	if st := tree.Stats(); st.Tokens != 0 {
		t.Fatalf("stored %d tokens without a snapshot", st.Tokens)
	}
	insert(tree, p, a, true)
	if st := tree.Stats(); st.Tokens != 10 || st.Pages[1] != 1 {
		t.Fatalf("with a snapshot: %+v", st)
	}
	// An odd length cannot be cached (a partial block): the snapshot is
	// given back at once.
	a.tokens = append(a.tokens, 77)
	a.tables[0] = p.grow(0, a.tables[0], len(a.tokens))
	slots := len(p.slots[1])
	insert(tree, p, a, true)
	if len(p.slots[1]) != slots {
		t.Fatalf("a snapshot at 11 tokens (block 2) was kept")
	}
	release(tree, p, a)
	var pre radix.Prefix
	tree.Match(cat(toks(10, 1), toks(6, 50)), &pre)
	if pre.Tokens != 10 || pre.Snaps[1] < 0 || len(pre.Pages[0]) != 5 {
		t.Fatalf("hit %d snap %d pages %v, want 10 with a snapshot", pre.Tokens, pre.Snaps[1], pre.Pages[0])
	}
	// A prompt that stops inside the cached prefix gets nothing: no
	// snapshot at 6.
	tree.Match(cat(toks(6, 1), []int32{0, 0}), &pre)
	if pre.Tokens != 0 {
		t.Fatalf("hit %d tokens at a boundary without a snapshot", pre.Tokens)
	}
	if tree.Evict(1, 1) != 1 || len(p.slots[1]) != 0 {
		t.Fatalf("evicting the state pool kept slots %v", p.slots[1])
	}
	p.allFree(32)
}

// TestPreemptionKeepsCache: preemption drops the sequence's references and
// lock; its cached prefix stays and it hits it when readmitted.
func TestPreemptionKeepsCache(t *testing.T) {
	p := newPools(t, full4, 16)
	tree := newTree(t, full4, p, nil, nil)
	tokens := toks(14, 1)
	s, _ := admit(t, tree, p, tokens)
	insert(tree, p, s, false)
	release(tree, p, s) // preempted
	if p.freePages(0) != 16-3 {
		t.Fatalf("%d free after preemption, want the 3 cached pages kept", p.freePages(0))
	}
	s2, hit := admit(t, tree, p, tokens)
	if hit != 12 {
		t.Fatalf("readmitted sequence hit %d, want 12", hit)
	}
	release(tree, p, s2)
	tree.Evict(0, 100)
	p.allFree(16)
}

// TestReset refuses while a prefix is locked and clears otherwise.
func TestReset(t *testing.T) {
	p := newPools(t, full4, 8)
	rec := &events{}
	tree := newTree(t, full4, p, rec, hashTokens)
	s, _ := admit(t, tree, p, toks(9, 1))
	insert(tree, p, s, false)
	if err := tree.Reset(); !errors.Is(err, radix.ErrLocked) {
		t.Fatalf("Reset while locked: %v", err)
	}
	release(tree, p, s)
	if err := tree.Reset(); err != nil {
		t.Fatal(err)
	}
	if st := tree.Stats(); st.Tokens != 0 || st.Nodes != 0 || st.Pages[0] != 0 || rec.log[len(rec.log)-1] != "cleared" {
		t.Fatalf("after Reset: %+v, events %v", st, rec.log)
	}
	p.allFree(8)
}

func hashTokens(parent *radix.Digest, block []int32) radix.Digest {
	h := sha256.New()
	if parent != nil {
		h.Write(parent[:])
	}
	for _, t := range block {
		h.Write(binary.BigEndian.AppendUint32(nil, uint32(t)))
	}
	return radix.Digest(h.Sum(nil))
}

type events struct{ log []string }

func (e *events) BlocksStored(parent *radix.Digest, blocks []radix.Digest, tokens []int32) {
	par := "root"
	if parent != nil {
		par = string(parent[:2])
	}
	e.log = append(e.log, "stored "+par+" "+string(blocks[0][:2])+" "+string(rune('0'+len(blocks))))
	_ = tokens
}
func (e *events) BlocksRemoved(blocks []radix.Digest) {
	e.log = append(e.log, "removed "+string(blocks[0][:2])+" "+string(rune('0'+len(blocks))))
}
func (e *events) AllCleared() { e.log = append(e.log, "cleared") }

// TestEvents: a new leaf is stored after its parent's last block with
// chained digests, a split stores nothing, an eviction removes the leaf's
// blocks.
func TestEvents(t *testing.T) {
	p := newPools(t, full4, 16)
	rec := &events{}
	tree := newTree(t, full4, p, rec, hashTokens)
	a, _ := admit(t, tree, p, toks(12, 1))
	insert(tree, p, a, false)
	b, _ := admit(t, tree, p, cat(toks(4, 1), toks(9, 60)))
	insert(tree, p, b, false)
	release(tree, p, a)
	release(tree, p, b)
	tree.Evict(0, 1)
	d := func(tokens []int32) string {
		var prev *radix.Digest
		var x radix.Digest
		for i := 0; i+4 <= len(tokens); i += 4 {
			x = hashTokens(prev, tokens[i:i+4])
			prev = &x
		}
		return string(x[:2])
	}
	want := []string{
		"stored root " + d(toks(4, 1)) + " 3",
		"stored " + d(toks(4, 1)) + " " + d(cat(toks(4, 1), toks(4, 60))) + " 2",
		"removed " + d(toks(8, 1)) + " 2", // a's leaf is the older
	}
	if strings.Join(rec.log, "|") != strings.Join(want, "|") {
		t.Fatalf("events\n%q\nwant\n%q", rec.log, want)
	}
	tree.Evict(0, 100)
	p.allFree(16)
}

func TestConfigValidate(t *testing.T) {
	owner := newPools(t, full4, 1)
	for _, c := range []struct {
		cfg  radix.Config
		want string
	}{
		{radix.Config{Owner: owner}, "no pools"},
		{radix.Config{Pools: full4}, "Owner is nil"},
		{radix.Config{Pools: []radix.Pool{{Name: "kv", Kind: radix.Full}}, Owner: owner}, "page_size 0, want 1..65536"},
		{radix.Config{Pools: []radix.Pool{{Name: "w", Kind: radix.Window, PageSize: 4}}, Owner: owner}, "window 0, want 1..1073741824"},
		{radix.Config{Pools: []radix.Pool{{Name: "kv", Kind: radix.Full, PageSize: 4, Window: 3}}, Owner: owner}, "window 3 on a full pool"},
		{radix.Config{Pools: []radix.Pool{{Name: "s", Kind: radix.State, PageSize: 4}}, Owner: owner}, "no page_size (4)"},
		{radix.Config{Pools: []radix.Pool{{Name: "x", Kind: 9}}, Owner: owner}, "kind 9"},
		{radix.Config{Pools: []radix.Pool{{Name: "a", Kind: radix.Full, PageSize: 65521}, {Name: "b", Kind: radix.Full, PageSize: 65519}}, Owner: owner}, "least common multiple"},
		{radix.Config{Pools: full4, Owner: owner, Observer: &events{}}, "needs a Hash"},
	} {
		_, err := radix.New(c.cfg)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.cfg.Pools, err, c.want)
		}
	}
	tree, err := radix.New(radix.Config{Pools: []radix.Pool{{Name: "a", Kind: radix.Full, PageSize: 4}, {Name: "b", Kind: radix.Window, PageSize: 6, Window: 100}}, Owner: owner})
	if err != nil || tree.Block() != 12 {
		t.Fatalf("block %v, %v: want 12 (lcm of 4 and 6)", tree, err)
	}
}

// TestLockStale: a Prefix matched before the tree changed cannot be locked.
func TestLockStale(t *testing.T) {
	p := newPools(t, full4, 8)
	tree := newTree(t, full4, p, nil, nil)
	a, _ := admit(t, tree, p, toks(9, 1))
	insert(tree, p, a, false)
	var pre radix.Prefix
	tree.Match(toks(9, 1), &pre)
	b, _ := admit(t, tree, p, cat(toks(4, 1), toks(5, 40)))
	insert(tree, p, b, false) // splits the node pre points into
	defer func() {
		if r := recover(); r == nil || !strings.Contains(r.(string), "another tree version") {
			t.Fatalf("stale Lock: %v", r)
		}
	}()
	tree.Lock(&pre)
}

// TestForkBeforeInsert: pages a fork still shares are not adopted by its
// parent's insert (no lock of the fork's would cover them); the fork's own
// insert adopts them once it holds them alone.
func TestForkBeforeInsert(t *testing.T) {
	p := newPools(t, full4, 16)
	tree := newTree(t, full4, p, nil, nil)
	parent, _ := admit(t, tree, p, toks(8, 1))
	fork := &seq{tokens: slices.Clone(parent.tokens), tables: [][]int32{slices.Clone(parent.tables[0])}}
	p.Retain(0, fork.tables[0])
	insert(tree, p, parent, false)
	if st := tree.Stats(); st.Tokens != 0 || parent.h.Tokens() != 0 {
		t.Fatalf("the parent's insert adopted pages its fork shares: %+v", st)
	}
	release(tree, p, parent)
	insert(tree, p, fork, false)
	if st := tree.Stats(); st.Tokens != 8 || fork.h.Tokens() != 8 {
		t.Fatalf("the fork's insert, sole holder now: %+v lock %d", st, fork.h.Tokens())
	}
	release(tree, p, fork)
	if tree.Evict(0, 100) != 2 {
		t.Fatal("evict")
	}
	p.allFree(16)
}

// TestStatsWhileChanging: Stats may be read from another goroutine (the
// metrics scrape) while the scheduler changes the tree (run with -race).
func TestStatsWhileChanging(t *testing.T) {
	p := newPools(t, full4, 64)
	tree := newTree(t, full4, p, nil, nil)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 2000 {
			if st := tree.Stats(); st.EvictableTokens > st.Tokens+4*64 {
				t.Errorf("stats %+v", st)
			}
		}
	}()
	for i := range 200 {
		s, _ := admit(t, tree, p, cat(toks(8, 1), toks(9, int32(i*10))))
		insert(tree, p, s, false)
		release(tree, p, s)
		tree.Evict(0, 2)
	}
	<-done
	tree.Evict(0, 1000)
	p.allFree(64)
}
