//go:build cuda

package cuda

import (
	"errors"
	"fmt"
	"math"
	"unsafe"

	"gorgonia.org/cu"

	"github.com/kvhost/kvhost/host/device"
)

// pendingCopy is a device → host copy that landed in the pinned output ring
// during a replay and is delivered to dst after the graph has run.
type pendingCopy struct {
	dst []float32
	off int64
}

// growStage (re)allocates the pinned ring and its device mirror to hold at
// least n bytes; only outside capture, after a synchronisation.
func (d *Device) growStage(n int64) error {
	if d.mode != modeEager {
		return &ErrRingFull{Need: n, Size: d.ring.size}
	}
	if d.pin.size >= n {
		return nil
	}
	if d.st.s != nil {
		if err := d.st.sync(); err != nil {
			return err
		}
	}
	size := max(n, 2*d.pin.size, stageBytes)
	pin, err := newPinned(size)
	if err != nil {
		return err
	}
	dev, err := cu.MemAlloc(size)
	if err != nil {
		_ = pin.free()
		return fmt.Errorf("cuda: staging buffer of %d bytes: %w", size, err)
	}
	if err := d.pin.free(); err != nil {
		return err
	}
	if d.stageDev != 0 {
		if err := cu.MemFree(d.stageDev); err != nil {
			return err
		}
	}
	d.pin, d.stageDev, d.ring = pin, dev, ring{size: size}
	return nil
}

// stage copies src into the pinned ring and queues its copy to dst (or, when
// dst is 0, to the ring's device mirror), returning the device address. In
// replay it only fills the ring: the graph holds the copy.
func (d *Device) stage(src []byte, dst uintptr) (uintptr, error) {
	n := int64(len(src))
	if n == 0 {
		return uintptr(d.stageDev), nil
	}
	if a := (n + ringAlign - 1) / ringAlign * ringAlign; a > d.ring.size {
		if err := d.growStage(a); err != nil {
			return 0, err
		}
	}
	off, wrap, err := d.ring.take(n, d.mode == modeEager)
	if err != nil {
		return 0, err
	}
	if wrap {
		// The ring's earlier spans may still be waiting to be copied.
		if err := d.st.sync(); err != nil {
			return 0, err
		}
	}
	copy(d.pin.bytes()[off:off+n], src)
	target := dst
	if target == 0 {
		target = uintptr(d.stageDev) + uintptr(off)
	}
	if err := d.tape.entry(tagStage, uint64(off), uint64(n), uint64(target)); err != nil {
		return 0, err
	}
	if d.mode == modeReplay {
		return target, nil
	}
	return target, htodAsync(target, unsafe.Add(d.pin.p, off), n, d.st)
}

func (d *Device) stageInts(v []int32) (uintptr, error) {
	if len(v) == 0 {
		return d.stage(nil, 0)
	}
	return d.stage(unsafe.Slice((*byte)(unsafe.Pointer(&v[0])), 4*len(v)), 0)
}

// stageMeta stages [start, pages..., 0 padding] (metaLen ints) for the
// attention and KV-write kernels.
func (d *Device) stageMeta(start int, pages []int32) (uintptr, error) {
	n := metaLen(len(pages))
	if cap(d.meta) < n {
		d.meta = make([]int32, n)
	}
	m := d.meta[:n]
	clear(m)
	m[0] = int32(start)
	copy(m[1:], pages)
	return d.stageInts(m)
}

func (d *Device) stageDoubles(v []float64) (uintptr, error) {
	if len(v) == 0 {
		return d.stage(nil, 0)
	}
	return d.stage(unsafe.Slice((*byte)(unsafe.Pointer(&v[0])), 8*len(v)), 0)
}

// scratchHalf makes sure the f32 → f16/bf16 scratch holds n bytes.
func (d *Device) scratchHalf(n int64) (uintptr, error) {
	if n <= d.halfBytes {
		return uintptr(d.half), nil
	}
	if d.mode != modeEager {
		return 0, fmt.Errorf("cuda: GEMM conversion scratch of %d bytes must grow during capture (warm up first)", n)
	}
	if err := d.st.sync(); err != nil {
		return 0, err
	}
	if d.half != 0 {
		if err := cu.MemFree(d.half); err != nil {
			return 0, err
		}
		d.half, d.halfBytes = 0, 0
	}
	p, err := cu.MemAlloc(n)
	if errors.Is(err, cu.OutOfMemory) {
		return 0, d.oom(n)
	}
	if err != nil {
		return 0, err
	}
	d.half, d.halfBytes = p, n
	return uintptr(p), nil
}

// reservation is VMM address space and which granules of it are mapped.
type reservation struct {
	size   int64
	mapped []bool
	ranges [][2]int64 // offset, size of each mapping (unmapped as a whole)
}

// Granularity is the VMM mapping unit (cuMemGetAllocationGranularity), 0
// when the device has no VMM.
func (d *Device) Granularity() int64 { return d.facts.Granularity }

// Reserve reserves address space (cuMemAddressReserve); no memory is used.
func (d *Device) Reserve(size int64) (device.Ptr, error) {
	g := d.facts.Granularity
	if g <= 0 {
		return 0, errors.New("cuda: the device does not support virtual memory management")
	}
	if size <= 0 {
		return 0, fmt.Errorf("cuda: reserve of %d bytes", size)
	}
	size = (size + g - 1) / g * g
	var base device.Ptr
	err := d.do(func() error {
		p, err := vmmReserve(size)
		if err != nil {
			return err
		}
		base = device.Ptr(p)
		d.reservations[base] = &reservation{size: size, mapped: make([]bool, size/g)}
		return nil
	})
	return base, err
}

// Map backs [base+offset, base+offset+size) with physical memory, one
// cuMemCreate per run of unmapped granules; granules already mapped are
// left alone, as on the CPU device.
func (d *Device) Map(base device.Ptr, offset, size int64) error {
	g := d.facts.Granularity
	if g <= 0 || offset%g != 0 || size%g != 0 || size <= 0 || offset < 0 {
		return fmt.Errorf("cuda: map offset %d size %d: both must be multiples of the %d-byte granularity, size positive", offset, size, g)
	}
	return d.do(func() error {
		r, ok := d.reservations[base]
		if !ok {
			return fmt.Errorf("cuda: map into %#x, which is not a reservation", uintptr(base))
		}
		if offset+size > r.size {
			return fmt.Errorf("cuda: map [%d, %d) past the reservation's %d bytes", offset, offset+size, r.size)
		}
		for first := offset / g; first < (offset+size)/g; {
			if r.mapped[first] {
				first++
				continue
			}
			end := first
			for end < (offset+size)/g && !r.mapped[end] {
				end++
			}
			off, n := first*g, (end-first)*g
			if err := vmmMap(uintptr(base)+uintptr(off), n, d.facts.Index); err != nil {
				var de *DriverError
				if errors.As(err, &de) && de.IsOutOfMemory() {
					return d.oom(n)
				}
				return err
			}
			for i := first; i < end; i++ {
				r.mapped[i] = true
			}
			r.ranges = append(r.ranges, [2]int64{off, n})
			first = end
		}
		return nil
	})
}

// Release unmaps every mapping of a reservation and frees its addresses.
func (d *Device) Release(base device.Ptr) error {
	return d.do(func() error { return d.release(base) })
}

func (d *Device) release(base device.Ptr) error {
	r, ok := d.reservations[base]
	if !ok {
		return fmt.Errorf("cuda: release of %#x, which is not a reservation", uintptr(base))
	}
	if err := d.st.sync(); err != nil {
		return err
	}
	for _, rg := range r.ranges {
		if err := vmmUnmap(uintptr(base)+uintptr(rg[0]), rg[1]); err != nil {
			return err
		}
	}
	delete(d.reservations, base)
	return vmmAddressFree(uintptr(base), r.size)
}

// word helpers for launch arguments.
func ptrArg(p device.Ptr) uint64 { return uint64(p) }
func i32Arg(v int) uint64        { return uint64(uint32(int32(v))) }
func i64Arg(v int64) uint64      { return uint64(v) }
func f32Arg(v float32) uint64    { return uint64(math.Float32bits(v)) }

func f32frombytes(b []byte) float32 {
	return math.Float32frombits(uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24)
}
