package budget

import (
	"math"
	"math/big"
	"math/rand/v2"
	"testing"
)

// refRound3 is an independent round(x, 3): exact rational x·1000, rounded
// half to even to an integer, divided by 1000 and converted to the nearest
// float64.
func refRound(x float64, nd int) float64 {
	r := new(big.Rat).SetFloat64(x)
	scale := new(big.Rat).SetInt(new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(nd)), nil))
	r.Mul(r, scale)
	// floor and fraction
	num, den := r.Num(), r.Denom()
	q, m := new(big.Int).DivMod(num, den, new(big.Int)) // Euclidean: m >= 0
	twice := new(big.Int).Mul(m, big.NewInt(2))
	switch twice.Cmp(den) {
	case 1:
		q.Add(q, big.NewInt(1))
	case 0:
		if q.Bit(0) == 1 {
			q.Add(q, big.NewInt(1))
		}
	}
	out := new(big.Rat).SetFrac(q, scale.Num())
	f, _ := out.Float64()
	if f == 0 && x < 0 {
		return math.Copysign(0, -1)
	}
	return f
}

func TestPyRound(t *testing.T) {
	tests := []struct {
		x    float64
		nd   int
		want float64
	}{
		{0.8295199303571648, 3, 0.830},
		{(81559.0 - 13904) / 81559, 3, 0.83},
		{(81559.0 - 13440) / 81559, 3, 0.835},
		{(81559.0 - 1664) / 81559, 3, 0.98},
		{2.675, 2, 2.67},   // binary 2.67499999… (Python docs example)
		{0.125, 2, 0.12},   // exact tie → even
		{0.375, 2, 0.38},   // exact tie → even
		{0.0005, 3, 0.001}, // binary 0.000500000000000000010…
		{-0.0005, 3, -0.001},
		{1.0005, 3, 1.0}, // binary 1.000499999…
		{math.Inf(1), 3, math.Inf(1)},
	}
	for _, tc := range tests {
		if got := pyRound(tc.x, tc.nd); got != tc.want {
			t.Errorf("pyRound(%v, %d) = %v, want %v", tc.x, tc.nd, got, tc.want)
		}
		if !math.IsInf(tc.x, 0) {
			if ref := refRound(tc.x, tc.nd); ref != tc.want {
				t.Errorf("refRound(%v, %d) = %v, want %v (reference broken)", tc.x, tc.nd, ref, tc.want)
			}
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 20000 {
		x := rng.Float64()*2 - 0.5
		if rng.IntN(4) == 0 { // exact ties at the 4th decimal
			x = float64(rng.IntN(20000)) / 8000
		}
		if got, ref := pyRound(x, 3), refRound(x, 3); got != ref {
			t.Fatalf("pyRound(%v, 3) = %v, reference %v", x, got, ref)
		}
	}
}

func FuzzPyRound(f *testing.F) {
	f.Add(0.8295199303571648)
	f.Add(2.675)
	f.Add(0.125)
	f.Fuzz(func(t *testing.T, x float64) {
		if !finite(x) || math.Abs(x) > 1e15 {
			return
		}
		if got, ref := pyRound(x, 3), refRound(x, 3); got != ref {
			t.Fatalf("pyRound(%v, 3) = %v, reference %v", x, got, ref)
		}
	})
}

// refFloorDiv is the mathematically exact floor(a/b) of the binary values.
func refFloorDiv(a, b float64) float64 {
	q := new(big.Rat).Quo(new(big.Rat).SetFloat64(a), new(big.Rat).SetFloat64(b))
	fl := new(big.Int).Div(q.Num(), q.Denom()) // Euclidean with positive denominator = floor
	f, _ := new(big.Float).SetInt(fl).Float64()
	return f
}

func TestPyFloorDiv(t *testing.T) {
	tests := []struct{ a, b, want float64 }{
		{1, 0.1, 9}, // Python: 1 // 0.1 == 9.0 although 1 / 0.1 == 10.0
		{-1, 0.1, -10},
		{7, 2, 3},
		{-7, 2, -4},
		{7, -2, -4},
		{53687091200, 44236.8, 1213629},
		{55923118899, 131072, 426659},
		{6, 3, 2},
	}
	for _, tc := range tests {
		if got := pyFloorDiv(tc.a, tc.b); got != tc.want {
			t.Errorf("pyFloorDiv(%v, %v) = %v, want %v", tc.a, tc.b, got, tc.want)
		}
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for range 20000 {
		a := math.Floor(rng.Float64() * 1e14)
		b := 1 + rng.Float64()*2e5
		if rng.IntN(3) == 0 {
			b = math.Floor(b)
		}
		if got, ref := pyFloorDiv(a, b), refFloorDiv(a, b); got != ref {
			t.Fatalf("pyFloorDiv(%v, %v) = %v, exact floor %v", a, b, got, ref)
		}
	}
}

func TestWorldMinGiBFloat32(t *testing.T) {
	// V6: world minima pass through float32.
	tests := []struct {
		bytes int64
		world int
		want  float64
	}{
		{147312000000, 8, 147312001024.0 / GiB},
		{61300000000, 8, 61299998720.0 / GiB},
		{147312000000, 1, 147312000000.0 / GiB},
		{84711309312, 1, 78.8935546875},
	}
	for _, tc := range tests {
		if got := worldMinGiB(tc.bytes, tc.world); got != tc.want {
			t.Errorf("worldMinGiB(%d, %d) = %v, want %v", tc.bytes, tc.world, got, tc.want)
		}
	}
	if got := worldMinGiB(147312000000, 8); got != 137.1949920654297 {
		t.Errorf("V6 P GiB = %v, want 137.1949920654297", got)
	}
	if got := worldMinGiB(61300000000, 8); got != 57.09007263183594 {
		t.Errorf("V6 A GiB = %v, want 57.09007263183594", got)
	}
}
