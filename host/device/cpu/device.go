package cpu

import (
	"fmt"
	"os"
	"runtime"

	"golang.org/x/sys/unix"

	"github.com/kvhost/kvhost/host/device"
	kcpu "github.com/kvhost/kvhost/kernels/cpu"
)

// Kind is the registry name of this device.
const Kind = "cpu"

func init() {
	device.Register(Kind, func(o device.Options) (device.Device, error) { return New(o) })
}

// DefaultMemory is the capacity used when none is given: 8 GiB or half of the
// machine's RAM, whichever is smaller.
func DefaultMemory() int64 {
	const eight = 8 << 30
	var si unix.Sysinfo_t
	if err := unix.Sysinfo(&si); err != nil {
		return eight
	}
	half := int64(si.Totalram) * int64(si.Unit) / 2
	if half > 0 && half < eight {
		return half
	}
	return eight
}

// Device is the CPU device.
type Device struct {
	mem     memory
	pool    *kcpu.Pool
	threads int
	kern    kernels

	// capture state, touched only by the device-owning goroutine
	capturing bool
	rec       []func()
}

var (
	_ device.Device        = (*Device)(nil)
	_ device.VirtualMemory = (*Device)(nil)
	_ device.FileMapper    = (*Device)(nil)
	_ device.Kernels       = (*kernels)(nil)
)

// New opens a CPU device with o.MemoryBytes of capacity (DefaultMemory when 0)
// and o.Threads kernel threads (all cores when 0).
func New(o device.Options) (*Device, error) {
	capacity := o.MemoryBytes
	if capacity == 0 {
		capacity = DefaultMemory()
	}
	if capacity < 0 {
		return nil, fmt.Errorf("cpu device: memory capacity %d must be positive", capacity)
	}
	threads := o.Threads
	if threads <= 0 {
		threads = runtime.NumCPU()
	}
	d := &Device{mem: memory{name: "cpu:0", capacity: capacity}, pool: kcpu.NewPool(threads), threads: threads}
	d.kern = kernels{d: d}
	return d, nil
}

// Info describes the device.
func (d *Device) Info() device.Info {
	return device.Info{Name: fmt.Sprintf("CPU (%d threads)", d.threads), Kind: Kind, Total: d.mem.capacity, Threads: d.threads}
}

// MemGetInfo is exact: capacity minus the page-rounded bytes of every live
// allocation and every mapped granule.
func (d *Device) MemGetInfo() (free, total int64) { return d.mem.memGetInfo() }

// Malloc allocates size bytes, charged in whole 4 KiB pages.
func (d *Device) Malloc(size int64) (device.Ptr, error) { return d.mem.malloc(size) }

// Free releases a Malloc allocation.
func (d *Device) Free(p device.Ptr) error { return d.mem.free(p) }

// MapFile maps size bytes of f from off read-only, in place (zero copy),
// charged as a Malloc of size bytes; Free unmaps it.
func (d *Device) MapFile(f *os.File, off, size int64) (device.Ptr, error) {
	return d.mem.mapFile(f, off, size)
}

// Bytes returns a bounds-checked view of device memory.
func (d *Device) Bytes(p device.Ptr, n int64) ([]byte, error) { return d.mem.bytes(p, n) }

// Granularity is the VMM mapping unit (2 MiB).
func (d *Device) Granularity() int64 { return granularity }

// Reserve reserves address space without charging capacity.
func (d *Device) Reserve(size int64) (device.Ptr, error) { return d.mem.reserve(size) }

// Map backs part of a reservation, charging capacity.
func (d *Device) Map(base device.Ptr, offset, size int64) error {
	return d.mem.mapRange(base, offset, size)
}

// Release frees a whole reservation.
func (d *Device) Release(base device.Ptr) error { return d.mem.release(base) }

// Kernels returns the CPU kernel set.
func (d *Device) Kernels() device.Kernels { return &d.kern }

// Close unmaps all memory and stops the kernel workers.
func (d *Device) Close() error {
	d.pool.Close()
	return d.mem.closeAll()
}
