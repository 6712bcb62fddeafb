package cuda

import "fmt"

// decodeGeometry is what the batched-decode kernels need to know to check
// a row's position and page table before they are staged: the KV cache's
// page size and slot count, the page-table stride the step was captured
// with, the model's context bound and the attention window (0: a row reads
// every position up to its own; w > 0: only the last w, so the pages
// before may have been released and are not checked).
type decodeGeometry struct {
	pageSize, slots, stride, maxLen, window int
}

// encode writes the batched-decode metadata into dst: positions[0..rows),
// then rows page tables of stride entries (zero-padded). It rejects what
// would make a kernel read or write outside the cache — a position outside
// [0, maxLen), a page table longer than the captured stride or too short for
// its position, a page outside the cache — since a graph launch re-encodes
// the bound host slices and an illegal address would kill the context.
func (g decodeGeometry) encode(dst, positions []int32, tables [][]int32) error {
	rows := len(positions)
	if len(tables) < rows {
		return fmt.Errorf("cuda: %d positions, %d page tables", rows, len(tables))
	}
	if g.pageSize <= 0 || g.stride <= 0 {
		return fmt.Errorf("cuda: decode page size %d and page-table stride %d must be positive", g.pageSize, g.stride)
	}
	if len(dst) != rows+rows*g.stride {
		return fmt.Errorf("cuda: decode metadata of %d ints, want %d", len(dst), rows+rows*g.stride)
	}
	for i, pos := range positions {
		if pos < 0 || int(pos) >= g.maxLen {
			return fmt.Errorf("cuda: decode row %d at position %d outside [0, %d)", i, pos, g.maxLen)
		}
		t := tables[i]
		if len(t) > g.stride {
			return fmt.Errorf("cuda: decode row %d has a page table of %d pages, captured with %d", i, len(t), g.stride)
		}
		need := int(pos)/g.pageSize + 1
		if need > len(t) {
			return fmt.Errorf("cuda: decode row %d at position %d needs %d pages, its table has %d", i, pos, need, len(t))
		}
		from := 0
		if g.window > 0 {
			from = max(0, int(pos)-g.window+1) / g.pageSize
		}
		for _, p := range t[from:need] {
			if p < 0 || (int(p)+1)*g.pageSize > g.slots {
				return fmt.Errorf("cuda: decode row %d: page %d outside the KV cache of %d slots", i, p, g.slots)
			}
		}
		dst[i] = pos
		row := dst[rows+i*g.stride : rows+(i+1)*g.stride]
		n := copy(row, t)
		clear(row[n:])
	}
	return nil
}
