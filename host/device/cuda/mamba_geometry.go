package cuda

import "fmt"

// Mamba-2 launch geometry (kernels/cuda/mamba.cu); the constants mirror the
// .cu's defines.
const (
	mambaMaxK      = 8    // MAMBA_MAXK
	scanMaxS       = 32   // SCAN_MAXS
	convThreads    = 128  // threads per block of mamba_conv
	maxBlock       = 1024 // threads per block, every NVIDIA GPU since sm_20
	scanSharedMax  = 48 << 10
	scanMaxChunk   = 64
	normMaxThreads = 256
)

// mambaConvDims: one thread per channel, grid.y over sequences.
func mambaConvDims(channels, seqs int) (Dims, error) {
	if seqs > maxGridY {
		return Dims{}, fmt.Errorf("cuda: mamba conv over %d sequences exceeds the grid (at most %d)", seqs, maxGridY)
	}
	return Dims{Grid: [3]int{(channels + convThreads - 1) / convThreads, seqs, 1}, Block: [3]int{convThreads, 1, 1}}, nil
}

// mambaUpdateDims: one block per (head, sequence), a thread per head
// column, B and C of the head's group in shared memory.
func mambaUpdateDims(heads, headDim, state, seqs int) (Dims, error) {
	if headDim > maxBlock {
		return Dims{}, fmt.Errorf("cuda: mamba update head dim %d exceeds %d threads", headDim, maxBlock)
	}
	if heads > maxGridY || seqs > maxGridY {
		return Dims{}, fmt.Errorf("cuda: mamba update of %d heads × %d sequences exceeds the grid", heads, seqs)
	}
	t := (headDim + 31) / 32 * 32
	return Dims{Grid: [3]int{heads, seqs, 1}, Block: [3]int{t, 1, 1}, Shared: 4 * 2 * state}, nil
}

// mambaScanDims: one block per (head, sequence) of headDim·r threads, each
// keeping at most scanMaxS state rows in registers (r = ceil(state /
// scanMaxS)); q tokens are staged per chunk, as many as fit the static
// shared-memory limit beside the r·headDim partial sums.
func mambaScanDims(heads, headDim, state, seqs int) (d Dims, r, q int, err error) {
	r = (state + scanMaxS - 1) / scanMaxS
	if headDim*r > maxBlock {
		return Dims{}, 0, 0, fmt.Errorf("cuda: mamba scan of head dim %d and state %d needs %d threads per block, at most %d", headDim, state, headDim*r, maxBlock)
	}
	if heads > maxGridY || seqs > maxGridY {
		return Dims{}, 0, 0, fmt.Errorf("cuda: mamba scan of %d heads × %d sequences exceeds the grid", heads, seqs)
	}
	per := 2*state + headDim + 1 // floats per staged token
	q = min(scanMaxChunk, (scanSharedMax/4-r*headDim)/per)
	if q < 1 {
		return Dims{}, 0, 0, fmt.Errorf("cuda: mamba scan of head dim %d and state %d: one token does not fit %d bytes of shared memory", headDim, state, scanSharedMax)
	}
	shared := 4 * (q*per + r*headDim)
	return Dims{Grid: [3]int{heads, seqs, 1}, Block: [3]int{headDim * r, 1, 1}, Shared: shared}, r, q, nil
}

// gatedNormDims: one block per (group, row).
func gatedNormDims(rows, dim, group int) (Dims, error) {
	if group < 1 || dim%group != 0 {
		return Dims{}, fmt.Errorf("cuda: gated norm of %d values in groups of %d", dim, group)
	}
	if rows > maxGridY {
		return Dims{}, fmt.Errorf("cuda: gated norm of %d rows exceeds the grid (at most %d)", rows, maxGridY)
	}
	t := min(normMaxThreads, max(32, (group+31)/32*32))
	return Dims{Grid: [3]int{dim / group, rows, 1}, Block: [3]int{t, 1, 1}}, nil
}
