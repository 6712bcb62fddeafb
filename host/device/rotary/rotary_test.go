package rotary

import (
	"math"
	"testing"

	"github.com/kvhost/kvhost/host/device"
	kcpu "github.com/kvhost/kvhost/kernels/cpu"
)

// TestTableCarriesEverySpecField checks each RopeSpec field against a
// float64 reference written from the definitions: theta and rotary dim set
// the base frequencies, linear scaling divides them, FreqFactors divides each
// one, and Neox pairs x[i] with x[i+rot/2] instead of x[2i] with x[2i+1].
func TestTableCarriesEverySpecField(t *testing.T) {
	base := func(i, rot int, theta float64) float64 { return math.Pow(theta, -float64(2*i)/float64(rot)) }
	ff := []float64{1, 2, 4, 8}
	for _, tc := range []struct {
		name string
		spec device.RopeSpec
		want func(i int) float64
	}{
		{"plain", device.RopeSpec{HeadDim: 8, RotDim: 8, Theta: 10000}, func(i int) float64 { return base(i, 8, 10000) }},
		{"linear", device.RopeSpec{HeadDim: 8, RotDim: 8, Theta: 500, Scaling: "linear", Factor: 4}, func(i int) float64 { return base(i, 8, 500) / 4 }},
		{"freq factors", device.RopeSpec{HeadDim: 8, RotDim: 8, Theta: 10000, FreqFactors: ff}, func(i int) float64 { return base(i, 8, 10000) / ff[i] }},
		{"partial", device.RopeSpec{HeadDim: 16, RotDim: 8, Theta: 10000}, func(i int) float64 { return base(i, 8, 10000) }},
	} {
		r, err := Table(tc.spec)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		inv := r.InvFreq()
		if len(inv) != tc.spec.RotDim/2 {
			t.Fatalf("%s: %d frequencies, want %d", tc.name, len(inv), tc.spec.RotDim/2)
		}
		for i, f := range inv {
			if w := tc.want(i); math.Abs(f-w) > 1e-15*w {
				t.Errorf("%s: freq %d = %v, want %v", tc.name, i, f, w)
			}
		}
	}
	// Style: rotate one head of 4 at position 1 and check which pairs moved.
	for _, neox := range []bool{false, true} {
		r, err := Table(device.RopeSpec{HeadDim: 4, RotDim: 4, Theta: 10000, Neox: neox})
		if err != nil {
			t.Fatal(err)
		}
		x := []float32{1, 0, 0, 0}
		r.Apply(x, 1, 1, []int32{1})
		// Frequency 0 is 1 rad/position: x0 rotates with x1 (normal) or x2 (neox).
		partner := 1
		if neox {
			partner = 2
		}
		if math.Abs(float64(x[0])-math.Cos(1)) > 1e-6 || math.Abs(float64(x[partner])-math.Sin(1)) > 1e-6 {
			t.Errorf("neox=%v: rotated %v, want cos(1) at 0 and sin(1) at %d", neox, x, partner)
		}
	}
	if _, err := Table(device.RopeSpec{HeadDim: 4, RotDim: 3, Theta: 1}); err == nil {
		t.Error("odd rotary dim accepted")
	}
}

// TestTableCarriesYarnAndOffset checks the fields added for DeepSeek,
// gpt-oss and Gemma 3: each YaRN field, changed alone, changes the table
// exactly as kernels/cpu computes it from the same value (so none is
// dropped on the way), RotOffset moves the rotated span, and SoftmaxScale is
// DeepSeek's mscale(factor, mscale_all_dim)².
func TestTableCarriesYarnAndOffset(t *testing.T) {
	base := device.RopeSpec{HeadDim: 64, RotDim: 64, Theta: 10000, Scaling: "yarn", Factor: 40, OriginalMaxPos: 4096}
	sig := func(s device.RopeSpec) ([]float64, float64) {
		r, err := Table(s)
		if err != nil {
			t.Fatalf("%+v: %v", s, err)
		}
		return r.InvFreq(), r.AttnFactor()
	}
	b0, a0 := sig(base)
	for _, tc := range []struct {
		name string
		mod  func(*device.RopeSpec)
	}{
		{"beta fast", func(s *device.RopeSpec) { s.BetaFast = 8 }},
		{"beta slow", func(s *device.RopeSpec) { s.BetaSlow = 4 }},
		{"mscale", func(s *device.RopeSpec) { s.Mscale, s.MscaleAllDim = 1, 0.5 }},
		{"attention factor", func(s *device.RopeSpec) { s.AttnFactor = 1.5 }},
		{"no truncate", func(s *device.RopeSpec) { s.NoTruncate = true }},
		{"deepseek", func(s *device.RopeSpec) { s.Scaling, s.Mscale = "deepseek_yarn", 0.5 }},
	} {
		s := base
		tc.mod(&s)
		inv, af := sig(s)
		want, err := kcpu.NewRope(64, 64, 10000, kcpu.RopeScaling{
			Type: s.Scaling, Factor: 40, OriginalMaxPos: 4096, BetaFast: s.BetaFast, BetaSlow: s.BetaSlow,
			Mscale: s.Mscale, MscaleAllDim: s.MscaleAllDim, AttnFactor: s.AttnFactor, NoTruncate: s.NoTruncate,
		}, kcpu.RopeNormal)
		if err != nil {
			t.Fatal(err)
		}
		changed := af != a0
		for i := range inv {
			changed = changed || inv[i] != b0[i]
			if inv[i] != want.InvFreq()[i] {
				t.Errorf("%s: freq %d = %v, kernels/cpu gives %v", tc.name, i, inv[i], want.InvFreq()[i])
			}
		}
		if af != want.AttnFactor() {
			t.Errorf("%s: attention factor %v, kernels/cpu gives %v", tc.name, af, want.AttnFactor())
		}
		if !changed {
			t.Errorf("%s: the table did not change", tc.name)
		}
	}

	// DeepSeek's rope key: the last 64 of a 576-element row.
	r, err := Table(device.RopeSpec{HeadDim: 576, RotDim: 64, Theta: 10000, RotOffset: 512})
	if err != nil {
		t.Fatal(err)
	}
	x := make([]float32, 576)
	for i := range x {
		x[i] = 1
	}
	r.Apply(x, 1, 1, []int32{3})
	for i, v := range x {
		if (i < 512) != (v == 1) {
			t.Fatalf("element %d = %v after rotating elements 512.. at position 3", i, v)
		}
	}
	if _, err := Table(device.RopeSpec{HeadDim: 64, RotDim: 64, Theta: 10000, RotOffset: 2}); err == nil {
		t.Error("a rotated span past the head accepted")
	}

	ds := device.RopeSpec{HeadDim: 192, RotDim: 64, Theta: 10000, Scaling: "yarn", Factor: 40, OriginalMaxPos: 4096, Mscale: 0.707, MscaleAllDim: 0.707}
	if got, want := SoftmaxScale(ds), math.Pow(1+0.0707*math.Log(40), 2); math.Abs(got-want) > 1e-12 {
		t.Errorf("SoftmaxScale = %v, want %v", got, want)
	}
	if got := SoftmaxScale(device.RopeSpec{HeadDim: 64, RotDim: 64, Theta: 150000, Scaling: "yarn", Factor: 32, OriginalMaxPos: 4096}); got != 1 {
		t.Errorf("SoftmaxScale without mscale_all_dim = %v, want 1", got)
	}
}
