package device

import (
	"errors"
	"fmt"
	"os"
	"sort"
	"sync"
)

// Ptr is a device address. Zero is never a valid allocation.
type Ptr uintptr

// Info describes a device for logs, the ledger and /v1/memory.
type Info struct {
	Name  string `json:"name"`
	Kind  string `json:"kind"` // "cpu", "cuda"
	Total int64  `json:"total_bytes"`
	// Threads is the number of worker threads the kernels use (CPU device).
	Threads int `json:"threads,omitempty"`
}

// Device is a memory-owning compute device.
type Device interface {
	Info() Info
	// MemGetInfo returns free and total bytes, exactly as the driver sees them.
	MemGetInfo() (free, total int64)
	// Malloc allocates size bytes of device memory. On failure it returns an
	// error for which errors.Is(err, ErrOutOfMemory) holds and errors.As
	// yields an *OutOfMemoryError.
	Malloc(size int64) (Ptr, error)
	// Free releases memory returned by Malloc.
	Free(p Ptr) error
	// Bytes returns a bounds-checked host view of n bytes at p, for devices
	// whose memory the host can address (the CPU device); others return an
	// error.
	Bytes(p Ptr, n int64) ([]byte, error)
	// Kernels is the compute kernel set of this device.
	Kernels() Kernels
	// Close releases everything the device holds.
	Close() error
}

// VirtualMemory is the optional capability of reserving address space first
// and backing it with physical memory later, at Granularity steps. The KV pool
// uses it to grow into what is left after graph capture.
type VirtualMemory interface {
	Granularity() int64
	// Reserve reserves size bytes of address space; no memory is consumed.
	Reserve(size int64) (Ptr, error)
	// Map backs [base+offset, base+offset+size) of a reservation with
	// physical memory; offset and size must be multiples of Granularity.
	Map(base Ptr, offset, size int64) error
	// Release unmaps and releases a whole reservation.
	Release(base Ptr) error
}

// FileMapper is the optional capability of serving bytes of a file in
// place, without copying them into device memory: the CPU device maps the
// file's pages read-only, so weights stored in the form the kernels run are
// used straight from the page cache (what llama.cpp's mmap does). A mapping
// is charged against the device's capacity exactly as a Malloc of size bytes
// would be, so MemGetInfo, the ledger and the plan stay exact; Free releases
// it. The memory is read-only: Upload into it fails.
type FileMapper interface {
	MapFile(f *os.File, off, size int64) (Ptr, error)
}

// ErrOutOfMemory is the sentinel every out-of-memory error matches.
var ErrOutOfMemory = errors.New("device: out of memory")

// OutOfMemoryError reports an allocation the device could not satisfy.
type OutOfMemoryError struct {
	Device    string
	Requested int64
	Free      int64
	Total     int64
}

func (e *OutOfMemoryError) Error() string {
	return fmt.Sprintf("device %s: out of memory: requested %d bytes (%.2f MiB), %d bytes (%.2f MiB) free of %d",
		e.Device, e.Requested, float64(e.Requested)/(1<<20), e.Free, float64(e.Free)/(1<<20), e.Total)
}

// Is makes errors.Is(err, ErrOutOfMemory) true.
func (e *OutOfMemoryError) Is(target error) bool { return target == ErrOutOfMemory }

// Factory opens a device from options.
type Factory func(opts Options) (Device, error)

// Options configure a device at open time.
type Options struct {
	// MemoryBytes caps device memory (CPU device); 0 means the default.
	MemoryBytes int64
	// Threads for CPU kernels; 0 means all cores.
	Threads int
	// Index selects the GPU (CUDA device).
	Index int
}

var (
	mu        sync.RWMutex
	factories = map[string]Factory{}
)

// Register makes a device kind available by name. It panics on a duplicate,
// as database/sql does, because that is a programming error.
func Register(kind string, f Factory) {
	mu.Lock()
	defer mu.Unlock()
	if _, dup := factories[kind]; dup {
		panic("device: Register called twice for " + kind)
	}
	factories[kind] = f
}

// Open opens a registered device kind.
func Open(kind string, opts Options) (Device, error) {
	mu.RLock()
	f, ok := factories[kind]
	mu.RUnlock()
	if !ok {
		return nil, fmt.Errorf("device: unknown kind %q (available: %v)", kind, Kinds())
	}
	return f(opts)
}

// Kinds lists the registered device kinds.
func Kinds() []string {
	mu.RLock()
	defer mu.RUnlock()
	out := make([]string, 0, len(factories))
	for k := range factories {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
