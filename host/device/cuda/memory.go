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

// growStage makes the pinned ring and its device mirror hold at least n
// bytes, replacing them (newStage) when they are smaller.
func (d *Device) growStage(n int64) error {
	if d.pin.size >= n {
		return nil
	}
	return d.newStage(max(n, 2*d.pin.size, stageBytes))
}

// newStage replaces the pinned ring and its device mirror by fresh ones of
// size bytes, after a synchronisation. Buffers that captured graphs copy
// through are retired, not freed: so while a capture is being recorded the
// spans already taken (recorded copies, bound spans, staged keys) stay valid
// in the old buffers, and the recording continues in the new ones. Only the
// stream capture itself (EndCapture issuing the recording) may not replace
// them.
func (d *Device) newStage(size int64) error {
	if d.mode == modeCapture {
		return &ErrRingFull{Need: size, Size: d.ring.size}
	}
	if d.st.s != nil {
		if err := d.st.sync(); err != nil {
			return err
		}
	}
	pin, err := newPinned(size)
	if err != nil {
		return err
	}
	dev, err := cu.MemAlloc(size)
	if err != nil {
		_ = pin.free()
		return fmt.Errorf("cuda: staging buffer of %d bytes: %w", size, err)
	}
	if err := d.retirePinned(d.pin); err != nil {
		return err
	}
	if err := d.retireDev(d.stageDev); err != nil {
		return err
	}
	d.pin, d.stageDev, d.ring = pin, dev, ring{size: size}
	return nil
}

// stage takes an n-byte span of the pinned ring, fills it and queues its
// copy to dst (or, when dst is 0, to the ring's device mirror), returning
// the device address. While a capture is open the copy is recorded and fill
// is kept: a graph launch calls it again to refill the span from the bound
// host slices' current contents.
func (d *Device) stage(n int64, fill func([]byte) error, dst uintptr) (uintptr, error) {
	if n == 0 {
		return uintptr(d.stageDev), nil
	}
	a := (n + ringAlign - 1) / ringAlign * ringAlign
	switch {
	case a > d.ring.size:
		if err := d.growStage(a); err != nil {
			return 0, err
		}
	case d.mode == modeRecord && !d.ring.fits(n):
		// A recording cannot wrap (its spans are the graph's); continue it
		// in a larger ring instead of failing the capture.
		if err := d.newStage(max(a, 2*d.pin.size)); err != nil {
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
	if err := fill(d.pin.bytes()[off : off+n]); err != nil {
		return 0, err
	}
	target := dst
	if target == 0 {
		target = uintptr(d.stageDev) + uintptr(off)
	}
	host := unsafe.Add(d.pin.p, off)
	if d.mode == modeRecord {
		d.rec.ops = append(d.rec.ops, op{kind: opHtoD, host: host, dev: target, n: n})
		d.rec.binds = append(d.rec.binds, binding{host: host, n: n, fill: fill})
	}
	return target, htodAsync(target, host, n, d.st)
}

// stageOnce stages like stage, but while recording a slice staged before
// (same key) reuses its span: within one step its contents cannot differ.
func (d *Device) stageOnce(k stageKey, n int64, fill func([]byte) error) (uintptr, error) {
	if d.mode == modeRecord {
		if p, ok := d.rec.staged[k]; ok {
			return p, nil
		}
	}
	p, err := d.stage(n, fill, 0)
	if err == nil && d.mode == modeRecord {
		d.rec.staged[k] = p
	}
	return p, err
}

func int32Bytes(v []int32) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(v))), 4*len(v))
}

const (
	keyInts uint8 = iota + 1
	keyDoubles
	keyDecode
	keyIDs
)

// stageInts stages a host slice of int32 the caller owns (token ids,
// positions, row indices).
func (d *Device) stageInts(v []int32) (uintptr, error) {
	if len(v) == 0 {
		return d.stage(0, nil, 0)
	}
	k := stageKey{kind: keyInts, p1: uintptr(unsafe.Pointer(&v[0])), n: len(v)}
	return d.stageOnce(k, int64(4*len(v)), func(b []byte) error { copy(b, int32Bytes(v)); return nil })
}

// stageIDs stages token ids for a table of rows rows. The fill checks every
// id, so a graph launch re-encoding a bad one is refused instead of reading
// outside the table.
func (d *Device) stageIDs(ids []int32, rows int) (uintptr, error) {
	k := stageKey{kind: keyIDs, p1: uintptr(unsafe.Pointer(&ids[0])), p2: uintptr(rows), n: len(ids)}
	return d.stageOnce(k, int64(4*len(ids)), func(b []byte) error {
		for _, id := range ids {
			if id < 0 || int(id) >= rows {
				return fmt.Errorf("cuda: token id %d outside the embedding table of %d rows", id, rows)
			}
		}
		copy(b, int32Bytes(ids))
		return nil
	})
}

// stageMeta stages [start, pages..., 0 padding] (metaLen ints) for the
// attention and KV-write kernels. start is a value: a graph replays it as
// captured (per-step positions belong in the DecodeKernels path).
func (d *Device) stageMeta(start int, pages []int32) (uintptr, error) {
	n := metaLen(len(pages))
	return d.stage(int64(4*n), func(b []byte) error {
		m := unsafe.Slice((*int32)(unsafe.Pointer(&b[0])), n)
		clear(m)
		m[0] = int32(start)
		copy(m[1:], pages)
		return nil
	}, 0)
}

func (d *Device) stageDoubles(v []float64) (uintptr, error) {
	if len(v) == 0 {
		return d.stage(0, nil, 0)
	}
	k := stageKey{kind: keyDoubles, p1: uintptr(unsafe.Pointer(&v[0])), n: len(v)}
	return d.stageOnce(k, int64(8*len(v)), func(b []byte) error {
		copy(b, unsafe.Slice((*byte)(unsafe.Pointer(&v[0])), 8*len(v)))
		return nil
	})
}

// stageDecode stages the batched-decode metadata: positions, then one page
// table of stride pages per row (decodeMeta checks every page a row reads —
// from window positions back, 0 meaning all — and every position again at
// each graph launch).
func (d *Device) stageDecode(kv device.KVLayer, positions []int32, tables [][]int32, maxLen, window int) (meta uintptr, stride int, err error) {
	rows := len(positions)
	for _, t := range tables[:rows] {
		stride = max(stride, len(t))
	}
	geo := decodeGeometry{pageSize: kv.PageSize, slots: kv.Slots, stride: stride, maxLen: maxLen, window: window}
	k := stageKey{kind: keyDecode, p1: uintptr(unsafe.Pointer(&positions[0])), p2: uintptr(unsafe.Pointer(&tables[0])), n: rows, geo: geo}
	meta, err = d.stageOnce(k, int64(4*(rows+rows*stride)), func(b []byte) error {
		return geo.encode(unsafe.Slice((*int32)(unsafe.Pointer(&b[0])), rows+rows*stride), positions, tables[:rows])
	})
	return meta, stride, err
}

// scratchHalf makes sure the f32 → f16/bf16 scratch holds n bytes.
func (d *Device) scratchHalf(n int64) (uintptr, error) {
	if n <= d.halfBytes {
		return uintptr(d.half), nil
	}
	if err := d.st.sync(); err != nil {
		return 0, err
	}
	p, err := cu.MemAlloc(n)
	if errors.Is(err, cu.OutOfMemory) {
		return 0, d.oom(n)
	}
	if err != nil {
		return 0, err
	}
	if err := d.retireDev(d.half); err != nil {
		_ = cu.MemFree(p)
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
