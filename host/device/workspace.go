package device

// CublasWorkspaceBytes is the fixed cuBLAS workspace a GPU device allocates
// when it opens, so that GEMMs never allocate and can be captured into
// graphs: 32 MiB from compute capability 9 (Hopper) on, 4 MiB before, as
// cuBLAS sizes its own default workspace. The CUDA device allocates exactly
// this; `kvhost plan` counts it for a described GPU.
func CublasWorkspaceBytes(computeMajor int) int64 {
	if computeMajor >= 9 {
		return 32 << 20
	}
	return 4 << 20
}
