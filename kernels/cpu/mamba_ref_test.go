package cpu

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/kvhost/kvhost/internal/mambaref"
)

// Bridges between the float64 reference (internal/mambaref, HF layouts) and
// the kernels' layouts, shared by the Mamba-2 tests and benchmarks.

// mambaImpls runs f on the portable Go kernels, on AVX2 and on AVX-512,
// whichever this CPU has.
func mambaImpls(t *testing.T, f func(t *testing.T)) {
	t.Helper()
	saved := useAVX512
	defer func() { useAVX512 = saved }()
	impls(t, func(t *testing.T) {
		useAVX512 = false
		if !useSIMD {
			f(t)
			return
		}
		t.Run("avx2", f)
		if avx512Available {
			useAVX512 = true
			t.Run("avx512", f)
		}
	})
}

// withSSDMinLen sets ssdMinLen for the test's duration.
func withSSDMinLen(t testing.TB, n int) {
	saved := ssdMinLen
	ssdMinLen = n
	t.Cleanup(func() { ssdMinLen = saved })
}

func kernelShape(c mambaref.Config) Mamba2 {
	return Mamba2{Heads: c.Heads, HeadDim: c.HeadDim, Groups: c.Groups, State: c.State, ConvKernel: c.ConvKernel,
		DtMin: float32(c.DtMin), DtMax: float32(c.DtMax)}
}

func f32s(v []float64) []float32 {
	o := make([]float32, len(v))
	for i, x := range v {
		o[i] = float32(x)
	}
	return o
}

func f64s(v []float32) []float64 {
	o := make([]float64, len(v))
	for i, x := range v {
		o[i] = float64(x)
	}
	return o
}

// flat concatenates the rows of m as float32.
func flat(m [][]float64) []float32 {
	var o []float32
	for _, r := range m {
		o = append(o, f32s(r)...)
	}
	return o
}

func scanParams(w *mambaref.Weights) MambaParams {
	p := MambaParams{D: f32s(w.D), DtBias: f32s(w.DtBias)}
	for _, a := range w.ALog {
		p.A = append(p.A, float32(-math.Exp(a)))
	}
	return p
}

// exact rounds each value to what a conv state of type dt stores, so a
// reference starting from it matches the kernel's start exactly.
func exact(dt DType, v []float64) {
	for i, x := range v {
		switch dt {
		case F16:
			v[i] = float64(F16ToF32(F32ToF16(float32(x))))
		case BF16:
			v[i] = float64(BF16ToF32(F32ToBF16(float32(x))))
		default:
			v[i] = float64(float32(x))
		}
	}
}

// randomState fills a reference state with values a conv state of type dt
// holds exactly and an f32 SSM state.
func randomState(c mambaref.Config, r *rand.Rand, dt DType) *mambaref.State {
	st := mambaref.NewState(c)
	for _, row := range st.Conv {
		for i := range row {
			row[i] = 2*r.Float64() - 1
		}
		exact(dt, row)
	}
	for _, hd := range st.SSM {
		for _, row := range hd {
			for i := range row {
				row[i] = float64(float32(r.NormFloat64()))
			}
		}
	}
	return st
}

// kernelState encodes a reference state as a MambaSeq of n tokens.
func kernelState(c mambaref.Config, st *mambaref.State, dt DType, n int) MambaSeq {
	s := kernelShape(c)
	eb := map[DType]int{F32: 4, F16: 2, BF16: 2}[dt]
	q := MambaSeq{Len: n, Conv: ConvState{Type: dt, Data: make([]byte, eb*s.ConvStateLen())}, SSM: make([]float32, s.SSMStateLen())}
	for k, row := range st.Conv {
		for ch, v := range row {
			q.Conv.store(k*s.ConvDim()+ch, float32(v))
		}
	}
	P, N := c.HeadDim, c.State
	for h := range c.Heads {
		for p := range P {
			for n := range N {
				q.SSM[h*N*P+n*P+p] = float32(st.SSM[h][p][n])
			}
		}
	}
	return q
}

// checkState compares a kernel state with a reference state: conv values to
// the precision of the conv dtype (or tol, if looser), SSM values to tol
// relative to the largest reference value.
func checkState(t *testing.T, what string, c mambaref.Config, q MambaSeq, st *mambaref.State, tol float64) {
	t.Helper()
	s := kernelShape(c)
	ctol := max(tol, map[DType]float64{F32: 1e-6, F16: 1.0 / 1024, BF16: 1.0 / 128}[q.Conv.Type])
	for k, row := range st.Conv {
		for ch, want := range row {
			got := float64(q.Conv.load(k*s.ConvDim() + ch))
			if math.Abs(got-want) > ctol*(math.Abs(want)+1e-3) {
				t.Fatalf("%s: conv state [%d][%d] = %v, want %v", what, k, ch, got, want)
			}
		}
	}
	P, N := c.HeadDim, c.State
	var got, want []float64
	for h := range c.Heads {
		for p := range P {
			for n := range N {
				got = append(got, float64(q.SSM[h*N*P+n*P+p]))
				want = append(want, st.SSM[h][p][n])
			}
		}
	}
	closeTo(t, what+": ssm state", got, want, tol)
}

// closeTo fails when some |got-want| exceeds tol times the largest |want|.
func closeTo(t *testing.T, what string, got, want []float64, tol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	mag := 1e-6
	for _, w := range want {
		mag = max(mag, math.Abs(w))
	}
	worst, at := 0.0, -1
	for i := range got {
		if d := math.Abs(got[i] - want[i]); d > worst || d != d {
			worst, at = d, i
		}
	}
	if !(worst <= tol*mag) {
		t.Fatalf("%s: |diff| %.3g at %d (got %v, want %v) exceeds %.1g × max |want| %.3g", what, worst, at, got[at], want[at], tol, mag)
	}
}

// mambaCase is one random configuration.
type mambaCase struct {
	heads, headDim, groups, state, conv int
	dtMin, dtMax                        float64
}

func (m mambaCase) config(hidden int) mambaref.Config {
	c := mambaref.Config{Hidden: hidden, Heads: m.heads, HeadDim: m.headDim, Groups: m.groups, State: m.state,
		ConvKernel: m.conv, DtMin: m.dtMin, DtMax: m.dtMax, Eps: 1e-5}
	if c.DtMax == 0 {
		c.DtMax = math.Inf(1)
	}
	c.NormGroup = c.Inner() / c.Groups
	return c
}

// mambaCases cover the published shapes' ratios (head dim 64, state 128,
// several heads per group) at test sizes, and the awkward ones: head dims
// and states that are not multiples of 8, one group, an active time step
// clamp, conv kernels other than 4.
var mambaCases = []mambaCase{
	{heads: 8, headDim: 64, groups: 2, state: 32, conv: 4},
	{heads: 6, headDim: 12, groups: 3, state: 16, conv: 4, dtMin: 0.01, dtMax: 0.3},
	{heads: 4, headDim: 5, groups: 1, state: 7, conv: 3},
	{heads: 3, headDim: 40, groups: 3, state: 24, conv: 4},
	{heads: 2, headDim: 16, groups: 2, state: 16, conv: 1},
	{heads: 4, headDim: 128, groups: 4, state: 128, conv: 4},
}
