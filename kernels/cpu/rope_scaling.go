package cpu

import (
	"fmt"
	"math"
)

// RopeScaling describes context-extension scaling of the rotary frequencies.
// Type is one of:
//
//   - "" or "none": no scaling.
//   - "linear": freq/Factor (Gemma 3's global layers).
//   - "llama3": Meta's piecewise rule, using Factor, LowFreqFactor,
//     HighFreqFactor and OriginalMaxPos.
//   - "yarn": transformers' _compute_yarn_parameters (gpt-oss, Qwen with
//     YaRN, DeepSeek-V3 configs loaded by transformers): the frequencies
//     below the beta_slow correction dimension are interpolated (divided by
//     Factor), those above beta_fast kept, a linear ramp between; the
//     attention factor (cos and sin multiplier) is AttnFactor when set, else
//     mscale(Factor, Mscale)/mscale(Factor, MscaleAllDim) when both are set,
//     else mscale(Factor, 1).
//   - "deepseek_yarn": the same frequencies with DeepSeek's own attention
//     factor, mscale(Factor, Mscale)/mscale(Factor, MscaleAllDim) with
//     Mscale defaulting to 1 and MscaleAllDim to 0 (DeepseekV2/V3
//     YarnRotaryEmbedding in the models' remote code; vLLM's
//     "deepseek_yarn"). The two differ only when mscale is set without
//     mscale_all_dim.
//
// where mscale(s, m) = 0.1·m·ln(s) + 1 for s > 1, else 1. The YaRN
// correction range is [floor(lo), ceil(hi)] clamped to [0, rotDim-1] unless
// NoTruncate (HF rope_scaling "truncate": false, as gpt-oss sets), with
// lo/hi = rotDim·ln(OriginalMaxPos/(β·2π))/(2·ln θ) at β = BetaFast/BetaSlow
// (0 means HF's defaults, 32 and 1).
//
// FreqFactors, when set, holds one divisor per frequency (rotDim/2 values)
// applied after Type's rule: llama.cpp bakes Llama-3.1's scaling into such a
// table (the GGUF tensor rope_freqs.weight) instead of writing the rule's
// parameters, and ggml's rope divides by it the same way.
type RopeScaling struct {
	Type                                  string
	Factor, LowFreqFactor, HighFreqFactor float64
	OriginalMaxPos                        int
	FreqFactors                           []float64

	BetaFast, BetaSlow   float64
	Mscale, MscaleAllDim float64
	AttnFactor           float64
	NoTruncate           bool
}

// yarnMscale is YaRN's magnitude correction 0.1·m·ln(s) + 1 (1 for s <= 1):
// transformers' get_mscale and DeepSeek's yarn_get_mscale.
func yarnMscale(s, m float64) float64 {
	if s <= 1 {
		return 1
	}
	return 0.1*m*math.Log(s) + 1
}

// YarnSoftmaxScale is the factor DeepSeek-V2/V3 multiply their softmax scale
// (qk_head_dim^-0.5) by: mscale(Factor, MscaleAllDim)² when s is a YaRN
// scaling with MscaleAllDim set, else 1 (gpt-oss and every other rule leave
// the scale alone). The attention call's Scale is then
// YarnSoftmaxScale/sqrt(qk_nope_head_dim+qk_rope_head_dim).
func YarnSoftmaxScale(s RopeScaling) float64 {
	if (s.Type != "yarn" && s.Type != "deepseek_yarn") || !(s.MscaleAllDim > 0) {
		return 1
	}
	m := yarnMscale(s.Factor, s.MscaleAllDim)
	return m * m
}

// apply scales the base frequencies inv (rotDim/2 of them, for base theta)
// in place and returns the cos/sin multiplier.
func (s RopeScaling) apply(inv []float64, theta float64, rotDim int) (float64, error) {
	attn := 1.0
	switch s.Type {
	case "", "none":
	case "linear":
		if !(s.Factor > 0) {
			return 0, fmt.Errorf("cpu: linear rope scaling factor %v must be positive", s.Factor)
		}
		for i := range inv {
			inv[i] /= s.Factor
		}
	case "llama3":
		if !(s.Factor > 0) || !(s.LowFreqFactor > 0) || !(s.HighFreqFactor > s.LowFreqFactor) || s.OriginalMaxPos <= 0 {
			return 0, fmt.Errorf("cpu: llama3 rope scaling needs factor > 0, 0 < low_freq_factor < high_freq_factor, original max positions > 0; got %v, %v, %v, %d",
				s.Factor, s.LowFreqFactor, s.HighFreqFactor, s.OriginalMaxPos)
		}
		orig := float64(s.OriginalMaxPos)
		lowWavelen := orig / s.LowFreqFactor
		highWavelen := orig / s.HighFreqFactor
		for i, f := range inv {
			wavelen := 2 * math.Pi / f
			switch {
			case wavelen < highWavelen:
			case wavelen > lowWavelen:
				inv[i] = f / s.Factor
			default:
				smooth := (orig/wavelen - s.LowFreqFactor) / (s.HighFreqFactor - s.LowFreqFactor)
				inv[i] = (1-smooth)*f/s.Factor + smooth*f
			}
		}
	case "yarn", "deepseek_yarn":
		var err error
		if attn, err = s.yarn(inv, theta, rotDim); err != nil {
			return 0, err
		}
	default:
		return 0, fmt.Errorf("cpu: unknown rope scaling type %q (want \"\", \"none\", \"linear\", \"llama3\", \"yarn\" or \"deepseek_yarn\")", s.Type)
	}
	if s.FreqFactors != nil {
		if len(s.FreqFactors) != len(inv) {
			return 0, fmt.Errorf("cpu: rope has %d frequency factors for %d frequencies (rotary dim %d): %w", len(s.FreqFactors), len(inv), rotDim, ErrShape)
		}
		for i, ff := range s.FreqFactors {
			if !(ff > 0) || math.IsInf(ff, 0) {
				return 0, fmt.Errorf("cpu: rope frequency factor %d is %v; factors must be positive and finite", i, ff)
			}
			inv[i] /= ff
		}
	}
	return attn, nil
}

// yarn applies the YaRN ramp to inv and returns the attention factor.
func (s RopeScaling) yarn(inv []float64, theta float64, rotDim int) (float64, error) {
	fast, slow := s.BetaFast, s.BetaSlow
	if fast == 0 {
		fast = 32
	}
	if slow == 0 {
		slow = 1
	}
	switch {
	case !(s.Factor > 0) || math.IsInf(s.Factor, 0):
		return 0, fmt.Errorf("cpu: %s rope scaling factor %v must be positive and finite", s.Type, s.Factor)
	case s.OriginalMaxPos <= 0:
		return 0, fmt.Errorf("cpu: %s rope scaling needs original_max_position_embeddings > 0, got %d", s.Type, s.OriginalMaxPos)
	case !(fast > 0) || !(slow > 0) || math.IsInf(fast, 0) || math.IsInf(slow, 0):
		return 0, fmt.Errorf("cpu: %s rope scaling beta_fast %v and beta_slow %v must be positive and finite", s.Type, s.BetaFast, s.BetaSlow)
	case s.Mscale < 0 || s.MscaleAllDim < 0 || s.AttnFactor < 0 || math.IsNaN(s.Mscale+s.MscaleAllDim+s.AttnFactor):
		return 0, fmt.Errorf("cpu: %s rope scaling mscale %v, mscale_all_dim %v, attention_factor %v must not be negative", s.Type, s.Mscale, s.MscaleAllDim, s.AttnFactor)
	}
	dim := float64(rotDim)
	corr := func(beta float64) float64 {
		return dim * math.Log(float64(s.OriginalMaxPos)/(beta*2*math.Pi)) / (2 * math.Log(theta))
	}
	lo, hi := corr(fast), corr(slow)
	if !s.NoTruncate {
		lo, hi = math.Floor(lo), math.Ceil(hi)
	}
	lo, hi = math.Max(lo, 0), math.Min(hi, dim-1)
	if lo == hi {
		hi += 0.001 // transformers' guard against a zero-width ramp
	}
	for i, f := range inv {
		ramp := math.Min(math.Max((float64(i)-lo)/(hi-lo), 0), 1)
		inv[i] = f/s.Factor*ramp + f*(1-ramp)
	}
	switch {
	case s.AttnFactor > 0:
		return s.AttnFactor, nil
	case s.Type == "deepseek_yarn":
		m := s.Mscale
		if m == 0 {
			m = 1
		}
		return yarnMscale(s.Factor, m) / yarnMscale(s.Factor, s.MscaleAllDim), nil
	case s.Mscale > 0 && s.MscaleAllDim > 0:
		return yarnMscale(s.Factor, s.Mscale) / yarnMscale(s.Factor, s.MscaleAllDim), nil
	}
	return yarnMscale(s.Factor, 1), nil
}
