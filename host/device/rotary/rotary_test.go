package rotary

import (
	"math"
	"testing"

	"github.com/kvhost/kvhost/host/device"
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
