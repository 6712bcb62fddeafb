package cpu

import (
	"math"
	"testing"
)

// The YaRN configurations of the models this package serves, as their HF
// config.json files write them.
var (
	deepseekV3Yarn     = RopeScaling{Type: "yarn", Factor: 40, OriginalMaxPos: 4096, BetaFast: 32, BetaSlow: 1, Mscale: 1, MscaleAllDim: 1}
	deepseekV2LiteYarn = RopeScaling{Type: "deepseek_yarn", Factor: 40, OriginalMaxPos: 4096, BetaFast: 32, BetaSlow: 1, Mscale: 0.707, MscaleAllDim: 0.707}
	gptOssYarn         = RopeScaling{Type: "yarn", Factor: 32, OriginalMaxPos: 4096, BetaFast: 32, BetaSlow: 1, NoTruncate: true}
)

// refYarn transcribes transformers' _compute_yarn_parameters (and, for
// "deepseek_yarn", DeepSeek's DeepseekV2YarnRotaryEmbedding) in float64:
// inv_freq = interpolation·(1-e) + extrapolation·e with e = 1 - ramp.
func refYarn(dim int, base float64, s RopeScaling) ([]float64, float64) {
	getMscale := func(scale, m float64) float64 {
		if scale <= 1 {
			return 1
		}
		return 0.1*m*math.Log(scale) + 1
	}
	betaFast, betaSlow := s.BetaFast, s.BetaSlow
	if betaFast == 0 {
		betaFast = 32
	}
	if betaSlow == 0 {
		betaSlow = 1
	}
	findCorrectionDim := func(rot float64) float64 {
		return float64(dim) * math.Log(float64(s.OriginalMaxPos)/(rot*2*math.Pi)) / (2 * math.Log(base))
	}
	low, high := findCorrectionDim(betaFast), findCorrectionDim(betaSlow)
	if !s.NoTruncate {
		low, high = math.Floor(low), math.Ceil(high)
	}
	low, high = math.Max(low, 0), math.Min(high, float64(dim-1))
	if low == high {
		high += 0.001
	}
	out := make([]float64, dim/2)
	for i := range out {
		posFreq := math.Pow(base, float64(2*i)/float64(dim))
		extrapolation := 1 / posFreq
		interpolation := 1 / (s.Factor * posFreq)
		linear := (float64(i) - low) / (high - low)
		ramp := math.Min(1, math.Max(0, linear))
		extrapolationFactor := 1 - ramp
		out[i] = interpolation*(1-extrapolationFactor) + extrapolation*extrapolationFactor
	}
	attn := s.AttnFactor
	if attn == 0 {
		switch {
		case s.Type == "deepseek_yarn":
			m := s.Mscale
			if m == 0 {
				m = 1
			}
			attn = getMscale(s.Factor, m) / getMscale(s.Factor, s.MscaleAllDim)
		case s.Mscale != 0 && s.MscaleAllDim != 0:
			attn = getMscale(s.Factor, s.Mscale) / getMscale(s.Factor, s.MscaleAllDim)
		default:
			attn = getMscale(s.Factor, 1)
		}
	}
	return out, attn
}

// TestYarnHandWorked pins the YaRN tables of the real models to numbers
// worked by hand from the formulas, so the reference above and the kernel
// cannot share a misreading: which frequencies are kept, which divided by
// the factor, the cos/sin factor, and DeepSeek's softmax-scale multiplier.
func TestYarnHandWorked(t *testing.T) {
	for _, c := range []struct {
		name       string
		rot        int
		theta      float64
		s          RopeScaling
		keptTo     int     // frequencies 0..keptTo are unscaled
		dividedGe  int     // frequencies >= dividedGe are divided by Factor
		attn       float64 // cos/sin factor
		softmaxMul float64 // YarnSoftmaxScale
	}{
		// corr(32) = 64·ln(4096/(64π))/(2·ln 1e4) = 10.47 → 10;
		// corr(1) = 64·ln(4096/2π)/(2·ln 1e4) = 22.51 → 23.
		// mscale(40, 1) = 1 + 0.1·ln 40 = 1.368888; squared 1.873854.
		{"deepseek-v3", 64, 10000, deepseekV3Yarn, 10, 23, 1, 1.8738540},
		// mscale(40, 0.707) = 1 + 0.0707·ln 40 = 1.260804; squared 1.589626.
		{"deepseek-v2-lite", 64, 10000, deepseekV2LiteYarn, 10, 23, 1, 1.5896262},
		// Not truncated: corr(32) = 64·ln(4096/(64π))/(2·ln 150000) = 8.093,
		// corr(1) = 17.40: frequencies 0..8 kept, 18.. divided.
		// mscale(32, 1) = 1 + 0.1·ln 32 = 1.346574; no softmax change.
		{"gpt-oss", 64, 150000, gptOssYarn, 8, 18, 1.3465736, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			r, err := NewRope(c.rot, c.rot, c.theta, c.s, RopeNeox)
			if err != nil {
				t.Fatal(err)
			}
			inv := r.InvFreq()
			for i, f := range inv {
				base := math.Pow(c.theta, -float64(2*i)/float64(c.rot))
				switch {
				case i <= c.keptTo && math.Abs(f-base) > 1e-15*base:
					t.Errorf("freq %d = %v, want it unscaled (%v)", i, f, base)
				case i >= c.dividedGe && math.Abs(f-base/c.s.Factor) > 1e-15*base:
					t.Errorf("freq %d = %v, want it divided by %v (%v)", i, f, c.s.Factor, base/c.s.Factor)
				case i > c.keptTo && i < c.dividedGe && (f >= base || f <= base/c.s.Factor):
					t.Errorf("freq %d = %v, want it strictly on the ramp between %v and %v", i, f, base/c.s.Factor, base)
				}
			}
			if math.Abs(r.AttnFactor()-c.attn) > 1e-6 {
				t.Errorf("attention factor %v, want %v", r.AttnFactor(), c.attn)
			}
			if got := YarnSoftmaxScale(c.s); math.Abs(got-c.softmaxMul) > 1e-6 {
				t.Errorf("softmax scale multiplier %v, want %v", got, c.softmaxMul)
			}
		})
	}
	if got := YarnSoftmaxScale(RopeScaling{Type: "linear", Factor: 8, MscaleAllDim: 1}); got != 1 {
		t.Errorf("softmax scale multiplier of linear scaling %v, want 1", got)
	}
}

func TestRopeYarnErrors(t *testing.T) {
	for _, s := range []RopeScaling{
		{Type: "yarn", Factor: 40},
		{Type: "yarn", OriginalMaxPos: 4096},
		{Type: "yarn", Factor: math.Inf(1), OriginalMaxPos: 4096},
		{Type: "yarn", Factor: 4, OriginalMaxPos: 4096, BetaFast: -1},
		{Type: "deepseek_yarn", Factor: 4, OriginalMaxPos: 4096, Mscale: -0.5},
		{Type: "yarn", Factor: 4, OriginalMaxPos: 4096, AttnFactor: math.NaN()},
	} {
		if _, err := NewRope(64, 64, 1e4, s, RopeNormal); err == nil {
			t.Errorf("NewRope accepted %+v", s)
		}
	}
	r, err := NewRope(64, 32, 1e4, RopeScaling{}, RopeNormal)
	if err != nil {
		t.Fatal(err)
	}
	for _, off := range []int{-1, 33} {
		if _, err := r.WithOffset(off); err == nil {
			t.Errorf("offset %d of a 32-dim rotation in a 64-dim head accepted", off)
		}
	}
	if o, err := r.WithOffset(32); err != nil || o.Offset() != 32 || r.Offset() != 0 {
		t.Errorf("WithOffset(32) = %v, %v; original offset %d", o, err, r.Offset())
	}
}
