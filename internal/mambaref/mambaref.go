// Package mambaref is a float64 reference of one Mamba-2 mixer layer (the
// Nemotron-H / Granite-4.0-H / Mamba2 "mixer"), written token by token from
// the Hugging Face modeling code's definition (NemotronHMamba2Mixer and
// GraniteMoeHybridMambaLayer torch_forward, Zamba2RMSNormGated): input
// projection split into z, xBC and dt; causal depthwise conv1d with bias and
// SiLU; the selective scan as a plain sequential recurrence; the gated,
// grouped RMSNorm (gate first); the output projection.
//
// It exists for tests: kernels/cpu checks its Mamba-2 kernels against it,
// and a model's tests can check a whole hybrid forward against a reference
// assembled from it. It shares no code with the kernels: every loop here is
// the formula, in float64, in the layouts HF uses (conv state per channel,
// SSM state [heads][head_dim][state]).
package mambaref

import (
	"fmt"
	"math"
	"math/rand/v2"
)

// Config is one mixer's shape.
type Config struct {
	Hidden     int // model width (in_proj input, out_proj output)
	Heads      int // mamba_num_heads / mamba_n_heads
	HeadDim    int // mamba_head_dim / mamba_d_head
	Groups     int // n_groups
	State      int // ssm_state_size / mamba_d_state
	ConvKernel int // conv_kernel / mamba_d_conv
	// DtMin, DtMax: time_step_limit, applied after softplus.
	DtMin, DtMax float64
	// NormGroup is the gated norm's group size: Inner()/Groups for
	// Nemotron-H, Inner() for HF Granite-4.0-H.
	NormGroup int
	Eps       float64
}

// Inner is d_inner.
func (c Config) Inner() int { return c.Heads * c.HeadDim }

// ConvDim is the convolved width, x then B then C.
func (c Config) ConvDim() int { return c.Inner() + 2*c.Groups*c.State }

// InProj is the input projection's output width: z, xBC, dt.
func (c Config) InProj() int { return c.Inner() + c.ConvDim() + c.Heads }

// Validate reports a shape the reference cannot run.
func (c Config) Validate() error {
	if c.Hidden < 1 || c.Heads < 1 || c.HeadDim < 1 || c.Groups < 1 || c.State < 1 || c.ConvKernel < 1 {
		return fmt.Errorf("mambaref: dimensions must be positive: %+v", c)
	}
	if c.Heads%c.Groups != 0 {
		return fmt.Errorf("mambaref: heads %d not a multiple of groups %d", c.Heads, c.Groups)
	}
	if c.NormGroup < 1 || c.Inner()%c.NormGroup != 0 {
		return fmt.Errorf("mambaref: norm group %d does not divide inner %d", c.NormGroup, c.Inner())
	}
	return nil
}

// Weights are one mixer's parameters in HF's shapes.
type Weights struct {
	InProj  [][]float64 // [InProj()][Hidden]: rows z, then xBC, then dt
	ConvW   [][]float64 // [ConvDim()][ConvKernel]: conv1d.weight squeezed
	ConvB   []float64   // [ConvDim()], or nil without conv bias
	ALog    []float64   // [Heads]; A = -exp(A_log)
	D       []float64   // [Heads]
	DtBias  []float64   // [Heads]
	NormW   []float64   // [Inner()]
	OutProj [][]float64 // [Hidden][Inner()]
}

// State is one sequence's recurrent state.
type State struct {
	Conv [][]float64   // [ConvKernel-1][ConvDim()]: the last inputs, oldest first
	SSM  [][][]float64 // [Heads][HeadDim][State]
}

// NewState returns a zero state (a fresh sequence).
func NewState(c Config) *State {
	s := &State{Conv: make([][]float64, c.ConvKernel-1), SSM: make([][][]float64, c.Heads)}
	for k := range s.Conv {
		s.Conv[k] = make([]float64, c.ConvDim())
	}
	for h := range s.SSM {
		s.SSM[h] = make([][]float64, c.HeadDim)
		for p := range s.SSM[h] {
			s.SSM[h][p] = make([]float64, c.State)
		}
	}
	return s
}

// Clone deep-copies the state.
func (s *State) Clone() *State {
	o := &State{Conv: make([][]float64, len(s.Conv)), SSM: make([][][]float64, len(s.SSM))}
	for k, r := range s.Conv {
		o.Conv[k] = append([]float64(nil), r...)
	}
	for h, hd := range s.SSM {
		o.SSM[h] = make([][]float64, len(hd))
		for p, r := range hd {
			o.SSM[h][p] = append([]float64(nil), r...)
		}
	}
	return o
}

func silu(v float64) float64 { return v / (1 + math.Exp(-v)) }

func softplus(v float64) float64 {
	if v > 20 { // torch.nn.functional.softplus threshold
		return v
	}
	return math.Log1p(math.Exp(v))
}

// ConvStep convolves one token's xBC row against the state and returns
// silu(conv + bias); the state then holds this token as its newest input.
func ConvStep(c Config, w *Weights, st *State, xbc []float64) []float64 {
	K := c.ConvKernel
	out := make([]float64, c.ConvDim())
	for ch := range out {
		acc := 0.0
		if w.ConvB != nil {
			acc = w.ConvB[ch]
		}
		for k := range K - 1 {
			acc += w.ConvW[ch][k] * st.Conv[k][ch]
		}
		acc += w.ConvW[ch][K-1] * xbc[ch]
		out[ch] = silu(acc)
	}
	if K > 1 {
		first := st.Conv[0]
		copy(st.Conv, st.Conv[1:])
		st.Conv[K-2] = first
		copy(first, xbc)
	}
	return out
}

// Dt is the time step of head h for a raw dt value: the clamped softplus of
// raw + dt_bias.
func Dt(c Config, w *Weights, h int, raw float64) float64 {
	return min(max(softplus(raw+w.DtBias[h]), c.DtMin), c.DtMax)
}

// ScanStep advances the SSM state by one token and returns y (Inner()
// values, the D skip included): u is the convolved xBC row, dt the raw dt
// row.
func ScanStep(c Config, w *Weights, st *State, u, dt []float64) []float64 {
	P, N := c.HeadDim, c.State
	y := make([]float64, c.Inner())
	for h := range c.Heads {
		g := h / (c.Heads / c.Groups)
		B := u[c.Inner()+g*N : c.Inner()+(g+1)*N]
		C := u[c.Inner()+c.Groups*N+g*N : c.Inner()+c.Groups*N+(g+1)*N]
		d := Dt(c, w, h, dt[h])
		a := math.Exp(d * -math.Exp(w.ALog[h]))
		for p := range P {
			x := u[h*P+p]
			row := st.SSM[h][p]
			acc := 0.0
			for n := range N {
				row[n] = row[n]*a + d*B[n]*x
				acc += C[n] * row[n]
			}
			y[h*P+p] = acc + w.D[h]*x
		}
	}
	return y
}

// GatedNorm is the gated RMSNorm: g = y·silu(z), normalised per NormGroup
// values, times NormW.
func GatedNorm(c Config, w *Weights, y, z []float64) []float64 {
	out := make([]float64, len(y))
	for i := range y {
		out[i] = y[i] * silu(z[i])
	}
	for g0 := 0; g0 < len(out); g0 += c.NormGroup {
		ss := 0.0
		for _, v := range out[g0 : g0+c.NormGroup] {
			ss += v * v
		}
		sc := 1 / math.Sqrt(ss/float64(c.NormGroup)+c.Eps)
		for i := g0; i < g0+c.NormGroup; i++ {
			out[i] *= sc * w.NormW[i]
		}
	}
	return out
}

// MatVec returns m·x.
func MatVec(m [][]float64, x []float64) []float64 {
	out := make([]float64, len(m))
	for i, row := range m {
		acc := 0.0
		for j, v := range row {
			acc += v * x[j]
		}
		out[i] = acc
	}
	return out
}

// Forward runs the mixer over hidden rows (one per token, Hidden values)
// from state st, which it advances, and returns the output rows.
func Forward(c Config, w *Weights, st *State, hidden [][]float64) [][]float64 {
	out := make([][]float64, len(hidden))
	for t, x := range hidden {
		proj := MatVec(w.InProj, x)
		z := proj[:c.Inner()]
		xbc := proj[c.Inner() : c.Inner()+c.ConvDim()]
		dt := proj[c.Inner()+c.ConvDim():]
		u := ConvStep(c, w, st, xbc)
		y := ScanStep(c, w, st, u, dt)
		out[t] = MatVec(w.OutProj, GatedNorm(c, w, y, z))
	}
	return out
}

// RandomWeights draws weights of realistic magnitudes: projections
// ~U(±1/sqrt(fan-in)), A_log = log U(1, 16), dt_bias the inverse softplus
// of a time step in [0.001, 0.1] (HF's initialisation), D ~U(0.5, 1.5),
// norm weights ~U(0.5, 1.5); convBias false leaves ConvB nil.
func RandomWeights(c Config, r *rand.Rand, convBias bool) *Weights {
	mat := func(rows, cols int, scale float64) [][]float64 {
		m := make([][]float64, rows)
		for i := range m {
			m[i] = make([]float64, cols)
			for j := range m[i] {
				m[i][j] = (2*r.Float64() - 1) * scale
			}
		}
		return m
	}
	vec := func(n int, lo, hi float64) []float64 {
		v := make([]float64, n)
		for i := range v {
			v[i] = lo + (hi-lo)*r.Float64()
		}
		return v
	}
	w := &Weights{
		InProj:  mat(c.InProj(), c.Hidden, 1/math.Sqrt(float64(c.Hidden))),
		ConvW:   mat(c.ConvDim(), c.ConvKernel, 1/math.Sqrt(float64(c.ConvKernel))),
		D:       vec(c.Heads, 0.5, 1.5),
		NormW:   vec(c.Inner(), 0.5, 1.5),
		OutProj: mat(c.Hidden, c.Inner(), 1/math.Sqrt(float64(c.Inner()))),
	}
	if convBias {
		w.ConvB = vec(c.ConvDim(), -0.5, 0.5)
	}
	w.ALog = make([]float64, c.Heads)
	w.DtBias = make([]float64, c.Heads)
	for h := range c.Heads {
		w.ALog[h] = math.Log(1 + 15*r.Float64())
		dt := math.Exp(math.Log(0.001) + r.Float64()*(math.Log(0.1)-math.Log(0.001)))
		w.DtBias[h] = dt + math.Log(-math.Expm1(-dt)) // inverse softplus
	}
	return w
}
