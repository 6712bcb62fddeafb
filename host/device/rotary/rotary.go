// Package rotary turns a device.RopeSpec into the rotary table of
// kernels/cpu. It is the one place a spec's scaling fields (llama3 and YaRN
// scaling, rope_freqs divisors, the rotated span of a head) become
// frequencies and factors: the CPU device applies the table, the CUDA device
// uploads its inverse frequencies and factors, and gpu-check compares the
// CUDA kernel against it, so a new scaling field is wired once for all.
//
// It sits beside the devices rather than inside one, because a device
// package must not import another (the CUDA device used to import the CPU
// device for this), and below both: it imports only host/device (the spec)
// and kernels/cpu (the table), and kernels/cpu cannot take the spec itself
// without importing host/device.
package rotary

import (
	"github.com/kvhost/kvhost/host/device"
	kcpu "github.com/kvhost/kvhost/kernels/cpu"
)

// Table builds the host-side rotary table for s.
func Table(s device.RopeSpec) (*kcpu.Rope, error) {
	style := kcpu.RopeNormal
	if s.Neox {
		style = kcpu.RopeNeox
	}
	r, err := kcpu.NewRope(s.HeadDim, s.RotDim, s.Theta, scaling(s), style)
	if err != nil || s.RotOffset == 0 {
		return r, err
	}
	return r.WithOffset(s.RotOffset)
}

// SoftmaxScale is the factor a model multiplies its attention scale
// (1/sqrt(qk head dim)) by for s: DeepSeek-V2/V3's YaRN correction
// mscale(factor, mscale_all_dim)², 1 for every other rotary embedding.
func SoftmaxScale(s device.RopeSpec) float64 { return kcpu.YarnSoftmaxScale(scaling(s)) }

func scaling(s device.RopeSpec) kcpu.RopeScaling {
	return kcpu.RopeScaling{
		Type: s.Scaling, Factor: s.Factor, LowFreqFactor: s.LowFreqFactor,
		HighFreqFactor: s.HighFreqFactor, OriginalMaxPos: s.OriginalMaxPos,
		FreqFactors: s.FreqFactors,
		BetaFast:    s.BetaFast, BetaSlow: s.BetaSlow,
		Mscale: s.Mscale, MscaleAllDim: s.MscaleAllDim,
		AttnFactor: s.AttnFactor, NoTruncate: s.NoTruncate,
	}
}
