package cpu

import (
	"math"
	"testing"
)

// refFreqs computes the scaled frequencies straight from the formulas, and
// the factor cos and sin are multiplied by.
func refFreqs(rotDim int, theta float64, s RopeScaling) ([]float64, float64) {
	f := make([]float64, rotDim/2)
	attn := 1.0
	if s.Type == "yarn" || s.Type == "deepseek_yarn" {
		f, attn = refYarn(rotDim, theta, s)
	}
	for i := range f {
		if s.Type == "" || s.Type == "none" || s.Type == "linear" || s.Type == "llama3" {
			f[i] = 1 / math.Pow(theta, float64(2*i)/float64(rotDim))
		}
		switch s.Type {
		case "linear":
			f[i] /= s.Factor
		case "llama3":
			orig := float64(s.OriginalMaxPos)
			wavelen := 2 * math.Pi / f[i]
			if wavelen < orig/s.HighFreqFactor {
				continue
			}
			if wavelen > orig/s.LowFreqFactor {
				f[i] /= s.Factor
				continue
			}
			smooth := (orig/wavelen - s.LowFreqFactor) / (s.HighFreqFactor - s.LowFreqFactor)
			f[i] = (1-smooth)*f[i]/s.Factor + smooth*f[i]
		}
	}
	for i, ff := range s.FreqFactors {
		f[i] /= ff
	}
	return f, attn
}

func TestRope(t *testing.T) {
	llama3 := RopeScaling{Type: "llama3", Factor: 8, LowFreqFactor: 1, HighFreqFactor: 4, OriginalMaxPos: 8192}
	for _, c := range []struct {
		name                    string
		headDim, rotDim, nHeads int
		theta                   float64
		s                       RopeScaling
		style                   RopeStyle
		offset                  int
	}{
		{"normal", 64, 64, 3, 10000, RopeScaling{}, RopeNormal, 0},
		{"neox", 64, 64, 2, 1e6, RopeScaling{Type: "none"}, RopeNeox, 0},
		{"normal-linear", 16, 16, 2, 10000, RopeScaling{Type: "linear", Factor: 4}, RopeNormal, 0},
		{"neox-linear-partial", 24, 8, 2, 10000, RopeScaling{Type: "linear", Factor: 2}, RopeNeox, 0},
		{"normal-llama3", 128, 128, 2, 500000, llama3, RopeNormal, 0},
		{"neox-llama3-partial", 128, 64, 1, 500000, llama3, RopeNeox, 0},
		{"normal-factors", 16, 16, 2, 10000, RopeScaling{FreqFactors: []float64{1, 1, 1.5, 2, 4, 8, 8, 8}}, RopeNormal, 0},
		{"neox-linear-factors-partial", 24, 8, 1, 10000, RopeScaling{Type: "linear", Factor: 2, FreqFactors: []float64{1, 3, 0.5, 8}}, RopeNeox, 0},
		// DeepSeek-V3: the rope part (64 of a 192-dim query head) after
		// the 128 nope dims, YaRN with mscale = mscale_all_dim = 1.
		{"deepseek-v3-query", 192, 64, 3, 10000, deepseekV3Yarn, RopeNormal, 128},
		// DeepSeek-V2-Lite's shared rope key: one "head" of 512+64, the
		// rope part last; mscale = mscale_all_dim = 0.707.
		{"deepseek-v2-lite-key", 576, 64, 1, 10000, deepseekV2LiteYarn, RopeNormal, 512},
		{"deepseek-yarn-mscale-only", 64, 64, 2, 10000, RopeScaling{Type: "deepseek_yarn", Factor: 16, OriginalMaxPos: 2048, Mscale: 0.8}, RopeNormal, 0},
		{"hf-yarn-mscale-only", 64, 64, 2, 10000, RopeScaling{Type: "yarn", Factor: 16, OriginalMaxPos: 2048, Mscale: 0.8}, RopeNeox, 0},
		{"hf-yarn-attention-factor", 32, 32, 2, 1e6, RopeScaling{Type: "yarn", Factor: 4, OriginalMaxPos: 32768, AttnFactor: 1.25, BetaFast: 16, BetaSlow: 2}, RopeNeox, 0},
		{"gpt-oss", 64, 64, 4, 150000, gptOssYarn, RopeNeox, 0},
		{"qwen3-moe", 128, 128, 2, 1e6, RopeScaling{}, RopeNeox, 0},
		{"gemma3-local", 256, 256, 1, 10000, RopeScaling{}, RopeNeox, 0},
		{"gemma3-global", 256, 256, 1, 1e6, RopeScaling{Type: "linear", Factor: 8}, RopeNeox, 0},
		{"neox-offset", 40, 16, 2, 10000, RopeScaling{}, RopeNeox, 8},
	} {
		t.Run(c.name, func(t *testing.T) {
			rope, err := NewRope(c.headDim, c.rotDim, c.theta, c.s, c.style)
			if err != nil {
				t.Fatal(err)
			}
			if c.offset > 0 {
				if rope, err = rope.WithOffset(c.offset); err != nil {
					t.Fatal(err)
				}
			}
			freqs, attn := refFreqs(c.rotDim, c.theta, c.s)
			if math.Abs(rope.AttnFactor()-attn) > 1e-12 {
				t.Fatalf("attention factor %v, want %v", rope.AttnFactor(), attn)
			}
			got := rope.InvFreq()
			for i := range freqs {
				if math.Abs(got[i]-freqs[i]) > 1e-12*freqs[i] {
					t.Fatalf("freq %d = %v, want %v", i, got[i], freqs[i])
				}
			}
			if c.s.Type == "llama3" {
				// The scaled region must really be exercised: some frequencies
				// kept, some divided, some smoothed.
				var kept, div, mid int
				base, _ := refFreqs(c.rotDim, c.theta, RopeScaling{})
				for i := range freqs {
					switch r := freqs[i] / base[i]; {
					case r == 1:
						kept++
					case math.Abs(r-1/c.s.Factor) < 1e-15:
						div++
					default:
						mid++
					}
				}
				if kept == 0 || div == 0 || mid == 0 {
					t.Fatalf("llama3 regions kept/divided/smoothed = %d/%d/%d", kept, div, mid)
				}
			}
			r := newRand(30)
			// Lone positions, and runs of consecutive ones longer than
			// ropeRun (rows whose angles Apply turns from the row before)
			// at small and large positions.
			positions := []int32{0, 1, 7, 4095, 8191, 131071, 999999}
			for _, from := range []int32{2, 999000} {
				for p := range int32(ropeRun + 9) {
					positions = append(positions, from+p)
				}
			}
			n := len(positions)
			width := c.nHeads * c.headDim
			x := randVec(r, n*width, 2)
			orig := append([]float32(nil), x...)
			rope.Apply(x, n, c.nHeads, positions)
			for i, pos := range positions {
				for h := range c.nHeads {
					o := i*width + h*c.headDim
					done := make([]bool, c.headDim)
					for j, f := range freqs {
						a, b := c.offset+2*j, c.offset+2*j+1
						if c.style == RopeNeox {
							a, b = c.offset+j, c.offset+j+c.rotDim/2
						}
						ang := float64(pos) * f
						x0, x1 := float64(orig[o+a]), float64(orig[o+b])
						w0 := (x0*math.Cos(ang) - x1*math.Sin(ang)) * attn
						w1 := (x0*math.Sin(ang) + x1*math.Cos(ang)) * attn
						tol := 1e-6 * (math.Abs(x0) + math.Abs(x1)) * attn
						if !near(x[o+a], w0, tol) || !near(x[o+b], w1, tol) {
							t.Fatalf("pos %d head %d pair %d: (%v,%v), want (%v,%v)", pos, h, j, x[o+a], x[o+b], w0, w1)
						}
						done[a], done[b] = true, true
					}
					for d := range c.headDim {
						if !done[d] && x[o+d] != orig[o+d] {
							t.Fatalf("pos %d head %d dim %d outside the rotary dims changed", pos, h, d)
						}
					}
				}
			}
		})
	}
}

func TestNewRopeErrors(t *testing.T) {
	for _, c := range []struct {
		hd, rd int
		theta  float64
		s      RopeScaling
		style  RopeStyle
	}{
		{64, 65, 1e4, RopeScaling{}, RopeNormal},
		{64, 7, 1e4, RopeScaling{}, RopeNormal},
		{0, 0, 1e4, RopeScaling{}, RopeNormal},
		{64, 64, 0, RopeScaling{}, RopeNormal},
		{64, 64, 1e4, RopeScaling{Type: "yarn"}, RopeNormal},
		{64, 64, 1e4, RopeScaling{Type: "linear"}, RopeNormal},
		{64, 64, 1e4, RopeScaling{Type: "llama3", Factor: 8, LowFreqFactor: 4, HighFreqFactor: 1, OriginalMaxPos: 8192}, RopeNormal},
		{64, 64, 1e4, RopeScaling{Type: "llama3", Factor: 8, LowFreqFactor: 1, HighFreqFactor: 4}, RopeNormal},
		{64, 64, 1e4, RopeScaling{}, RopeStyle(7)},
		{8, 8, 1e4, RopeScaling{FreqFactors: []float64{1, 2, 3}}, RopeNormal},
		{8, 8, 1e4, RopeScaling{FreqFactors: []float64{1, 2, 3, 4, 5}}, RopeNormal},
		{8, 8, 1e4, RopeScaling{FreqFactors: []float64{1, 0, 3, 4}}, RopeNormal},
		{8, 8, 1e4, RopeScaling{FreqFactors: []float64{1, -2, 3, 4}}, RopeNormal},
		{8, 8, 1e4, RopeScaling{FreqFactors: []float64{1, math.NaN(), 3, 4}}, RopeNormal},
		{8, 8, 1e4, RopeScaling{FreqFactors: []float64{1, math.Inf(1), 3, 4}}, RopeNormal},
	} {
		if _, err := NewRope(c.hd, c.rd, c.theta, c.s, c.style); err == nil {
			t.Errorf("NewRope(%d, %d, %v, %+v, %d) succeeded", c.hd, c.rd, c.theta, c.s, c.style)
		}
	}
}
