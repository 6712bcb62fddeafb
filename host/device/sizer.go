package device

// Sizer is the part of a kernel set that says how much scratch its callers
// must hand it: what a device's kernels answer (Kernels.AttentionScratch,
// Mamba.MambaScanScratch) without running anything. A dry-run device
// (host/device/dry) answers with the Sizer of the device it stands for, so
// a plan's dry run of the forward allocates exactly what serve's does.
type Sizer interface {
	AttentionScratch(s AttnShape) int
	MambaScanScratch(s Mamba2, tokens, seqs int) int
}
