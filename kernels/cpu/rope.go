package cpu

import (
	"fmt"
	"math"
)

// RopeStyle selects which dimensions of a head rotate together.
type RopeStyle uint8

const (
	// RopeNormal rotates adjacent pairs (x[2i], x[2i+1]): GGUF llama.
	RopeNormal RopeStyle = iota
	// RopeNeox rotates (x[i], x[i+rotDim/2]): HF rotate_half, GGUF qwen2/qwen3.
	RopeNeox
)

// RopeScaling describes context-extension scaling of the rotary frequencies.
// Type is "" or "none" (no scaling), "linear" (freq/Factor) or "llama3"
// (Meta's piecewise rule, using Factor, LowFreqFactor, HighFreqFactor and
// OriginalMaxPos). FreqFactors, when set, holds one divisor per frequency
// (rotDim/2 values) applied after Type's rule: llama.cpp bakes Llama-3.1's
// scaling into such a table (the GGUF tensor rope_freqs.weight) instead of
// writing the rule's parameters, and ggml's rope divides by it the same way.
type RopeScaling struct {
	Type                                  string
	Factor, LowFreqFactor, HighFreqFactor float64
	OriginalMaxPos                        int
	FreqFactors                           []float64
}

// Rope applies rotary position embeddings. It is immutable after NewRope and
// safe for concurrent use.
type Rope struct {
	headDim, rotDim int
	style           RopeStyle
	invFreq         []float64 // rotDim/2 angular frequencies (radians per position)
}

// NewRope precomputes inverse frequencies theta^(-2i/rotDim) in float64 and
// applies the scaling. Only the first rotDim dims of each head rotate.
func NewRope(headDim, rotDim int, theta float64, s RopeScaling, style RopeStyle) (*Rope, error) {
	if headDim <= 0 || rotDim <= 0 || rotDim > headDim || rotDim%2 != 0 {
		return nil, fmt.Errorf("cpu: rope head dim %d, rotary dim %d: rotary dim must be even and in (0, head dim]: %w", headDim, rotDim, ErrShape)
	}
	if !(theta > 0) {
		return nil, fmt.Errorf("cpu: rope theta %v must be positive", theta)
	}
	if style != RopeNormal && style != RopeNeox {
		return nil, fmt.Errorf("cpu: unknown rope style %d", style)
	}
	inv := make([]float64, rotDim/2)
	for i := range inv {
		inv[i] = math.Pow(theta, -float64(2*i)/float64(rotDim))
	}
	switch s.Type {
	case "", "none":
	case "linear":
		if !(s.Factor > 0) {
			return nil, fmt.Errorf("cpu: linear rope scaling factor %v must be positive", s.Factor)
		}
		for i := range inv {
			inv[i] /= s.Factor
		}
	case "llama3":
		if !(s.Factor > 0) || !(s.LowFreqFactor > 0) || !(s.HighFreqFactor > s.LowFreqFactor) || s.OriginalMaxPos <= 0 {
			return nil, fmt.Errorf("cpu: llama3 rope scaling needs factor > 0, 0 < low_freq_factor < high_freq_factor, original max positions > 0; got %v, %v, %v, %d",
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
	default:
		return nil, fmt.Errorf("cpu: unknown rope scaling type %q (want \"\", \"none\", \"linear\" or \"llama3\")", s.Type)
	}
	if s.FreqFactors != nil {
		if len(s.FreqFactors) != len(inv) {
			return nil, fmt.Errorf("cpu: rope has %d frequency factors for %d frequencies (rotary dim %d): %w", len(s.FreqFactors), len(inv), rotDim, ErrShape)
		}
		for i, ff := range s.FreqFactors {
			if !(ff > 0) || math.IsInf(ff, 0) {
				return nil, fmt.Errorf("cpu: rope frequency factor %d is %v; factors must be positive and finite", i, ff)
			}
			inv[i] /= ff
		}
	}
	return &Rope{headDim: headDim, rotDim: rotDim, style: style, invFreq: inv}, nil
}

// InvFreq returns a copy of the scaled angular frequencies (rotDim/2 values).
func (r *Rope) InvFreq() []float64 { return append([]float64(nil), r.invFreq...) }

// Apply rotates x in place; x is laid out [n, nHeads*headDim] and row i is at
// position positions[i]. Angles are computed in float64 per (row, frequency)
// and shared by all heads, so nothing is allocated or cached.
func (r *Rope) Apply(x []float32, n, nHeads int, positions []int32) {
	hd := r.headDim
	width := nHeads * hd
	if len(x) < n*width || len(positions) < n {
		panic(fmt.Sprintf("cpu: rope apply n=%d heads=%d head dim=%d: x has %d floats, positions %d", n, nHeads, hd, len(x), len(positions)))
	}
	half := r.rotDim / 2
	for i := range n {
		row := x[i*width : (i+1)*width]
		pos := float64(positions[i])
		for j, f := range r.invFreq {
			s64, c64 := math.Sincos(pos * f)
			s, c := float32(s64), float32(c64)
			a, b := 2*j, 2*j+1
			if r.style == RopeNeox {
				a, b = j, j+half
			}
			for h := 0; h < width; h += hd {
				x0, x1 := row[h+a], row[h+b]
				row[h+a] = x0*c - x1*s
				row[h+b] = x0*s + x1*c
			}
		}
	}
}
