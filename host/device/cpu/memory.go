package cpu

import (
	"fmt"
	"os"
	"sort"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/kvhost/kvhost/host/device"
)

const (
	// pageSize is the accounting unit of Malloc: a request costs its size
	// rounded up to whole pages, as the mapping really does.
	pageSize = 4096
	// granularity is the VMM mapping unit, chosen equal to CUDA's usual 2 MiB
	// so plans computed for either device round the same way.
	granularity = 2 << 20
)

// mapping is one live region: a Malloc block, a reservation or a read-only
// view of a file (MapFile).
type mapping struct {
	base device.Ptr
	mem  []byte
	// ptr is what the caller was handed: base, or for a file mapping the
	// address of the requested offset inside its first page.
	ptr      device.Ptr
	reserved bool
	// file marks a read-only file mapping; cost is what it is charged
	// (its size rounded to pages, as a Malloc of that size).
	file bool
	cost int64
	// mapped marks, per granule, which parts of a reservation are backed.
	mapped []bool
}

// memory is the capacity-bounded driver.
type memory struct {
	name     string
	capacity int64

	mu    sync.RWMutex
	used  int64
	table []*mapping // sorted by base
}

func roundUp(n, to int64) int64 { return (n + to - 1) / to * to }

func (m *memory) memGetInfo() (free, total int64) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.capacity - m.used, m.capacity
}

func (m *memory) oom(requested int64) error {
	return &device.OutOfMemoryError{Device: m.name, Requested: requested, Free: m.capacity - m.used, Total: m.capacity}
}

func (m *memory) malloc(size int64) (device.Ptr, error) {
	if size <= 0 {
		return 0, fmt.Errorf("cpu device: malloc of %d bytes", size)
	}
	cost := roundUp(size, pageSize)
	m.mu.Lock()
	if m.used+cost > m.capacity {
		err := m.oom(size)
		m.mu.Unlock()
		return 0, err
	}
	m.used += cost
	m.mu.Unlock()
	mem, err := unix.Mmap(-1, 0, int(cost), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		m.mu.Lock()
		m.used -= cost
		m.mu.Unlock()
		return 0, fmt.Errorf("cpu device: mmap %d bytes: %w", cost, err)
	}
	mp := &mapping{base: device.Ptr(uintptr(unsafe.Pointer(&mem[0]))), mem: mem}
	mp.ptr = mp.base
	m.insert(mp)
	return mp.base, nil
}

// mapFile maps [off, off+size) of f read-only and shared (the page cache's
// own pages: no copy, and the same physical memory however many times the
// file is mapped), prefaulted as llama.cpp's mmap loading does. It is
// charged size rounded up to whole pages, as malloc(size) would be.
func (m *memory) mapFile(f *os.File, off, size int64) (device.Ptr, error) {
	if size <= 0 || off < 0 {
		return 0, fmt.Errorf("cpu device: map %d bytes at offset %d of %s", size, off, f.Name())
	}
	cost := roundUp(size, pageSize)
	m.mu.Lock()
	if m.used+cost > m.capacity {
		err := m.oom(size)
		m.mu.Unlock()
		return 0, err
	}
	m.used += cost
	m.mu.Unlock()
	start := off / pageSize * pageSize
	mem, err := unix.Mmap(int(f.Fd()), start, int(off-start+size), unix.PROT_READ, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		m.mu.Lock()
		m.used -= cost
		m.mu.Unlock()
		return 0, fmt.Errorf("cpu device: map %d bytes at offset %d of %s: %w", size, off, f.Name(), err)
	}
	base := device.Ptr(uintptr(unsafe.Pointer(&mem[0])))
	mp := &mapping{base: base, mem: mem, ptr: base + device.Ptr(off-start), file: true, cost: cost}
	m.insert(mp)
	return mp.ptr, nil
}

func (m *memory) insert(mp *mapping) {
	m.mu.Lock()
	defer m.mu.Unlock()
	i := sort.Search(len(m.table), func(i int) bool { return m.table[i].base > mp.base })
	m.table = append(m.table, nil)
	copy(m.table[i+1:], m.table[i:])
	m.table[i] = mp
}

// remove takes the mapping handed out as p out of the table.
func (m *memory) remove(p device.Ptr, reserved bool) (*mapping, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	i := sort.Search(len(m.table), func(i int) bool { return m.table[i].base > p }) - 1
	if i < 0 || m.table[i].ptr != p || m.table[i].reserved != reserved {
		return nil, fmt.Errorf("cpu device: free of %#x, which is not the start of a live allocation", uintptr(p))
	}
	mp := m.table[i]
	m.table = append(m.table[:i], m.table[i+1:]...)
	m.used -= mp.backedBytes()
	return mp, nil
}

func (mp *mapping) backedBytes() int64 {
	if mp.file {
		return mp.cost
	}
	if !mp.reserved {
		return int64(len(mp.mem))
	}
	var n int64
	for _, ok := range mp.mapped {
		if ok {
			n += granularity
		}
	}
	return n
}

func (m *memory) free(p device.Ptr) error {
	mp, err := m.remove(p, false)
	if err != nil {
		return err
	}
	return unix.Munmap(mp.mem)
}

// bytes resolves [p, p+n) to a host view, checking that it lies inside one
// live mapping (and, for reservations, inside mapped granules).
func (m *memory) bytes(p device.Ptr, n int64) ([]byte, error) { return m.view(p, n, false) }

// writable is bytes for a range the caller will write: file mappings are
// read-only.
func (m *memory) writable(p device.Ptr, n int64) ([]byte, error) { return m.view(p, n, true) }

func (m *memory) view(p device.Ptr, n int64, write bool) ([]byte, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	i := sort.Search(len(m.table), func(i int) bool { return m.table[i].base > p }) - 1
	if i < 0 || n < 0 || p < m.table[i].ptr {
		return nil, fmt.Errorf("cpu device: address %#x is not device memory", uintptr(p))
	}
	mp := m.table[i]
	if write && mp.file {
		return nil, fmt.Errorf("cpu device: range %#x+%d is a read-only file mapping", uintptr(p), n)
	}
	off := int64(p - mp.base)
	if off+n > int64(len(mp.mem)) {
		return nil, fmt.Errorf("cpu device: range %#x+%d runs past its allocation of %d bytes", uintptr(p), n, len(mp.mem))
	}
	if mp.reserved && n > 0 {
		for g := off / granularity; g <= (off+n-1)/granularity; g++ {
			if !mp.mapped[g] {
				return nil, fmt.Errorf("cpu device: range %#x+%d touches unmapped reserved memory at offset %d", uintptr(p), n, g*granularity)
			}
		}
	}
	return mp.mem[off : off+n : off+n], nil
}

func (m *memory) reserve(size int64) (device.Ptr, error) {
	if size <= 0 {
		return 0, fmt.Errorf("cpu device: reserve of %d bytes", size)
	}
	size = roundUp(size, granularity)
	mem, err := unix.Mmap(-1, 0, int(size), unix.PROT_NONE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_NORESERVE)
	if err != nil {
		return 0, fmt.Errorf("cpu device: reserve %d bytes of address space: %w", size, err)
	}
	base := device.Ptr(uintptr(unsafe.Pointer(&mem[0])))
	mp := &mapping{base: base, ptr: base, mem: mem, reserved: true, mapped: make([]bool, size/granularity)}
	m.insert(mp)
	return mp.base, nil
}

func (m *memory) mapRange(base device.Ptr, offset, size int64) error {
	if offset%granularity != 0 || size%granularity != 0 || size <= 0 {
		return fmt.Errorf("cpu device: map offset %d size %d: both must be positive multiples of the %d-byte granularity", offset, size, granularity)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	i := sort.Search(len(m.table), func(i int) bool { return m.table[i].base >= base })
	if i == len(m.table) || m.table[i].base != base || !m.table[i].reserved {
		return fmt.Errorf("cpu device: map into %#x, which is not a reservation", uintptr(base))
	}
	mp := m.table[i]
	if offset+size > int64(len(mp.mem)) {
		return fmt.Errorf("cpu device: map [%d, %d) past the reservation's %d bytes", offset, offset+size, len(mp.mem))
	}
	var cost int64
	for g := offset / granularity; g < (offset+size)/granularity; g++ {
		if !mp.mapped[g] {
			cost += granularity
		}
	}
	if m.used+cost > m.capacity {
		return m.oom(cost)
	}
	if err := unix.Mprotect(mp.mem[offset:offset+size], unix.PROT_READ|unix.PROT_WRITE); err != nil {
		return fmt.Errorf("cpu device: map: %w", err)
	}
	for g := offset / granularity; g < (offset+size)/granularity; g++ {
		mp.mapped[g] = true
	}
	m.used += cost
	return nil
}

func (m *memory) release(base device.Ptr) error {
	mp, err := m.remove(base, true)
	if err != nil {
		return err
	}
	return unix.Munmap(mp.mem)
}

func (m *memory) closeAll() error {
	m.mu.Lock()
	table := m.table
	m.table = nil
	m.used = 0
	m.mu.Unlock()
	var first error
	for _, mp := range table {
		if err := unix.Munmap(mp.mem); err != nil && first == nil {
			first = err
		}
	}
	return first
}
