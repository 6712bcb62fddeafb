package dry

import (
	"errors"
	"fmt"

	"github.com/kvhost/kvhost/host/device"
)

// Device is the dry-run device.
type Device struct {
	sizer     device.Sizer
	next      device.Ptr
	capturing bool
	kern      kernels
}

var (
	_ device.Device   = (*Device)(nil)
	_ device.Capturer = (*Device)(nil)
)

// top is the first address handed out; addresses descend from it.
const top = device.Ptr(1 << 46)

// New returns a dry device whose kernels size their scratch as s does.
func New(s device.Sizer) *Device {
	d := &Device{sizer: s, next: top}
	d.kern = kernels{d: d}
	return d
}

// Info names the device.
func (d *Device) Info() device.Info { return device.Info{Name: "dry:0", Kind: "dry"} }

// MemGetInfo reports an unbounded device: a dry run measures, it never
// runs out.
func (d *Device) MemGetInfo() (free, total int64) { return 1 << 62, 1 << 62 }

// Malloc hands out the next address range below the last, whole 4 KiB
// pages apart with a 1 MiB gap, as separate top-down mappings lie.
func (d *Device) Malloc(size int64) (device.Ptr, error) {
	if size <= 0 {
		return 0, fmt.Errorf("dry device: malloc of %d bytes", size)
	}
	d.next -= device.Ptr((size + 4095) / 4096 * 4096)
	d.next -= 1 << 20
	return d.next, nil
}

// Free forgets an allocation; addresses are never reused.
func (d *Device) Free(device.Ptr) error { return nil }

// Bytes refuses: a dry device holds no bytes.
func (d *Device) Bytes(device.Ptr, int64) ([]byte, error) {
	return nil, errors.New("dry device: memory has no contents")
}

// Kernels is the shape-checking kernel set.
func (d *Device) Kernels() device.Kernels { return &d.kern }

// Close releases nothing.
func (d *Device) Close() error { return nil }

// BeginCapture opens a capture; launches during it are checked as always.
func (d *Device) BeginCapture() error {
	if d.capturing {
		return errors.New("dry device: a capture is already open")
	}
	d.capturing = true
	return nil
}

// EndCapture returns a graph whose launch does nothing.
func (d *Device) EndCapture() (device.Graph, error) {
	if !d.capturing {
		return nil, errors.New("dry device: no capture is open")
	}
	d.capturing = false
	return graph{}, nil
}

type graph struct{}

func (graph) Launch() error { return nil }
func (graph) Launches() int { return 0 }
func (graph) Close() error  { return nil }
