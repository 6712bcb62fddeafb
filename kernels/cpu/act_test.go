package cpu

import (
	"math"
	"testing"
)

// The float64 references. refGELUTanh is HF's gelu_pytorch_tanh,
// 0.5·x·(1 + tanh(u)) with u = √(2/π)·(x + 0.044715·x³), evaluated as
// x/(1 + e^(-2u)) because in float64 1 + tanh(u) cancels to 0 once u < -19,
// where the float32 kernel is still right; it also returns 2u, whose float32
// rounding (relative 6e-8) is amplified by the exp: the tolerance grows
// with |2u|.
func refGELUTanh(x float64) (float64, float64) {
	z := 2 * math.Sqrt(2/math.Pi) * (x + 0.044715*x*x*x)
	return x / (1 + math.Exp(-z)), z
}

// expTol is the float32 error budget of x·σ(z)-shaped activations: a few
// ulps, plus the exp's amplification of z's rounding; results below
// 1e-35 (where exp overflows) are 0.
func expTol(want, z float64) float64 { return 3e-7*(3+math.Abs(z))*math.Abs(want) + 1e-35 }

func refSwiGLUOAI(gate, up, alpha, limit float64) float64 {
	gate = math.Min(gate, limit)
	up = math.Max(math.Min(up, limit), -limit)
	glu := gate * (1 / (1 + math.Exp(-gate*alpha)))
	return (up + 1) * glu
}

// actInputs spans the interesting ranges: near 0, the bulk, the clamp of
// gpt-oss (±7), and where exp overflows (the activations' tails).
func actInputs(n int, seed uint64) []float32 {
	r := newRand(seed)
	v := randVec(r, n, 4)
	for i := range v {
		switch i % 9 {
		case 0:
			v[i] *= 30
		case 1:
			v[i] *= 1e-3
		case 2:
			v[i] *= 200
		}
	}
	return v
}

func TestGeGLUTanh(t *testing.T) {
	impls(t, func(t *testing.T) {
		for _, n := range []int{0, 1, 7, 8, 9, 33, 1000} {
			gate, up := actInputs(n, 1), actInputs(n, 2)
			out := make([]float32, n)
			GeGLUTanh(out, gate, up)
			for i := range out {
				g, z := refGELUTanh(float64(gate[i]))
				want := g * float64(up[i])
				if !near(out[i], want, expTol(want, z)) {
					t.Fatalf("n=%d: geglu(%v, %v) = %v, want %v", n, gate[i], up[i], out[i], want)
				}
			}
			// In place over gate.
			GeGLUTanh(gate, gate, up)
			for i := range out {
				if gate[i] != out[i] {
					t.Fatalf("n=%d: in-place result %v differs from %v", n, gate[i], out[i])
				}
			}
		}
	})
}

func TestSwiGLUOAI(t *testing.T) {
	impls(t, func(t *testing.T) {
		for _, n := range []int{0, 5, 8, 17, 1000} {
			gate, up := actInputs(n, 3), actInputs(n, 4)
			out := make([]float32, n)
			SwiGLUOAI(out, gate, up, 1.702, 7)
			for i := range out {
				want := refSwiGLUOAI(float64(gate[i]), float64(up[i]), 1.702, 7)
				if !near(out[i], want, expTol(want, 1.702*math.Min(float64(gate[i]), 7))) {
					t.Fatalf("n=%d: swiglu_oai(%v, %v) = %v, want %v", n, gate[i], up[i], out[i], want)
				}
			}
		}
	})
	// Hand-worked: gate 10 clamps to 7, up -9 clamps to -7: 7·σ(11.914)·(-6);
	// gate 0 gives 0 whatever up; gate -100 underflows to -0.
	out := make([]float32, 3)
	SwiGLUOAI(out, []float32{10, 0, -100}, []float32{-9, 5, 1}, 1.702, 7)
	if want := -42 / (1 + math.Exp(-7*1.702)); !near(out[0], want, 1e-5) || out[1] != 0 || out[2] != 0 {
		t.Errorf("swiglu_oai hand values %v, want [%v 0 0]", out, want)
	}
}

func TestSoftCap(t *testing.T) {
	impls(t, func(t *testing.T) {
		for _, cp := range []float32{30, 50, 1} {
			for _, n := range []int{0, 3, 8, 100, 257} {
				x := actInputs(n, 5)
				orig := append([]float32(nil), x...)
				SoftCap(x, cp)
				for i := range x {
					want := float64(cp) * math.Tanh(float64(orig[i])/float64(cp))
					if !near(x[i], want, 1e-6*math.Abs(want)+3e-7*float64(cp)) {
						t.Fatalf("cap %v: softcap(%v) = %v, want %v", cp, orig[i], x[i], want)
					}
					if math.Abs(float64(x[i])) > float64(cp) {
						t.Fatalf("cap %v: softcap(%v) = %v beyond the cap", cp, orig[i], x[i])
					}
				}
			}
		}
	})
	defer func() {
		if recover() == nil {
			t.Error("SoftCap with cap 0 did not panic")
		}
	}()
	SoftCap([]float32{1}, 0)
}

func TestScale(t *testing.T) {
	x := []float32{1, -2, 0.5}
	Scale(x, 48)
	if x[0] != 48 || x[1] != -96 || x[2] != 24 {
		t.Errorf("scale %v", x)
	}
}

func BenchmarkActivations(b *testing.B) {
	const n = 1 << 16
	gate, up := actInputs(n, 1), actInputs(n, 2)
	out := make([]float32, n)
	for _, simd := range []bool{false, true} {
		if simd && !simdAvailable {
			continue
		}
		name := "go"
		if simd {
			name = "avx2"
		}
		saved := useSIMD
		useSIMD = simd
		b.Run("geglu/"+name, func(b *testing.B) {
			b.SetBytes(n * 12)
			for b.Loop() {
				GeGLUTanh(out, gate, up)
			}
		})
		b.Run("swiglu_oai/"+name, func(b *testing.B) {
			b.SetBytes(n * 12)
			for b.Loop() {
				SwiGLUOAI(out, gate, up, 1.702, 7)
			}
		})
		b.Run("softcap/"+name, func(b *testing.B) {
			b.SetBytes(n * 8)
			for b.Loop() {
				copy(out, gate)
				SoftCap(out, 30)
			}
		})
		useSIMD = saved
	}
}
