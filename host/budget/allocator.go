package budget

// PyTorch caching allocator constants (§6, c10/cuda/CUDACachingAllocator.cpp).
const (
	allocMinBlock    = 512      // kMinBlockSize
	allocSmallSize   = 1 << 20  // kSmallSize: ≤ 1 MiB → small pool
	allocSmallBuffer = 2 << 20  // kSmallBuffer: small-pool segment
	allocLargeBuffer = 20 << 20 // kLargeBuffer: segment for 1–10 MiB
	allocMinLarge    = 10 << 20 // kMinLargeAlloc
	allocRoundLarge  = 2 << 20  // kRoundLarge
)

// AllocatorBlock is what one fresh allocation of size bytes costs in the
// PyTorch caching allocator (§6), without roundup_power2_divisions or
// max_split_size and with no cached block to reuse: the size rounds up to
// a 512 B multiple (minimum 512); the segment is 2 MiB for the small pool
// (≤ 1 MiB), 20 MiB for 1–10 MiB and the size rounded up to 2 MiB from
// 10 MiB. The segment is split when the remainder is ≥ 512 B (small pool)
// or > 1 MiB (large pool); an unsplit block is charged whole, so block is
// what memory_allocated grows by. size <= 0 allocates nothing. V12:
// 131 334 144 → block 132 120 576, segment 132 120 576, no split.
func AllocatorBlock(size int64) (block, segment int64, split bool) {
	if size <= 0 {
		return 0, 0, false
	}
	rounded := alignUp(max(size, allocMinBlock), allocMinBlock)
	small := rounded <= allocSmallSize
	switch {
	case small:
		segment = allocSmallBuffer
	case rounded < allocMinLarge:
		segment = allocLargeBuffer
	default:
		segment = alignUp(rounded, allocRoundLarge)
	}
	remaining := segment - rounded
	if small {
		split = remaining >= allocMinBlock
	} else {
		split = remaining > allocSmallSize
	}
	if split {
		return rounded, segment, true
	}
	return segment, segment, false
}
