package model

import (
	"testing"

	"github.com/kvhost/kvhost/host/kv"
	"github.com/kvhost/kvhost/host/kv/kvtest"
	"github.com/kvhost/kvhost/sdk"
)

// TestSplitPoolsEqualOnePool: a declaration that splits the model's layers
// over two token pools (even layers in one, odd in the other, each with its
// own page tables handed out in a different order), with a state pool of
// request slots beside them, gives logits identical to one pool, eagerly
// and through captured decode graphs.
func TestSplitPoolsEqualOnePool(t *testing.T) {
	r := load(t, writeTiny(t, "f32"), 64)
	needs := r.m.Config.KVNeeds()
	decl, err := kvtest.DeclareMHA(needs, sdk.KVFP32, 16)
	if err != nil {
		t.Fatal(err)
	}
	split := kvtest.Split(decl, func(l int) bool { return l%2 == 1 })
	// A state pool of per-request scratch beside them: sequences carry a
	// slot in it, the graphs pad with one of their own.
	split = append(split, sdk.Pool{Name: "scratch", Kind: sdk.RecurrentState, PageSize: 1, BytesPerUnit: 16, Buffers: []sdk.Buffer{
		{Pool: "scratch", Name: "scratch", Role: sdk.RoleWorkspace, Layer: -1, Shape: []int64{4}, DType: "fp32"}}})
	two := kvtest.SetSlots(t, r.arena, split, needs, 64, 4)
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
		slots := make([]int32, len(pools.SlotPools()))
		for i, sp := range pools.SlotPools() {
			var err error
			if slots[i], err = sp.Acquire(); err != nil {
				t.Fatal(err)
			}
			defer sp.Release(slots[i])
		}
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
			for _, sp := range pools.SlotPools() {
				if sp.FreeSlots() != sp.Slots()-2 { // ours and the padding slot
					t.Fatalf("%d of %d slots free with graphs captured", sp.FreeSlots(), sp.Slots())
				}
			}
		}
		grow(len(prompt))
		logits := make([]float32, V)
		if err := r.m.Forward(pools, []Seq{{Tokens: prompt, Pages: tables, Slots: slots, LogitRows: 1}}, logits); err != nil {
			t.Fatal(err)
		}
		out := [][]float32{append([]float32(nil), logits...)}
		for pos := len(prompt); pos < len(prompt)+12; pos++ {
			grow(pos + 1)
			seq := []Seq{{Tokens: []int32{int32(argmax32(logits))}, Start: pos, Pages: tables, Slots: slots, LogitRows: 1}}
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
	if sp := two.SlotPools()[0]; sp.FreeSlots() != sp.Slots() {
		t.Fatalf("%d of %d slots free after the graphs closed", sp.FreeSlots(), sp.Slots())
	}
	// A sequence without a table for every pool is refused, not misread.
	if err := r.m.Forward(two, []Seq{{Tokens: prompt[:1], Pages: [][]int32{{0}}, LogitRows: 1}}, make([]float32, V)); err == nil {
		t.Fatal("one page table for two pools accepted")
	}
}
