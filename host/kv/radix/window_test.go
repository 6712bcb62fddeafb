package radix_test

import (
	"testing"

	"github.com/kvhost/kvhost/host/kv/radix"
)

// TestWindowPagesUnderLocks: a sequence that prefilled 40 tokens and
// cached them holds the whole prefix locked; of the window pool (window 8,
// pages of 4) its later queries read only positions 33.. (pages 8 and 9),
// so once it has trimmed pages 0..7 they are spare: counted evictable,
// punched into holes by Evict, after which the 40-token boundary still
// matches and the boundaries that needed the punched pages do not. A
// second holder of the same prefix keeps pages 8 and 9 needed after the
// first has decoded past its window and given its hold up (ReleaseWindow);
// without it they are spare too. Every page comes back.
func TestWindowPagesUnderLocks(t *testing.T) {
	spec := []radix.Pool{{Name: "full", Kind: radix.Full, PageSize: 4}, {Name: "swa", Kind: radix.Window, PageSize: 4, Window: 8}}
	const pages = 64
	p := newPools(t, spec, pages)
	tree := newTree(t, spec, p, nil, nil)
	prompt := toks(41, 100)
	a, hit := admit(t, tree, p, prompt)
	if hit != 0 {
		t.Fatalf("hit %d on an empty tree", hit)
	}
	// Chunked prefill: the tables hold every page while the prefix is
	// inserted (admit trimmed to the window already: grow them back).
	p.Release(1, a.tables[1])
	a.tables[1] = p.grow(1, a.tables[1][:0], 40)
	insert(tree, p, a, false)
	if !a.h.Win() || a.h.Tokens() != 40 {
		t.Fatalf("lock %d tokens, window %v", a.h.Tokens(), a.h.Win())
	}
	tree.Refresh()
	if n := tree.Evictable(1); n != 0 {
		t.Fatalf("%d window pages evictable while the sequence holds them all", n)
	}
	var before radix.Prefix
	tree.Match(prompt[:30], &before)
	if before.Tokens != 28 {
		t.Fatalf("a 30-token prompt matched %d tokens before any punching, want 28", before.Tokens)
	}
	p.trim(1, a.tables[1], 40-8+1) // the sequence's window moved to 33..
	tree.Refresh()
	if n := tree.Evictable(1); n != 8 {
		t.Fatalf("%d spare window pages, want pages 0..7", n)
	}
	if n := tree.Evictable(0); n != 0 {
		t.Fatalf("%d full pages evictable under a lock", n)
	}
	free := p.freePages(1)
	if got := tree.Evict(1, 3); got != 8 || p.freePages(1) != free+8 {
		t.Fatalf("Evict freed %d (free %d → %d), want the node's 8 spare pages", got, free, p.freePages(1))
	}
	if st := tree.Stats(); st.Pages[1] != 2 || st.Evictable[1] != 0 || st.Pages[0] != 10 {
		t.Fatalf("after punching: %+v", st)
	}
	var m radix.Prefix
	if tree.Match(prompt[:30], &m); m.Tokens != 0 {
		t.Fatalf("a 30-token prompt matched %d tokens over punched pages", m.Tokens)
	}
	if tree.Match(prompt[:40], &m); m.Tokens != 40 || m.Pages[1][8] == radix.Released || m.Pages[1][7] != radix.Released {
		t.Fatalf("the 40-token boundary: %d tokens, window pages %v", m.Tokens, m.Pages[1])
	}
	// A second holder of the prefix reads pages 8 and 9.
	b, hit := admit(t, tree, p, prompt)
	if hit != 40 {
		t.Fatalf("second sequence hit %d, want 40", hit)
	}
	// The first decodes a window past the prefix and gives its hold up.
	a.tokens = toks(60, 100)
	a.tables[1] = p.grow(1, a.tables[1], 60)
	a.tables[0] = p.grow(0, a.tables[0], 60)
	p.trim(1, a.tables[1], 60-8+1)
	tree.ReleaseWindow(&a.h)
	tree.ReleaseWindow(&a.h) // once only
	if a.h.Win() {
		t.Fatal("the hold survived ReleaseWindow")
	}
	tree.Refresh()
	if n := tree.Evictable(1); n != 0 {
		t.Fatalf("%d window pages evictable while the second sequence reads 8 and 9", n)
	}
	release(tree, p, b)
	tree.Refresh()
	if n := tree.Evictable(1); n != 2 {
		t.Fatalf("%d window pages evictable with no window held, want 2", n)
	}
	release(tree, p, a)
	if err := tree.Reset(); err != nil {
		t.Fatal(err)
	}
	p.allFree(pages)
}
