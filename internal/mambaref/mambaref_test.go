package mambaref

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestTinyByHand checks the reference against numbers worked out by hand for
// one head of one value and one state, a 2-tap convolution, two tokens.
func TestTinyByHand(t *testing.T) {
	c := Config{Hidden: 1, Heads: 1, HeadDim: 1, Groups: 1, State: 1, ConvKernel: 2,
		DtMin: 0, DtMax: math.Inf(1), NormGroup: 1, Eps: 0}
	w := &Weights{
		// in_proj rows: z, x, B, C, dt (hidden 1)
		InProj:  [][]float64{{1}, {1}, {2}, {3}, {0}},
		ConvW:   [][]float64{{0.5, 1}, {0, 1}, {0, 1}},
		ConvB:   []float64{0, 0, 0},
		ALog:    []float64{0},                    // A = -1
		D:       []float64{0.25},                 // skip
		DtBias:  []float64{math.Log(math.E - 1)}, // softplus(0 + bias) = 1
		NormW:   []float64{2},
		OutProj: [][]float64{{1}},
	}
	st := NewState(c)
	out := Forward(c, w, st, [][]float64{{1}, {1}})
	// Token 0: z = 1; conv inputs x = 1, B = 2, C = 3 with zero history:
	// u = silu(1), silu(2), silu(3). dt = 1, a = e^-1.
	// h = dt·B·x = silu(2)·silu(1); y = C·h + D·x.
	// Gated norm of one value: g/|g|·2 = ±2 (eps 0), sign of y·silu(z).
	if math.Abs(out[0][0]-2) > 1e-12 {
		t.Errorf("token 0 = %v, want 2", out[0][0])
	}
	// The state after token 0: h = silu(2)·silu(1).
	h0 := silu(2) * silu(1)
	// Token 1: x conv = silu(0.5·1 + 1) = silu(1.5), B, C as before.
	x1 := silu(1.5)
	h1 := h0*math.Exp(-1) + silu(2)*x1
	if got := st.SSM[0][0][0]; math.Abs(got-h1) > 1e-12 {
		t.Errorf("state after token 1 = %v, want %v", got, h1)
	}
	if got := st.Conv[0][0]; got != 1 {
		t.Errorf("conv state = %v, want the last x input 1", got)
	}
}

// TestRandomWeightsDt checks that dt_bias is the inverse softplus of a time
// step in HF's initial range [0.001, 0.1].
func TestRandomWeightsDt(t *testing.T) {
	c := Config{Hidden: 4, Heads: 8, HeadDim: 2, Groups: 2, State: 3, ConvKernel: 4,
		DtMin: 0, DtMax: math.Inf(1), NormGroup: 8, Eps: 1e-5}
	w := RandomWeights(c, rand.New(rand.NewPCG(1, 2)), true)
	for h := range c.Heads {
		if d := Dt(c, w, h, 0); d < 0.001-1e-12 || d > 0.1+1e-12 {
			t.Errorf("head %d: dt(0) = %v, want in [0.001, 0.1]", h, d)
		}
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
}
