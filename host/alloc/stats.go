package alloc

import "github.com/kvhost/kvhost/host/device"

// Stats are the allocator's counters (bytes unless named otherwise).
type Stats struct {
	Allocated     int64 `json:"allocated_bytes"` // Σ allocated block sizes
	Requested     int64 `json:"requested_bytes"` // Σ sizes callers asked for
	Reserved      int64 `json:"reserved_bytes"`  // Σ segment sizes
	PeakAllocated int64 `json:"peak_allocated_bytes"`
	PeakReserved  int64 `json:"peak_reserved_bytes"`
	// PeakRequest is the largest single request since the last ResetPeak
	// (what a fragmentation allowance of one more segment is sized by).
	PeakRequest     int64 `json:"peak_request_bytes"`
	Segments        int   `json:"segments"`
	NumAllocs       int64 `json:"num_allocs"`
	NumFrees        int64 `json:"num_frees"`
	NumAllocRetries int64 `json:"num_alloc_retries"`
	NumOOMs         int64 `json:"num_ooms"`
	// ByCategory is allocated bytes per Category.
	ByCategory [numCategories]int64 `json:"-"`
}

// Active is the bytes in use (one stream, so active equals allocated).
func (s Stats) Active() int64 { return s.Allocated }

// Stats returns a copy of the counters.
func (a *Allocator) Stats() Stats {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.statsLocked()
}

func (a *Allocator) statsLocked() Stats { return a.st }

// ResetPeak sets the peaks to the current values, starting a new window.
func (a *Allocator) ResetPeak() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.st.PeakAllocated = a.st.Allocated
	a.st.PeakReserved = a.st.Reserved
	a.st.PeakRequest = 0
}

// BlockInfo describes one block in a snapshot.
type BlockInfo struct {
	Address   uintptr `json:"address"`
	Size      int64   `json:"size"`
	Requested int64   `json:"requested_size"`
	State     string  `json:"state"` // "active_allocated" or "inactive"
	Category  string  `json:"category,omitempty"`
}

// SegmentInfo describes one segment, in the shape of PyTorch's
// torch.cuda.memory._snapshot so its viewers can read it.
type SegmentInfo struct {
	Address       uintptr     `json:"address"`
	TotalSize     int64       `json:"total_size"`
	AllocatedSize int64       `json:"allocated_size"`
	RequestedSize int64       `json:"requested_size"`
	SegmentType   string      `json:"segment_type"` // "small" or "large"
	Pool          string      `json:"segment_pool_id"`
	Blocks        []BlockInfo `json:"blocks"`
}

// Snapshot is the allocator's state for debugging and /v1/memory.
type Snapshot struct {
	Allocator string        `json:"allocator"`
	Stats     Stats         `json:"stats"`
	Segments  []SegmentInfo `json:"segments"`
}

// Snapshot captures every segment and block.
func (a *Allocator) Snapshot() Snapshot {
	a.mu.Lock()
	defer a.mu.Unlock()
	s := Snapshot{Allocator: a.name, Stats: a.st}
	for _, bp := range a.pools {
		for _, seg := range bp.segments {
			si := SegmentInfo{Address: uintptr(seg.ptr), TotalSize: seg.size, SegmentType: "large", Pool: bp.name}
			if seg.small {
				si.SegmentType = "small"
			}
			for b := seg.head; b != nil; b = b.next {
				bi := BlockInfo{Address: uintptr(b.ptr), Size: b.size, Requested: b.requested, State: "inactive"}
				if b.allocated {
					bi.State = "active_allocated"
					bi.Category = b.cat.String()
					si.AllocatedSize += b.size
					si.RequestedSize += b.requested
				}
				si.Blocks = append(si.Blocks, bi)
			}
			s.Segments = append(s.Segments, si)
		}
	}
	sortSegments(s.Segments)
	return s
}

func sortSegments(segs []SegmentInfo) {
	for i := 1; i < len(segs); i++ {
		for j := i; j > 0 && segs[j].Address < segs[j-1].Address; j-- {
			segs[j], segs[j-1] = segs[j-1], segs[j]
		}
	}
}

// PoolReserved returns the bytes of segments held by one pool.
func (a *Allocator) PoolReserved(id PoolID) int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	var n int64
	if bp, ok := a.pools[id]; ok {
		for _, seg := range bp.segments {
			n += seg.size
		}
	}
	return n
}

// check verifies the structural invariants; tests call it after every step.
func (a *Allocator) check() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	var reserved, allocated int64
	for _, bp := range a.pools {
		for _, seg := range bp.segments {
			reserved += seg.size
			next := seg.ptr
			for b := seg.head; b != nil; b = b.next {
				if b.ptr != next {
					return errf("segment %#x: block at %#x, expected %#x", seg.ptr, b.ptr, next)
				}
				if b.next != nil && b.next.prev != b {
					return errf("segment %#x: broken back link", seg.ptr)
				}
				if b.next != nil && !b.allocated && !b.next.allocated {
					return errf("segment %#x: two adjacent free blocks were not merged", seg.ptr)
				}
				if b.allocated {
					allocated += b.size
				}
				next = b.ptr + device.Ptr(b.size)
			}
			if next != seg.ptr+device.Ptr(seg.size) {
				return errf("segment %#x: blocks end at %#x, segment at %#x", seg.ptr, next, seg.ptr+device.Ptr(seg.size))
			}
		}
	}
	if reserved != a.st.Reserved || allocated != a.st.Allocated {
		return errf("counters reserved %d allocated %d, structure %d %d", a.st.Reserved, a.st.Allocated, reserved, allocated)
	}
	return nil
}
