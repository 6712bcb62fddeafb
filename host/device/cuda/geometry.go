package cuda

import "fmt"

// Dims is a launch geometry: grid and block sizes and dynamic shared memory.
type Dims struct {
	Grid   [3]int
	Block  [3]int
	Shared int
}

// Constants shared with kernels/cuda/*.cu; changing one side means changing
// the other.
const (
	elemThreads    = 256
	elemMaxBlocks  = 65535
	rowThreads     = 256
	matvecRows     = 8 // MV_ROWS in matvec.cu, MQ_ROWS in matvec_q.cu
	matvecThreads  = 256
	attnThreads    = 128 // ATTN_THREADS in attention.cu
	attnChunk      = 128 // ATTN_CHUNK
	attnMaxHeadDim = 576 // ATTN_MAX_HEAD_DIM
	attnMaxVDim    = 512 // ATTN_MAX_V_DIM
	maxGridY       = 65535
)

// elementwise covers n elements with grid-stride blocks of elemThreads.
func elementwise(n int) Dims {
	b := (n + elemThreads - 1) / elemThreads
	b = max(1, min(b, elemMaxBlocks))
	return Dims{Grid: [3]int{b, 1, 1}, Block: [3]int{elemThreads, 1, 1}}
}

// perRow launches one block per row; threads stride over the row.
func perRow(rows, width int) Dims {
	t := rowThreads
	if width < t {
		t = max(32, (width+31)/32*32)
	}
	return Dims{Grid: [3]int{rows, 1, 1}, Block: [3]int{t, 1, 1}}
}

// matvecDims: one warp per output feature, matvecThreads/32 features per
// block, grid.y over groups of matvecRows input rows.
func matvecDims(m, n int) (Dims, error) {
	perBlock := matvecThreads / 32
	gy := (m + matvecRows - 1) / matvecRows
	if gy > maxGridY {
		return Dims{}, fmt.Errorf("cuda: matvec of %d rows exceeds the grid (at most %d)", m, maxGridY*matvecRows)
	}
	return Dims{Grid: [3]int{(n + perBlock - 1) / perBlock, gy, 1}, Block: [3]int{matvecThreads, 1, 1}}, nil
}

// attentionDims: one block per (query row, head); shared memory holds the
// query (headDim floats) and one chunk of scores; each thread accumulates
// vHeadDim/attnThreads output elements.
func attentionDims(n, heads, headDim, vHeadDim int) (Dims, error) {
	if headDim <= 0 || headDim > attnMaxHeadDim {
		return Dims{}, fmt.Errorf("cuda: attention head dim %d outside (0, %d]", headDim, attnMaxHeadDim)
	}
	if vHeadDim <= 0 || vHeadDim > attnMaxVDim {
		return Dims{}, fmt.Errorf("cuda: attention value head dim %d outside (0, %d]", vHeadDim, attnMaxVDim)
	}
	if heads > maxGridY {
		return Dims{}, fmt.Errorf("cuda: attention over %d heads exceeds the grid", heads)
	}
	return Dims{Grid: [3]int{n, heads, 1}, Block: [3]int{attnThreads, 1, 1}, Shared: 4 * (headDim + attnChunk)}, nil
}

// metaLen is the number of int32 staged for a (start, page table) pair: the
// start, then the table padded to a power of two of at least 63 pages, so a
// decode step keeps the same staged size — and a captured graph stays valid —
// while its sequence grows by dozens of pages.
func metaLen(pages int) int {
	c := 64
	for c < pages+1 {
		c *= 2
	}
	return c
}
