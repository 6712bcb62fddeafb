package cpu

import (
	"github.com/kvhost/kvhost/host/device"
	kcpu "github.com/kvhost/kvhost/kernels/cpu"
)

// Sizer is the CPU device's scratch figures for Threads kernel workers,
// without opening a device: what `kvhost plan` sizes a dry run by.
type Sizer struct{ Threads int }

var (
	_ device.Sizer = Sizer{}
	_ device.Sizer = (*kernels)(nil)
)

// AttentionScratch is kernels.AttentionScratch's figure.
func (s Sizer) AttentionScratch(a device.AttnShape) int {
	return kcpu.AttentionScratch(s.Threads, a.HeadDim, a.VHeadDim)
}

// MambaScanScratch is kernels.MambaScanScratch's figure.
func (s Sizer) MambaScanScratch(m device.Mamba2, tokens, seqs int) int {
	return kcpu.MambaScanScratchThreads(max(1, s.Threads), m, tokens, seqs)
}
