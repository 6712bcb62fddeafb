package cuda

import (
	"strings"
	"testing"

	"github.com/kvhost/kvhost/host/device"
)

func TestMambaBatchCheck(t *testing.T) {
	st := MambaStates{Slots: 4}
	rows, err := MambaBatch{Starts: []int32{0, 3, 3, 4}, Slots: []int32{3, 0, 1}}.check(st)
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
		if _, err := c.b.check(st); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: err %v, want %q", c.b, err, c.want)
		}
	}
	for _, ty := range []device.DType{device.F32, device.F16, device.BF16} {
		if _, err := convElem(ty); err != nil {
			t.Errorf("conv state %s refused: %v", ty, err)
		}
	}
	if _, err := convElem(device.Q8_0); err == nil {
		t.Error("q8_0 conv state accepted")
	}
}
