package model

import (
	"testing"

	"github.com/kvhost/kvhost/host/kv"
	"github.com/kvhost/kvhost/host/kv/kvtest"
	"github.com/kvhost/kvhost/sdk"
)

// TestSplitPoolsEqualOnePool: a declaration that splits the model's layers
// over two token pools (even layers in one, odd in the other, each with its
// own page tables handed out in a different order) gives logits identical
// to one pool, eagerly and through captured decode graphs.
func TestSplitPoolsEqualOnePool(t *testing.T) {
	r := load(t, writeTiny(t, "f32"), 64)
	needs := r.m.Config.KVNeeds()
	decl, err := kvtest.DeclareMHA(needs, sdk.KVFP32, 16)
	if err != nil {
		t.Fatal(err)
	}
	split := kvtest.Split(decl, func(l int) bool { return l%2 == 1 })
	two := kvtest.Set(t, r.arena, split, needs, 64)
	if len(two.TokenPools()) != 2 || two.Table(0) != 0 || two.Table(1) != 1 {
		t.Fatalf("split: %d pools", len(two.TokenPools()))
	}
	// Skew the second pool's free list so its page numbers differ.
	skew, _ := two.TokenPools()[1].Grow(nil, 3*16)
	defer two.TokenPools()[1].Release(skew)

	V := r.m.Config.Vocab
	prompt := []int32{1, 50, 60, 70, 80, 90, 100, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20}
	decode := func(pools *kv.Set, graphs bool) [][]float32 {
		tables := make([][]int32, len(pools.TokenPools()))
		grow := func(n int) {
			for i, p := range pools.TokenPools() {
				var err error
				if tables[i], err = p.Grow(tables[i], n); err != nil {
					t.Fatal(err)
				}
			}
		}
		defer func() {
			for i, p := range pools.TokenPools() {
				p.Release(tables[i])
			}
		}()
		var g *DecodeGraphs
		if graphs {
			var err error
			if g, err = r.m.CaptureDecodeGraphs(pools, []int{1, 2}); err != nil {
				t.Fatal(err)
			}
			defer g.Close()
		}
		grow(len(prompt))
		logits := make([]float32, V)
		if err := r.m.Forward(pools, []Seq{{Tokens: prompt, Pages: tables, Slots: []int32{}, LogitRows: 1}}, logits); err != nil {
			t.Fatal(err)
		}
		out := [][]float32{append([]float32(nil), logits...)}
		for pos := len(prompt); pos < len(prompt)+12; pos++ {
			grow(pos + 1)
			seq := []Seq{{Tokens: []int32{int32(argmax32(logits))}, Start: pos, Pages: tables, Slots: []int32{}, LogitRows: 1}}
			if graphs {
				if ok, err := g.Run(seq, logits); err != nil || !ok {
					t.Fatalf("graph run: %v %v", ok, err)
				}
			} else if err := r.m.Forward(pools, seq, logits); err != nil {
				t.Fatal(err)
			}
			out = append(out, append([]float32(nil), logits...))
		}
		return out
	}
	for _, graphs := range []bool{false, true} {
		a, b := decode(r.pools, graphs), decode(two, graphs)
		for step := range a {
			for j := range a[step] {
				if a[step][j] != b[step][j] {
					t.Fatalf("graphs=%v step %d: logit %d is %g with one pool, %g with two", graphs, step, j, a[step][j], b[step][j])
				}
			}
		}
	}
	// A sequence without a table for every pool is refused, not misread.
	if err := r.m.Forward(two, []Seq{{Tokens: prompt[:1], Pages: [][]int32{{0}}, LogitRows: 1}}, make([]float32, V)); err == nil {
		t.Fatal("one page table for two pools accepted")
	}
}
