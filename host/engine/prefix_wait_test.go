package engine

import (
	"fmt"
	"testing"
)

// TestPrefixCacheWaitsForInflightPrefix: four requests sharing a 48-token
// prefix are admitted together (behind a short unrelated request whose
// first forward holds the engine until all are queued). The first prefills
// the prefix; the others wait for it
// instead of computing the same prefix beside it in the same forward, then
// take its cached blocks and compute only their own 4 tokens. Outputs equal
// those without the cache, each later request reports 48 cached tokens, and
// no cached page is written.
func TestPrefixCacheWaitsForInflightPrefix(t *testing.T) {
	const shared, own, maxTokens = 48, 4, 3
	const warm = 4
	reqs := []Request{{Prompt: []int32{500, 501, 502, 503}, MaxTokens: maxTokens, IgnoreEOS: true}}
	for r := range 4 {
		p := make([]int32, 0, shared+own)
		for j := range shared {
			p = append(p, int32(100+j*7%200))
		}
		for j := range own {
			p = append(p, int32(400+r*10+j))
		}
		reqs = append(reqs, Request{Prompt: p, MaxTokens: maxTokens, IgnoreEOS: true})
	}
	for _, tc := range []struct {
		name string
		cfg  Config
	}{
		// A 64-token chunk holds a decode of the first request, the
		// second's prompt and 11 tokens of the third's: without waiting
		// the third would start recomputing the prefix at once.
		{"admitted together", Config{MaxRunning: 5, MaxQueue: 8, ChunkedPrefill: 64}},
		// 8-token chunks, two running: the second sharer is admitted
		// while the first is half way through the prefix, hits the blocks
		// cached so far, waits, and joins the whole prefix (giving back
		// the shorter hit's pages).
		{"admitted mid-prefill", Config{MaxRunning: 2, MaxQueue: 8, ChunkedPrefill: 8}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			off, goff, _ := prefixRig(t, tinyModel(t), 64, tc.cfg)
			want := runHeld(t, off, goff, reqs)
			on := tc.cfg
			on.PrefixCache = true
			e, g, pool := prefixRig(t, tinyModel(t), 64, on)
			got := runHeld(t, e, g, reqs)
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("with the cache %v, without %v", got, want)
			}
			// The warm-up computes its 4 prompt tokens and 2 decodes, the
			// first sharer its 52 prompt tokens and 2 decodes, each other
			// sharer its 4 own tokens past the 48 cached and 2 decodes.
			if n, wantN := g.computed.Load(), int64(warm+maxTokens-1+shared+own+maxTokens-1+3*(own+maxTokens-1)); n != wantN {
				t.Fatalf("computed %d tokens, want %d (the prefix once); without the cache %d", n, wantN, goff.computed.Load())
			}
			if st := e.Stats().Prefix; st.Hits != 3*shared {
				t.Fatalf("prefix hits %d tokens, want %d", st.Hits, 3*shared)
			}
			g.check(t)
			cacheFree(t, e, pool)
		})
	}
}
