package ledger

import (
	"fmt"
	"os"
	"sort"
	"sync"

	"github.com/kvhost/kvhost/host/alloc"
	"github.com/kvhost/kvhost/host/device"
)

// Allocator kinds in Usage.Kind.
const (
	KindCaching   = "caching"
	KindGraphPool = "graph_pool"
	KindArena     = "vmm_arena"
	KindDirect    = "direct"
	KindOutside   = "outside"
)

// Usage explains one allocator's device bytes:
// Σ Categories + Cached + Rounding = DeviceBytes.
type Usage struct {
	Name        string `json:"name"`
	Kind        string `json:"kind"`
	DeviceBytes int64  `json:"device_bytes"`
	// Categories holds the requested bytes per alloc.Category name; every
	// one of the seven names is present.
	Categories map[string]int64 `json:"categories"`
	// Cached is held but not handed out (caching allocator free blocks).
	Cached int64 `json:"cached_bytes"`
	// Rounding is charged beyond what was asked (block, page, granule).
	Rounding int64 `json:"rounding_bytes"`
}

// NewUsage returns a Usage with all seven categories at zero.
func NewUsage(name, kind string) Usage {
	u := Usage{Name: name, Kind: kind, Categories: map[string]int64{}}
	for _, c := range alloc.Categories() {
		u.Categories[c.String()] = 0
	}
	return u
}

// Explained is Σ categories + cached + rounding.
func (u Usage) Explained() int64 {
	n := u.Cached + u.Rounding
	for _, v := range u.Categories {
		n += v
	}
	return n
}

// Caching reports a caching allocator: one Usage for its general pool and
// one per private (graph) pool, named "<allocator>/<pool>".
type Caching struct{ A *alloc.Allocator }

// Usage implements Source.
func (c Caching) Usage() []Usage {
	snap := c.A.Snapshot()
	byPool := map[string]*Usage{}
	general := NewUsage(c.A.Name(), KindCaching)
	byPool["general"] = &general
	var names []string
	for _, seg := range snap.Segments {
		u, ok := byPool[seg.Pool]
		if !ok {
			nu := NewUsage(c.A.Name()+"/"+seg.Pool, KindGraphPool)
			u = &nu
			byPool[seg.Pool] = u
			names = append(names, seg.Pool)
		}
		u.DeviceBytes += seg.TotalSize
		for _, b := range seg.Blocks {
			if b.State != "active_allocated" {
				u.Cached += b.Size
				continue
			}
			u.Categories[b.Category] += b.Requested
			u.Rounding += b.Size - b.Requested
		}
	}
	sort.Strings(names)
	out := []Usage{general}
	for _, n := range names {
		out = append(out, *byPool[n])
	}
	return out
}

// DevicePage is the unit in which a device charges one Malloc: 4 KiB pages
// on the CPU device, 2 MiB on CUDA (cudaMalloc rounds to its granularity).
func DevicePage(info device.Info) int64 {
	if info.Kind == "cpu" {
		return 4096
	}
	return 2 << 20
}

// DirectCost is what one Malloc of n bytes costs on a device charging in
// page-byte units.
func DirectCost(n, page int64) int64 {
	if page <= 1 {
		return n
	}
	return (n + page - 1) / page * page
}

// PageMeter sits between an alloc.Direct and the device and counts the
// device-level cost of every live allocation, so the ledger can state page
// rounding explicitly.
type PageMeter struct {
	drv  alloc.Driver
	page int64

	mu     sync.Mutex
	live   map[device.Ptr]int64
	device int64
}

var (
	_ alloc.Driver      = (*PageMeter)(nil)
	_ device.FileMapper = (*PageMeter)(nil)
)

// NewPageMeter meters drv, which charges in page-byte units.
func NewPageMeter(drv alloc.Driver, page int64) *PageMeter {
	return &PageMeter{drv: drv, page: page, live: map[device.Ptr]int64{}}
}

// Malloc implements alloc.Driver.
func (m *PageMeter) Malloc(size int64) (device.Ptr, error) {
	p, err := m.drv.Malloc(size)
	if err != nil {
		return 0, err
	}
	cost := DirectCost(size, m.page)
	m.mu.Lock()
	m.live[p] = cost
	m.device += cost
	m.mu.Unlock()
	return p, nil
}

// MapFile maps a file range through the metered driver (device.FileMapper)
// and meters it as a Malloc of size bytes, which is what the device charges.
func (m *PageMeter) MapFile(f *os.File, off, size int64) (device.Ptr, error) {
	fm, ok := m.drv.(device.FileMapper)
	if !ok {
		return 0, fmt.Errorf("ledger: the metered device cannot map files")
	}
	p, err := fm.MapFile(f, off, size)
	if err != nil {
		return 0, err
	}
	cost := DirectCost(size, m.page)
	m.mu.Lock()
	m.live[p] = cost
	m.device += cost
	m.mu.Unlock()
	return p, nil
}

// CanMapFiles reports whether the metered device maps files in place.
func (m *PageMeter) CanMapFiles() bool {
	_, ok := m.drv.(device.FileMapper)
	return ok
}

// Free implements alloc.Driver.
func (m *PageMeter) Free(p device.Ptr) error {
	m.mu.Lock()
	cost, ok := m.live[p]
	if ok {
		delete(m.live, p)
		m.device -= cost
	}
	m.mu.Unlock()
	if !ok {
		return fmt.Errorf("ledger: free of %#x, which the meter never saw", uintptr(p))
	}
	return m.drv.Free(p)
}

// DeviceBytes is the device-level cost of the live allocations.
func (m *PageMeter) DeviceBytes() int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.device
}

// Direct reports a direct allocator metered by M.
type Direct struct {
	D *alloc.Direct
	M *PageMeter
}

// NewDirect returns a direct allocator named name over drv, metered in
// page-byte units, and its ledger source.
func NewDirect(name string, drv alloc.Driver, page int64) (*alloc.Direct, Direct) {
	m := NewPageMeter(drv, page)
	d := alloc.NewDirect(name, m)
	return d, Direct{D: d, M: m}
}

// Usage implements Source.
func (d Direct) Usage() []Usage {
	u := NewUsage(d.D.Name(), KindDirect)
	per, total := d.D.Bytes()
	for _, c := range alloc.Categories() {
		u.Categories[c.String()] = per[c]
	}
	u.DeviceBytes = d.M.DeviceBytes()
	u.Rounding = u.DeviceBytes - total
	return []Usage{u}
}

// Func adapts a function to Source.
type Func func() []Usage

// Usage implements Source.
func (f Func) Usage() []Usage { return f() }
