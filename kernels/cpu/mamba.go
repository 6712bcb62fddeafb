package cpu

import (
	"fmt"
	"math"
)

// Mamba-2 mixer kernels (Nemotron-H, Granite-4.0-H, Mamba2): the causal
// depthwise convolution with its rolling state (this file), the selective
// state-space scan (mamba_scan.go) and the grouped gated RMSNorm
// (mamba_norm.go). The input projection and the output projection are plain
// MatMuls; docs/architectures/mamba2-hybrids.md gives the whole layer.
//
// Layouts (row-major, f32 unless said):
//
//   - xbc: one row of ConvDim() values per token, the xBC part of the input
//     projection: x in [0, Inner()) (head h at h·HeadDim), B in
//     [Inner(), Inner()+Groups·State) (group g at g·State), C in the next
//     Groups·State values. Head h reads group h / (Heads/Groups).
//   - dt: one row of Heads raw values per token (before dt_bias and
//     softplus). z (the gate) is a row of Inner() values per token.
//   - y: one row of Inner() values per token.
//   - Conv state: ConvKernel-1 rows of ConvDim values, oldest first: the
//     last inputs the convolution saw. F32, F16 or BF16 (SGLang keeps it in
//     the model dtype). Token-major, where SGLang and llama.cpp keep the
//     transpose (conv_dim, kernel-1); the bytes per slot are the same.
//   - SSM state: per head a State × HeadDim block ([Heads][State][HeadDim]),
//     f32. SGLang's temporal state is (heads, head_dim, state): same bytes,
//     transposed inside a head so that every update runs along HeadDim
//     without horizontal sums.
//
// A batch is a list of sequences (MambaSeq), each a run of consecutive token
// rows with its own states: one sequence of n tokens for a prefill chunk,
// many sequences of one token for a decode step, or a mix.

// MaxConvKernel bounds Mamba2.ConvKernel (every published model uses 4).
const MaxConvKernel = 8

// Mamba2 is the shape of one Mamba-2 mixer as its kernels see it.
type Mamba2 struct {
	Heads      int // SSM heads (GGUF ssm.time_step_rank, HF mamba_num_heads / mamba_n_heads)
	HeadDim    int // values per head (HF mamba_head_dim / mamba_d_head)
	Groups     int // B/C groups shared by Heads/Groups heads each (HF n_groups)
	State      int // d_state (GGUF ssm.state_size)
	ConvKernel int // d_conv (GGUF ssm.conv_kernel)
	// DtMin and DtMax clamp dt after softplus: HF time_step_limit, whose
	// default (0, +Inf) leaves it alone.
	DtMin, DtMax float32
}

// Inner is d_inner = Heads·HeadDim.
func (s Mamba2) Inner() int { return s.Heads * s.HeadDim }

// ConvDim is the number of convolved channels: Inner()+2·Groups·State.
func (s Mamba2) ConvDim() int { return s.Inner() + 2*s.Groups*s.State }

// ConvStateLen is the number of values in one sequence's conv state.
func (s Mamba2) ConvStateLen() int { return (s.ConvKernel - 1) * s.ConvDim() }

// SSMStateLen is the number of f32 values in one sequence's SSM state.
func (s Mamba2) SSMStateLen() int { return s.Heads * s.State * s.HeadDim }

// maxMambaDim bounds every dimension so that products of them fit an int32
// index on the GPU and a hostile config cannot ask for absurd buffers.
const maxMambaDim = 1 << 16

// Validate reports the first field out of range.
func (s Mamba2) Validate() error {
	for _, f := range []struct {
		name string
		v    int
	}{{"heads", s.Heads}, {"head dim", s.HeadDim}, {"groups", s.Groups}, {"state", s.State}} {
		if f.v < 1 || f.v > maxMambaDim {
			return fmt.Errorf("cpu: mamba2: %s %d out of range [1, %d]: %w", f.name, f.v, maxMambaDim, ErrShape)
		}
	}
	if s.Heads%s.Groups != 0 {
		return fmt.Errorf("cpu: mamba2: heads %d not a multiple of groups %d: %w", s.Heads, s.Groups, ErrShape)
	}
	if s.ConvKernel < 1 || s.ConvKernel > MaxConvKernel {
		return fmt.Errorf("cpu: mamba2: conv kernel %d out of range [1, %d]: %w", s.ConvKernel, MaxConvKernel, ErrShape)
	}
	if int64(s.Heads)*int64(s.HeadDim)*int64(s.State) > math.MaxInt32 || s.ConvDim() > 1<<24 {
		return fmt.Errorf("cpu: mamba2: heads %d × head dim %d × state %d too large: %w", s.Heads, s.HeadDim, s.State, ErrShape)
	}
	if !(s.DtMin >= 0) || !(s.DtMax > 0) || s.DtMin > s.DtMax {
		return fmt.Errorf("cpu: mamba2: time step limit [%g, %g] must satisfy 0 <= min <= max, max > 0: %w", s.DtMin, s.DtMax, ErrShape)
	}
	return nil
}

func (s Mamba2) mustValid(what string) {
	if err := s.Validate(); err != nil {
		panic(fmt.Sprintf("cpu: %s: %v", what, err))
	}
}

// ConvState is one sequence's rolling conv input state: ConvKernel-1 rows of
// ConvDim values, oldest first, stored as Type (F32, F16 or BF16).
type ConvState struct {
	Type DType
	Data []byte
}

func (c ConvState) elemBytes() int {
	switch c.Type {
	case F32:
		return 4
	case F16, BF16:
		return 2
	}
	return 0
}

func (c ConvState) load(i int) float32 {
	switch c.Type {
	case F32:
		return math.Float32frombits(uint32(c.Data[4*i]) | uint32(c.Data[4*i+1])<<8 | uint32(c.Data[4*i+2])<<16 | uint32(c.Data[4*i+3])<<24)
	case F16:
		return F16ToF32(uint16(c.Data[2*i]) | uint16(c.Data[2*i+1])<<8)
	default:
		return BF16ToF32(uint16(c.Data[2*i]) | uint16(c.Data[2*i+1])<<8)
	}
}

func (c ConvState) store(i int, v float32) {
	switch c.Type {
	case F32:
		b := math.Float32bits(v)
		c.Data[4*i], c.Data[4*i+1], c.Data[4*i+2], c.Data[4*i+3] = byte(b), byte(b>>8), byte(b>>16), byte(b>>24)
	case F16:
		h := F32ToF16(v)
		c.Data[2*i], c.Data[2*i+1] = byte(h), byte(h>>8)
	default:
		h := F32ToBF16(v)
		c.Data[2*i], c.Data[2*i+1] = byte(h), byte(h>>8)
	}
}

// MambaSeq is one sequence of a Mamba-2 batch: Len consecutive token rows
// (after the previous sequence's) and the states they continue from, which
// the kernels update in place. Len 0 leaves the states alone.
type MambaSeq struct {
	Len  int
	Conv ConvState
	SSM  []float32 // SSMStateLen() values
}

// checkSeqs panics on a batch that does not fit s and returns its rows.
func checkSeqs(what string, s Mamba2, seqs []MambaSeq, needConv, needSSM bool) int {
	rows := 0
	for i, q := range seqs {
		if q.Len < 0 {
			panic(fmt.Sprintf("cpu: %s: sequence %d has length %d", what, i, q.Len))
		}
		rows += q.Len
		if needConv {
			eb := q.Conv.elemBytes()
			if eb == 0 {
				panic(fmt.Sprintf("cpu: %s: sequence %d: conv state type %s, want f32, f16 or bf16", what, i, q.Conv.Type))
			}
			if len(q.Conv.Data) < eb*s.ConvStateLen() {
				panic(fmt.Sprintf("cpu: %s: sequence %d: conv state has %d bytes, needs %d", what, i, len(q.Conv.Data), eb*s.ConvStateLen()))
			}
		}
		if needSSM && len(q.SSM) < s.SSMStateLen() {
			panic(fmt.Sprintf("cpu: %s: sequence %d: ssm state has %d floats, needs %d", what, i, len(q.SSM), s.SSMStateLen()))
		}
	}
	return rows
}

// convBlock is the number of channels of one conv work item.
const convBlock = 256

// MambaConv runs the causal depthwise convolution of every sequence:
// out[t][c] = silu(bias[c] + Σ_k w[c][k]·u[t+k][c]) where u is the
// sequence's conv state rows followed by its xbc rows, and leaves the last
// ConvKernel-1 rows of u in the state. w is [ConvDim][ConvKernel] (GGUF
// ssm_conv1d, HF conv1d.weight squeezed), bias is ConvDim values or nil
// (use_conv_bias false). out may be xbc itself (exactly, not overlapping
// otherwise).
func (p *Pool) MambaConv(s Mamba2, out, xbc, w, bias []float32, seqs []MambaSeq) {
	s.mustValid("mamba conv")
	rows := checkSeqs("mamba conv", s, seqs, true, false)
	C := s.ConvDim()
	if len(xbc) < rows*C || len(out) < rows*C || len(w) < C*s.ConvKernel || (bias != nil && len(bias) < C) {
		panic(fmt.Sprintf("cpu: mamba conv: %d rows of %d channels: xbc has %d floats, out %d, weights %d (need %d), bias %d",
			rows, C, len(xbc), len(out), len(w), C*s.ConvKernel, len(bias)))
	}
	if rows == 0 {
		return
	}
	blocks := (C + convBlock - 1) / convBlock
	if p == nil {
		t := mambaTask{s: s, out: out, xbc: xbc, w: w, bias: bias}
		row := 0
		for _, q := range seqs {
			for b := range blocks {
				t.convBlock(q, row, b)
			}
			row += q.Len
		}
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	t := &p.mb
	t.initConv(s, out, xbc, w, bias, seqs, blocks)
	p.run(t)
	t.release()
}

// convRange convolves channels [c0, c1) of n token rows starting at row0.
func convRange(s Mamba2, out, xbc, w, bias []float32, st ConvState, row0, n, c0, c1 int) {
	C, K := s.ConvDim(), s.ConvKernel
	c := c0
	if K == 4 {
		c = conv4Vec(s, out, xbc, w, bias, st, row0, n, c0, c1)
	}
	for ; c < c1; c++ {
		var win [MaxConvKernel]float32
		for k := range K - 1 {
			win[k] = st.load(k*C + c)
		}
		wc := w[c*K : c*K+K]
		b := float32(0)
		if bias != nil {
			b = bias[c]
		}
		for t := range n {
			i := (row0+t)*C + c
			v := xbc[i]
			acc := b
			for k := range K - 1 {
				acc += wc[k] * win[k]
			}
			acc += wc[K-1] * v
			if K > 1 {
				copy(win[:K-2], win[1:K-1])
				win[K-2] = v
			}
			out[i] = acc
		}
		for k := range K - 1 {
			st.store(k*C+c, win[k])
		}
	}
	for t := range n {
		siluInPlace(out[(row0+t)*C+c0 : (row0+t)*C+c1])
	}
}

// ones feeds siluMulVec's up operand so that it computes a plain SiLU.
var ones = func() (o [64]float32) {
	for i := range o {
		o[i] = 1
	}
	return
}()

// siluInPlace replaces x by x·sigmoid(x).
func siluInPlace(x []float32) {
	for len(x) >= 8 {
		k := min(len(x), len(ones))
		n := siluMulVec(x[:k], x[:k], ones[:k])
		if n == 0 {
			break
		}
		x = x[n:]
	}
	for len(x) > 0 {
		k := min(len(x), len(ones))
		siluMulGo(x[:k], x[:k], ones[:k])
		x = x[k:]
	}
}

// ReLUSquare sets out = max(x, 0)² elementwise over len(out) (Nemotron-H's
// MLP activation, HF "relu2"); out may alias x.
func ReLUSquare(out, x []float32) {
	x = x[:len(out)]
	for i, v := range x {
		if v > 0 {
			out[i] = v * v
		} else {
			out[i] = 0
		}
	}
}

// AddScaled sets out = a + s·b elementwise over len(out) (Granite's
// residual: hidden + residual_multiplier·block(hidden)); out may alias a or b.
func AddScaled(out, a, b []float32, s float32) {
	a, b = a[:len(out)], b[:len(out)]
	for i := range out {
		out[i] = a[i] + s*b[i]
	}
}
