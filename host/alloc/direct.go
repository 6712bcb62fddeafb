package alloc

import (
	"fmt"
	"os"
	"sync"

	"github.com/kvhost/kvhost/host/device"
)

// Direct hands out device allocations one to one, with no caching, and keeps
// the tally per category. Weights and the KV arena use it: they live as long
// as the model, so caching them would only hide their bytes in segments.
type Direct struct {
	name string
	drv  Driver

	mu    sync.Mutex
	live  map[device.Ptr]directBlock
	bytes [numCategories]int64
	total int64
}

type directBlock struct {
	size int64
	cat  Category
}

// NewDirect returns a direct allocator named name.
func NewDirect(name string, drv Driver) *Direct {
	return &Direct{name: name, drv: drv, live: map[device.Ptr]directBlock{}}
}

// Name is the ledger name.
func (d *Direct) Name() string { return d.name }

// Alloc allocates exactly size bytes from the device.
func (d *Direct) Alloc(size int64, cat Category) (device.Ptr, error) {
	if cat >= numCategories {
		return 0, fmt.Errorf("alloc %s: unknown category %d", d.name, cat)
	}
	p, err := d.drv.Malloc(size)
	if err != nil {
		return 0, fmt.Errorf("alloc %s: %d bytes of %s: %w", d.name, size, cat, err)
	}
	d.mu.Lock()
	d.live[p] = directBlock{size, cat}
	d.bytes[cat] += size
	d.total += size
	d.mu.Unlock()
	return p, nil
}

// CanMapFiles reports whether MapFile can serve bytes of a file in place:
// the driver is a device.FileMapper that says it can (a metering driver
// passes the question on).
func (d *Direct) CanMapFiles() bool {
	if c, ok := d.drv.(interface{ CanMapFiles() bool }); ok {
		return c.CanMapFiles()
	}
	_, ok := d.drv.(device.FileMapper)
	return ok
}

// MapFile maps size bytes of f from off in place (device.FileMapper) and
// tallies them like an allocation of size bytes in category cat; Free
// releases the mapping.
func (d *Direct) MapFile(f *os.File, off, size int64, cat Category) (device.Ptr, error) {
	if cat >= numCategories {
		return 0, fmt.Errorf("alloc %s: unknown category %d", d.name, cat)
	}
	fm, ok := d.drv.(device.FileMapper)
	if !ok || !d.CanMapFiles() {
		return 0, fmt.Errorf("alloc %s: the device cannot map files", d.name)
	}
	p, err := fm.MapFile(f, off, size)
	if err != nil {
		return 0, fmt.Errorf("alloc %s: map %d bytes of %s: %w", d.name, size, cat, err)
	}
	d.mu.Lock()
	d.live[p] = directBlock{size, cat}
	d.bytes[cat] += size
	d.total += size
	d.mu.Unlock()
	return p, nil
}

// Free releases an allocation.
func (d *Direct) Free(p device.Ptr) error {
	d.mu.Lock()
	b, ok := d.live[p]
	if ok {
		delete(d.live, p)
		d.bytes[b.cat] -= b.size
		d.total -= b.size
	}
	d.mu.Unlock()
	if !ok {
		return fmt.Errorf("alloc %s: free of %#x, which is not a live allocation", d.name, uintptr(p))
	}
	return d.drv.Free(p)
}

// Bytes returns the requested bytes held per category and in total. The
// device may charge more (page rounding); the ledger reports the difference
// as rounding.
func (d *Direct) Bytes() (perCategory [numCategories]int64, total int64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.bytes, d.total
}

// FreeAll releases every live allocation.
func (d *Direct) FreeAll() error {
	d.mu.Lock()
	ptrs := make([]device.Ptr, 0, len(d.live))
	for p := range d.live {
		ptrs = append(ptrs, p)
	}
	d.mu.Unlock()
	var first error
	for _, p := range ptrs {
		if err := d.Free(p); err != nil && first == nil {
			first = err
		}
	}
	return first
}
