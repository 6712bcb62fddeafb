package alloc

import (
	"errors"
	"fmt"
	"sort"
	"sync"

	"github.com/kvhost/kvhost/host/device"
)

// Size classes of spec §6.
const (
	MinBlock      = 512
	SmallSize     = 1 << 20  // requests ≤ this use the small pool
	SmallBuffer   = 2 << 20  // small-pool segment size
	LargeBuffer   = 20 << 20 // segment for large requests below MinLargeAlloc
	MinLargeAlloc = 10 << 20
	RoundLarge    = 2 << 20
)

// RoundSize is the block size a request of n bytes occupies.
func RoundSize(n int64) int64 {
	if n < MinBlock {
		return MinBlock
	}
	return (n + MinBlock - 1) / MinBlock * MinBlock
}

// SegmentSize is the segment a new request of block size n allocates.
func SegmentSize(n int64) int64 {
	switch {
	case n <= SmallSize:
		return SmallBuffer
	case n < MinLargeAlloc:
		return LargeBuffer
	default:
		return (n + RoundLarge - 1) / RoundLarge * RoundLarge
	}
}

// PoolID names a block pool; 0 is the general pool, others are private pools
// created for graph capture.
type PoolID int

// Driver is the part of a device the allocator needs.
type Driver interface {
	Malloc(size int64) (device.Ptr, error)
	Free(p device.Ptr) error
}

type segment struct {
	ptr   device.Ptr
	size  int64
	small bool
	pool  PoolID
	head  *block
}

type block struct {
	ptr        device.Ptr
	size       int64
	requested  int64
	allocated  bool
	cat        Category
	seg        *segment
	prev, next *block
}

// freeList keeps free blocks sorted by (size, address) for best fit.
type freeList []*block

func less(a, b *block) bool { return a.size < b.size || a.size == b.size && a.ptr < b.ptr }

func (f *freeList) insert(b *block) {
	i := sort.Search(len(*f), func(i int) bool { return !less((*f)[i], b) })
	*f = append(*f, nil)
	copy((*f)[i+1:], (*f)[i:])
	(*f)[i] = b
}

func (f *freeList) remove(b *block) {
	i := sort.Search(len(*f), func(i int) bool { return !less((*f)[i], b) })
	if i < len(*f) && (*f)[i] == b {
		*f = append((*f)[:i], (*f)[i+1:]...)
		return
	}
	panic("alloc: free list lost a block")
}

// bestFit returns the smallest free block of at least size.
func (f freeList) bestFit(size int64) *block {
	i := sort.Search(len(f), func(i int) bool { return f[i].size >= size })
	if i == len(f) {
		return nil
	}
	return f[i]
}

type blockPool struct {
	name         string
	small, large freeList
	segments     map[device.Ptr]*segment
}

// Allocator is a caching allocator over one device. It is safe for concurrent
// use.
type Allocator struct {
	name string
	drv  Driver

	mu       sync.Mutex
	pools    map[PoolID]*blockPool
	nextPool PoolID
	live     map[device.Ptr]*block
	st       Stats
	// capture routes Alloc to a private pool while a graph is captured.
	capture PoolID
	// spare holds block records merged away by Free, reused by split, so a
	// steady alloc/free pattern (a decode step) allocates nothing.
	spare []*block
}

// New returns an allocator named name (the ledger's allocator name) over drv.
func New(name string, drv Driver) *Allocator {
	a := &Allocator{name: name, drv: drv, pools: map[PoolID]*blockPool{}, live: map[device.Ptr]*block{}, nextPool: 1}
	a.pools[0] = &blockPool{name: "general", segments: map[device.Ptr]*segment{}}
	return a
}

// Name is the allocator's ledger name.
func (a *Allocator) Name() string { return a.name }

// NewPrivatePool creates a pool for graph capture.
func (a *Allocator) NewPrivatePool(name string) PoolID {
	a.mu.Lock()
	defer a.mu.Unlock()
	id := a.nextPool
	a.nextPool++
	a.pools[id] = &blockPool{name: name, segments: map[device.Ptr]*segment{}}
	return id
}

// OutOfMemoryError wraps the device's refusal with the allocator's state.
type OutOfMemoryError struct {
	Allocator string
	Requested int64
	Stats     Stats
	Err       error
}

func (e *OutOfMemoryError) Error() string {
	return fmt.Sprintf("alloc %s: cannot allocate %d bytes (allocated %d, reserved %d, cached %d): %v",
		e.Allocator, e.Requested, e.Stats.Allocated, e.Stats.Reserved, e.Stats.Reserved-e.Stats.Allocated, e.Err)
}

func (e *OutOfMemoryError) Unwrap() error { return e.Err }

// Alloc returns a block of at least size bytes from the general pool, or
// from the capture pool while one is set (BeginCapture).
func (a *Allocator) Alloc(size int64, cat Category) (device.Ptr, error) {
	a.mu.Lock()
	pool := a.capture
	a.mu.Unlock()
	return a.AllocIn(pool, size, cat)
}

// BeginCapture routes Alloc to private pool id until EndCapture, as
// PyTorch's allocator does during CUDA graph capture: blocks freed inside
// the capture are reused by later allocations of the same capture, and the
// pool keeps its segments (its high-water mark) after it.
func (a *Allocator) BeginCapture(id PoolID) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, ok := a.pools[id]; !ok || id == 0 {
		return fmt.Errorf("alloc %s: no private pool %d", a.name, id)
	}
	a.capture = id
	return nil
}

// EndCapture routes Alloc back to the general pool.
func (a *Allocator) EndCapture() {
	a.mu.Lock()
	a.capture = 0
	a.mu.Unlock()
}

// AllocIn allocates from a specific pool.
func (a *Allocator) AllocIn(pool PoolID, size int64, cat Category) (device.Ptr, error) {
	if size <= 0 {
		return 0, fmt.Errorf("alloc %s: allocation of %d bytes", a.name, size)
	}
	if cat >= numCategories {
		return 0, fmt.Errorf("alloc %s: unknown category %d", a.name, cat)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	bp, ok := a.pools[pool]
	if !ok {
		return 0, fmt.Errorf("alloc %s: no pool %d", a.name, pool)
	}
	bsize := RoundSize(size)
	small := bsize <= SmallSize
	list := &bp.large
	if small {
		list = &bp.small
	}
	b := list.bestFit(bsize)
	if b != nil {
		list.remove(b)
	} else {
		seg, err := a.newSegment(bp, pool, SegmentSize(bsize), small, size)
		if err != nil {
			return 0, err
		}
		b = seg.head
	}
	a.split(list, b, bsize, small)
	b.allocated = true
	b.requested = size
	b.cat = cat
	a.live[b.ptr] = b
	a.st.Allocated += b.size
	a.st.Requested += size
	a.st.ByCategory[cat] += b.size
	a.st.NumAllocs++
	if a.st.Allocated > a.st.PeakAllocated {
		a.st.PeakAllocated = a.st.Allocated
	}
	a.st.PeakRequest = max(a.st.PeakRequest, size)
	return b.ptr, nil
}

func (a *Allocator) newSegment(bp *blockPool, pool PoolID, segSize int64, small bool, requested int64) (*segment, error) {
	ptr, err := a.drv.Malloc(segSize)
	if err != nil && errors.Is(err, device.ErrOutOfMemory) {
		a.st.NumAllocRetries++
		a.emptyCacheLocked()
		ptr, err = a.drv.Malloc(segSize)
	}
	if err != nil {
		if errors.Is(err, device.ErrOutOfMemory) {
			a.st.NumOOMs++
			return nil, &OutOfMemoryError{Allocator: a.name, Requested: requested, Stats: a.statsLocked(), Err: err}
		}
		return nil, fmt.Errorf("alloc %s: new segment of %d bytes: %w", a.name, segSize, err)
	}
	seg := &segment{ptr: ptr, size: segSize, small: small, pool: pool}
	seg.head = &block{ptr: ptr, size: segSize, seg: seg}
	bp.segments[ptr] = seg
	a.st.Reserved += segSize
	a.st.Segments++
	if a.st.Reserved > a.st.PeakReserved {
		a.st.PeakReserved = a.st.Reserved
	}
	return seg, nil
}

// split carves size bytes off the front of b when the rest is worth keeping.
func (a *Allocator) split(list *freeList, b *block, size int64, small bool) {
	rest := b.size - size
	if small && rest < MinBlock || !small && rest <= SmallSize {
		return
	}
	r := a.newBlock()
	*r = block{ptr: b.ptr + device.Ptr(size), size: rest, seg: b.seg, prev: b, next: b.next}
	if b.next != nil {
		b.next.prev = r
	}
	b.next = r
	b.size = size
	list.insert(r)
}

// Free returns a block to its pool's cache, merging it with free neighbours.
func (a *Allocator) Free(p device.Ptr) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	b, ok := a.live[p]
	if !ok {
		return fmt.Errorf("alloc %s: free of %#x, which is not a live allocation", a.name, uintptr(p))
	}
	delete(a.live, p)
	a.st.Allocated -= b.size
	a.st.Requested -= b.requested
	a.st.ByCategory[b.cat] -= b.size
	a.st.NumFrees++
	b.allocated = false
	b.requested = 0
	bp := a.pools[b.seg.pool]
	list := &bp.large
	if b.seg.small {
		list = &bp.small
	}
	if n := b.next; n != nil && !n.allocated {
		list.remove(n)
		b.size += n.size
		b.next = n.next
		if n.next != nil {
			n.next.prev = b
		}
		a.recycle(n)
	}
	if pr := b.prev; pr != nil && !pr.allocated {
		list.remove(pr)
		pr.size += b.size
		pr.next = b.next
		if b.next != nil {
			b.next.prev = pr
		}
		a.recycle(b)
		b = pr
	}
	list.insert(b)
	return nil
}

// newBlock returns a spare block record, or a new one.
func (a *Allocator) newBlock() *block {
	if n := len(a.spare); n > 0 {
		b := a.spare[n-1]
		a.spare = a.spare[:n-1]
		return b
	}
	return &block{}
}

// recycle keeps a block record no list or segment refers to any more.
func (a *Allocator) recycle(b *block) {
	*b = block{}
	a.spare = append(a.spare, b)
}

// EmptyCache returns every fully free segment of the general pool to the
// device (private pools keep theirs until released).
func (a *Allocator) EmptyCache() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.emptyCacheLocked()
}

func (a *Allocator) emptyCacheLocked() error {
	return a.releaseFree(a.pools[0])
}

func (a *Allocator) releaseFree(bp *blockPool) error {
	var first error
	for ptr, seg := range bp.segments {
		h := seg.head
		if h.allocated || h.next != nil || h.size != seg.size {
			continue
		}
		if seg.small {
			bp.small.remove(h)
		} else {
			bp.large.remove(h)
		}
		delete(bp.segments, ptr)
		a.st.Reserved -= seg.size
		a.st.Segments--
		if err := a.drv.Free(ptr); err != nil && first == nil {
			first = fmt.Errorf("alloc %s: free segment: %w", a.name, err)
		}
	}
	return first
}

// ReleasePool frees a private pool. Every block in it must be free.
func (a *Allocator) ReleasePool(id PoolID) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	bp, ok := a.pools[id]
	if !ok || id == 0 {
		return fmt.Errorf("alloc %s: no private pool %d", a.name, id)
	}
	for _, seg := range bp.segments {
		for b := seg.head; b != nil; b = b.next {
			if b.allocated {
				return fmt.Errorf("alloc %s: pool %q still holds a live block of %d bytes", a.name, bp.name, b.size)
			}
		}
	}
	err := a.releaseFree(bp)
	delete(a.pools, id)
	return err
}
