package device

import (
	"strings"
	"testing"
)

func TestMambaBatchCheck(t *testing.T) {
	rows, err := MambaBatch{Starts: []int32{0, 3, 3, 4}, Slots: []int32{3, 0, 1}}.Check(4)
	if err != nil || rows != 4 {
		t.Fatalf("valid batch: rows %d, err %v", rows, err)
	}
	for _, c := range []struct {
		b    MambaBatch
		want string
	}{
		{MambaBatch{Starts: []int32{0, 1}, Slots: []int32{4}}, "state slot 4 outside the pool of 4"},
		{MambaBatch{Starts: []int32{0, 1}, Slots: []int32{-1}}, "state slot -1"},
		{MambaBatch{Starts: []int32{0, 2, 1}, Slots: []int32{0, 1}}, "ends at row 1 before it starts at 2"},
		{MambaBatch{Starts: []int32{1, 2}, Slots: []int32{0}}, "starts from 0"},
		{MambaBatch{Starts: []int32{0}, Slots: []int32{0}}, "needs 2 starts"},
	} {
		if _, err := c.b.Check(4); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: err %v, want %q", c.b, err, c.want)
		}
	}
}

func TestMambaStatesValidate(t *testing.T) {
	s := Mamba2{Heads: 4, HeadDim: 8, Groups: 2, State: 8, ConvKernel: 4, DtMax: 1}
	conv, ssm := 2*int64(s.ConvStateLen()), 4*int64(s.SSMStateLen())
	ok := MambaStates{Conv: Span{Ptr: 4096, Bytes: 3 * conv}, SSM: Span{Ptr: 8192, Bytes: 3*ssm + 5}, ConvType: BF16, ConvBytes: conv, SSMBytes: ssm}
	if err := ok.Validate(s); err != nil || ok.Slots() != 3 {
		t.Fatalf("valid states: %v, %d slots", err, ok.Slots())
	}
	for _, c := range []struct {
		edit func(*MambaStates)
		want string
	}{
		{func(st *MambaStates) { st.ConvType = Q8_0 }, "conv state type q8_0"},
		{func(st *MambaStates) { st.ConvType = F32 }, "conv state slot of 384 bytes, 192 f32 values need 768"},
		{func(st *MambaStates) { st.SSMBytes = 100 }, "ssm state slot of 100 bytes, 256 f32 values need 1024"},
		{func(st *MambaStates) { st.Conv.Bytes = 10 }, "hold no slot"},
		{func(st *MambaStates) { st.SSM.Ptr = 0 }, "hold no slot"},
	} {
		st := ok
		c.edit(&st)
		if err := st.Validate(s); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: err %v, want %q", st, err, c.want)
		}
	}
}

func TestExpertGroupsValidate(t *testing.T) {
	g := ExpertGroups{Experts: 8, K: 2, Offsets: Span{Ptr: 64, Bytes: 36}, Tokens: Span{Ptr: 128, Bytes: 40}, Slots: Span{Ptr: 256, Bytes: 40}, Weights: Buf{Ptr: 512, N: 10}}
	if err := g.Validate(5); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		g    ExpertGroups
		n    int
		want string
	}{
		{g, 6, "expert groups tokens holds 40 bytes, 12 int32 need 48"},
		{ExpertGroups{Experts: 8, K: 9}, 1, "top 9"},
		{ExpertGroups{Experts: 2000, K: 1}, 1, "2000 experts"},
		{func() ExpertGroups { h := g; h.Offsets.Bytes = 32; return h }(), 5, "offsets holds 32 bytes"},
		{func() ExpertGroups { h := g; h.Weights.N = 9; return h }(), 5, "weights hold 9 floats"},
	} {
		if err := c.g.Validate(c.n); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v n=%d: err %v, want %q", c.g, c.n, err, c.want)
		}
	}
}
