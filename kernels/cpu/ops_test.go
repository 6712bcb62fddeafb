package cpu

import (
	"math"
	"testing"
)

func TestExpf(t *testing.T) {
	for x := -103.9; x <= 88.7; x += 0.0137 {
		f := float32(x)
		got, want := float64(expf(f)), math.Exp(float64(f))
		tol := 3e-7 * want
		if want < 1.2e-38 { // subnormal results: absolute spacing 2^-149
			tol = math.Ldexp(1, -149) * 2
		}
		if math.Abs(got-want) > tol {
			t.Fatalf("expf(%v) = %v, want %v", f, got, want)
		}
	}
	for _, c := range []struct{ x, want float32 }{
		{0, 1}, {float32(math.Inf(1)), float32(math.Inf(1))}, {float32(math.Inf(-1)), 0}, {89, float32(math.Inf(1))}, {-110, 0},
	} {
		if got := expf(c.x); got != c.want {
			t.Errorf("expf(%v) = %v, want %v", c.x, got, c.want)
		}
	}
	if v := expf(float32(math.NaN())); v == v {
		t.Errorf("expf(NaN) = %v", v)
	}
}

func TestRMSNorm(t *testing.T) {
	impls(t, func(t *testing.T) {
		r := newRand(20)
		for _, c := range []struct{ rows, dim int }{{1, 1}, {3, 7}, {2, 64}, {5, 4099}} {
			x := randVec(r, c.rows*c.dim, 5)
			w := randVec(r, c.dim, 2)
			const eps = 1e-5
			want := make([]float64, len(x))
			for i := range c.rows {
				var ss float64
				for _, v := range x[i*c.dim : (i+1)*c.dim] {
					ss += float64(v) * float64(v)
				}
				s := 1 / math.Sqrt(ss/float64(c.dim)+eps)
				for j := range c.dim {
					want[i*c.dim+j] = float64(x[i*c.dim+j]) * s * float64(w[j])
				}
			}
			out := make([]float32, len(x))
			RMSNorm(out, x, w, c.rows, c.dim, eps)
			RMSNorm(x, x, w, c.rows, c.dim, eps) // aliased
			for i := range out {
				if tol := 2e-6*math.Abs(want[i]) + 1e-7; !near(out[i], want[i], tol) || out[i] != x[i] {
					t.Fatalf("%dx%d: out[%d] = %v (aliased %v), want %v", c.rows, c.dim, i, out[i], x[i], want[i])
				}
			}
		}
	})
}

func TestElementwise(t *testing.T) {
	r := newRand(21)
	a, b := randVec(r, 37, 12), randVec(r, 37, 3)
	sil := make([]float32, 37)
	SiLUMul(sil, a, b)
	for i := range sil {
		g := float64(a[i])
		want := g / (1 + math.Exp(-g)) * float64(b[i])
		if !near(sil[i], want, 1e-6*math.Abs(want)+1e-7) {
			t.Fatalf("SiLUMul[%d] = %v, want %v", i, sil[i], want)
		}
	}
	g := append([]float32(nil), a...)
	SiLUMul(g, g, b)
	for i := range g {
		if g[i] != sil[i] {
			t.Fatalf("aliased SiLUMul differs at %d", i)
		}
	}
	if got := []float32{0}; true {
		SiLUMul(got, []float32{-200}, []float32{1})
		if got[0] != 0 {
			t.Errorf("SiLU(-200) = %v, want 0", got[0])
		}
	}
	sum := make([]float32, 37)
	Add(sum, a, b)
	Add(a, a, b)
	for i := range sum {
		if sum[i] != a[i] || float64(sum[i]) != float64(float32(float64(a[i]))) {
			t.Fatalf("Add mismatch at %d", i)
		}
	}
	out := []float32{1, 2, 3, 4, 5, 6}
	AddBias(out, []float32{10, 20, 30}, 2)
	for i, want := range []float32{11, 22, 33, 14, 25, 36} {
		if out[i] != want {
			t.Fatalf("AddBias = %v", out)
		}
	}
}

func refLogSoftmax(x []float32) []float64 {
	mx := math.Inf(-1)
	for _, v := range x {
		mx = math.Max(mx, float64(v))
	}
	var s float64
	for _, v := range x {
		s += math.Exp(float64(v) - mx)
	}
	out := make([]float64, len(x))
	for i, v := range x {
		out[i] = float64(v) - mx - math.Log(s)
	}
	return out
}

func TestSoftmax(t *testing.T) {
	impls(t, testSoftmax)
}

func testSoftmax(t *testing.T) {
	r := newRand(22)
	masked := randVec(r, 37, 5)
	for _, i := range []int{0, 3, 8, 9, 36} {
		masked[i] = float32(math.Inf(-1)) // logits a sampler masked out
	}
	masked[20] = masked[19] - 95 // far below the max
	Softmax(masked)
	for _, i := range []int{0, 3, 8, 9, 36} {
		if masked[i] != 0 {
			t.Fatalf("masked logit %d has probability %v", i, masked[i])
		}
	}
	if masked[20] > 1e-37 {
		t.Fatalf("a logit 95 below another has probability %v", masked[20])
	}
	for _, x := range [][]float32{
		{0}, {1, 2, 3}, {1000, -1000, 999}, {-1e30, -1e30}, randVec(r, 1000, 30), randVec(r, 32000, 8),
	} {
		want := refLogSoftmax(x)
		ls := make([]float32, len(x))
		LogSoftmax(ls, x)
		sm := append([]float32(nil), x...)
		Softmax(sm)
		for i := range x {
			if !near(ls[i], want[i], 2e-6*math.Abs(want[i])+2e-6) {
				t.Fatalf("len %d LogSoftmax[%d] = %v, want %v", len(x), i, ls[i], want[i])
			}
			p := math.Exp(want[i])
			if !near(sm[i], p, 2e-6*p+1e-12) {
				t.Fatalf("len %d Softmax[%d] = %v, want %v", len(x), i, sm[i], p)
			}
		}
	}
	Softmax(nil)
	LogSoftmax(nil, nil)
}

func TestArgmax(t *testing.T) {
	nan := float32(math.NaN())
	for _, c := range []struct {
		x    []float32
		want int
	}{
		{nil, -1}, {[]float32{3}, 0}, {[]float32{1, 5, 5, 2}, 1}, {[]float32{-3, -1, -2}, 1},
		{[]float32{nan, 1, 2}, 2}, {[]float32{1, nan, 0}, 0}, {[]float32{float32(math.Inf(-1)), float32(math.Inf(-1))}, 0},
	} {
		if got := Argmax(c.x); got != c.want {
			t.Errorf("Argmax(%v) = %d, want %d", c.x, got, c.want)
		}
	}
}

// TestSiLUMulRange checks both paths against float64 over the whole useful
// range, the overflow cut and the tails after the last full vector.
func TestSiLUMulRange(t *testing.T) {
	impls(t, func(t *testing.T) {
		r := newRand(22)
		for _, n := range []int{1, 7, 8, 9, 64, 1000 + 5} {
			gate, up := randVec(r, n, 30), randVec(r, n, 3)
			for i := 0; i < n; i += 5 {
				gate[i] = float32(-110 + 220*float64(i)/float64(n)) // sweep [-110, 110]
			}
			if n > 3 {
				gate[1], gate[2], gate[3] = -88.5, 87.9, -87.2
			}
			out := make([]float32, n)
			SiLUMul(out, gate, up)
			for i := range out {
				g := float64(gate[i])
				want := g / (1 + math.Exp(-g)) * float64(up[i])
				if !near(out[i], want, 2e-6*math.Abs(want)+1e-30) {
					t.Fatalf("n=%d: SiLUMul(%v)·%v = %v, want %v", n, gate[i], up[i], out[i], want)
				}
			}
		}
		nan := float32(math.NaN())
		out := make([]float32, 9)
		SiLUMul(out, []float32{nan, 1, 1, 1, 1, 1, 1, 1, nan}, []float32{1, 1, 1, 1, 1, 1, 1, 1, 1})
		if out[0] == out[0] || out[8] == out[8] {
			t.Fatalf("NaN gate gave %v, %v", out[0], out[8])
		}
	})
}
