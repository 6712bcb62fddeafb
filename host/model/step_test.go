package model

import (
	"slices"
	"testing"

	"github.com/kvhost/kvhost/host/alloc"
)

// TestStepStateBatch: eager, a state pool's batch is one entry per
// sequence (row offsets, the sequence's slot in that pool) and warm calls
// allocate nothing; decoding, one row per sequence with the replay's
// slots.
func TestStepStateBatch(t *testing.T) {
	m := &Model{}
	st := m.begin(nil, 5, nil, alloc.Activations)
	st.Seqs = []Seq{{Tokens: make([]int32, 3), Slots: []int32{7, 1}}, {Tokens: make([]int32, 2), Slots: []int32{4, 2}}}
	starts, slots := st.StateBatch(1)
	if !slices.Equal(starts, []int32{0, 3, 5}) || !slices.Equal(slots, []int32{1, 2}) {
		t.Fatalf("eager pool 1: starts %v slots %v", starts, slots)
	}
	starts, slots = st.StateBatch(0)
	if !slices.Equal(starts, []int32{0, 3, 5}) || !slices.Equal(slots, []int32{7, 4}) {
		t.Fatalf("eager pool 0: starts %v slots %v", starts, slots)
	}
	if n := testing.AllocsPerRun(20, func() { st.StateBatch(1) }); n != 0 {
		t.Fatalf("a warm StateBatch allocates %v times", n)
	}
	st.end()
	st = m.begin(nil, 3, nil, alloc.Graph)
	st.dec = &decodeInputs{slots: [][]int32{{9, 8, 7, 6}}, starts: []int32{0, 1, 2, 3, 4}}
	starts, slots = st.StateBatch(0)
	if !slices.Equal(starts, []int32{0, 1, 2, 3}) || !slices.Equal(slots, []int32{9, 8, 7}) {
		t.Fatalf("decode: starts %v slots %v", starts, slots)
	}
}
