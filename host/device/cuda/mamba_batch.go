package cuda

import (
	"fmt"

	"github.com/kvhost/kvhost/host/device"
)

// The Mamba-2 batch description and its checks (driver-free; the launches
// are in mamba.go, build tag cuda).

// MambaBatch lists a Mamba-2 batch's sequences: sequence q is rows
// Starts[q]..Starts[q+1] of the activations and state slot Slots[q].
type MambaBatch struct {
	Starts []int32 // len(Slots)+1 non-decreasing row offsets from 0
	Slots  []int32
}

// MambaStates are one layer's state pools: Slots slots each of a conv state
// (s.ConvStateLen() values of ConvType: F32, F16 or BF16) and an f32 SSM
// state (s.SSMStateLen() values), laid out as kernels/cpu's.
type MambaStates struct {
	Conv     device.Ptr
	ConvType device.DType
	SSM      device.Ptr
	Slots    int
}

// check validates a batch against the pools and returns its rows.
func (b MambaBatch) check(st MambaStates) (int, error) {
	if len(b.Starts) != len(b.Slots)+1 || b.Starts[0] != 0 {
		return 0, fmt.Errorf("cuda device: mamba batch of %d slots needs %d starts from 0, has %d", len(b.Slots), len(b.Slots)+1, len(b.Starts))
	}
	for q, sl := range b.Slots {
		if sl < 0 || int(sl) >= st.Slots {
			return 0, fmt.Errorf("cuda device: mamba sequence %d: state slot %d outside the pool of %d", q, sl, st.Slots)
		}
		if b.Starts[q+1] < b.Starts[q] {
			return 0, fmt.Errorf("cuda device: mamba sequence %d ends at row %d before it starts at %d", q, b.Starts[q+1], b.Starts[q])
		}
	}
	return int(b.Starts[len(b.Slots)]), nil
}

func convElem(t device.DType) (int, error) {
	switch t {
	case device.F32:
		return 4, nil
	case device.F16, device.BF16:
		return 2, nil
	}
	return 0, fmt.Errorf("cuda device: mamba conv state type %s, want f32, f16 or bf16", t)
}
