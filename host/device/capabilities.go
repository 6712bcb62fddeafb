package device

import (
	"errors"
	"fmt"

	kcpu "github.com/kvhost/kvhost/kernels/cpu"
)

// Optional kernel capabilities beyond the Llama family's Kernels. A model
// finds each by type assertion on Device.Kernels() (as it finds
// DecodeKernels) and says which architecture needs the one a device lacks;
// every device that implements one carries a compile-time guard. Semantics,
// shapes and layouts are kernels/cpu's, which the CPU device runs and the
// CUDA device's kernels are checked against (gpu-check): the doc comments
// here name the kernels/cpu function each method is.
//
// Integer arrays that stay on the device between calls (expert ids,
// offsets, token lists, slots) are Spans of 4 bytes per int32; integer side
// data the host owns (a Mamba batch's rows and slots) arrives as host
// slices read when the kernel runs, so a captured graph sees the values
// written just before its replay.

// MaxMatMuls is the most weights one MatMuls call takes (kcpu.MatMulGroupMax).
const MaxMatMuls = kcpu.MatMulGroupMax

// MatMuls multiplies one input by several weights in one kernel call — a
// layer's q, k and v projections, its gate and up — so a device splits
// their work once instead of once per weight (kcpu.Pool.MatMuls). Each
// outs[i] = x·ws[i]ᵀ over m rows is what MatMul(outs[i], x, m, ws[i])
// computes, bit for bit; len(outs) == len(ws) <= MaxMatMuls. A device
// without it gets one MatMul per weight (Step's matMuls).
type MatMuls interface {
	MatMuls(outs []Buf, x Buf, m int, ws []Weight) error
}

// Elementwise is the activations and elementwise ops of the architectures
// after Llama: Gemma's GeGLU, gpt-oss's clamped SwiGLU, Nemotron-H's
// squared ReLU, soft-capping (Gemma 2's final logits), scaling (embedding
// scales, Granite's multipliers) and the scaled residual add (Granite).
type Elementwise interface {
	// GeGLUTanh: out = gelu_tanh(gate)·up (kcpu.GeGLUTanh); equal lengths.
	GeGLUTanh(out, gate, up Buf) error
	// SwiGLUOAI: gpt-oss's clamped SwiGLU (kcpu.SwiGLUOAI); equal lengths.
	SwiGLUOAI(out, gate, up Buf, alpha, limit float32) error
	// ReLUSquare: out = max(x, 0)² (kcpu.ReLUSquare); x at least out.N.
	ReLUSquare(out, x Buf) error
	// SoftCap: x = cap·tanh(x/cap) in place (kcpu.SoftCap); cap > 0.
	SoftCap(x Buf, cap float32) error
	// Scale: x *= s in place (kcpu.Scale).
	Scale(x Buf, s float32) error
	// AddScaled: out = a + s·b (kcpu.AddScaled); a and b at least out.N.
	AddScaled(out, a, b Buf, s float32) error
}

// Router is a mixture-of-experts routing rule: kernels/cpu's, so the rule
// and its Validate are defined once for every device.
type Router = kcpu.Router

// ExpertGroups are one step's routing regrouped by expert in device memory
// (the arrays of kcpu.ExpertGroups): grouped rows Offsets[e]..Offsets[e+1]-1
// belong to expert e in token order, grouped row r carries token Tokens[r]
// with router weight Weights[r], Slots[i·K+j] is the grouped row of token
// i's j-th choice. Offsets holds Experts+1 int32, Tokens and Slots room for
// the batch's tokens × K int32, Weights as many floats.
type ExpertGroups struct {
	Experts, K             int
	Offsets, Tokens, Slots Span
	Weights                Buf
}

// Validate checks the shape and that the arrays hold n tokens.
func (g ExpertGroups) Validate(n int) error {
	switch {
	case g.Experts < 1 || g.Experts > kcpu.MaxRouterExperts || g.K < 1 || g.K > g.Experts:
		return fmt.Errorf("device: expert groups of %d experts, top %d: want 1 <= top <= experts <= %d", g.Experts, g.K, kcpu.MaxRouterExperts)
	case n < 0:
		return fmt.Errorf("device: expert groups of %d tokens", n)
	}
	for _, a := range []struct {
		name string
		s    Span
		n    int
	}{{"expert groups offsets", g.Offsets, g.Experts + 1}, {"expert groups tokens", g.Tokens, n * g.K}, {"expert groups slots", g.Slots, n * g.K}} {
		// Whole names: a concatenation here would allocate on every call.
		if err := NeedInts(a.name, a.s, a.n); err != nil {
			return err
		}
	}
	if g.Weights.N < n*g.K {
		return fmt.Errorf("device: expert group weights hold %d floats, %d tokens × top %d need %d", g.Weights.N, n, g.K, n*g.K)
	}
	return nil
}

// NeedInts checks that s holds at least n int32 values.
func NeedInts(name string, s Span, n int) error {
	if n > 0 && (s.Ptr == 0 || s.Bytes < 4*int64(n)) {
		return fmt.Errorf("device: %s holds %d bytes, %d int32 need %d", name, s.Bytes, n, 4*int64(n))
	}
	return nil
}

// Experts is mixture-of-experts execution: tokens routed, grouped by expert
// so each expert's weights are read once per step for all its tokens
// (gather, one matmul per expert over its rows, weighted scatter-add back).
type Experts interface {
	// RouteExperts routes n tokens by r (kcpu.Pool.Route): logits [n,
	// r.Experts] becomes the scores; ids (int32) and weights receive [n,
	// r.TopK]; bias is a zero Weight or r.Experts F32 values added to the
	// scores for selection only (DeepSeek-V3's e_score_correction_bias).
	RouteExperts(r Router, logits Buf, n int, bias Weight, ids Span, weights Buf) error
	// GroupExperts regroups RouteExperts' output for n tokens into g
	// (kcpu.ExpertGroups.Group: stable, token order within each expert).
	GroupExperts(ids Span, weights Buf, n int, g ExpertGroups) error
	// GatherRowsAt copies rows idx[j] of x [*, dim] to row j of out for j
	// < n, idx a device array (g.Tokens).
	GatherRowsAt(out, x Buf, dim int, idx Span, n int) error
	// ExpertMatMul multiplies each expert's grouped rows by its matrix:
	// out[r] = x[r]·W_eᵀ for the rows r of expert e (g.Offsets, read when
	// the kernel runs), where w stacks the experts' matrices (Rows =
	// g.Experts × rows per expert, Cols = x's row length; expert e is rows
	// e·w.Rows/g.Experts …, a GGUF {in, out, E} tensor as stored). x and
	// out hold n·g.K rows.
	ExpertMatMul(out, x Buf, n int, w Weight, g ExpertGroups) error
	// ScatterAdd sets out[i] = Σ_j g.Weights[s]·y[s] over s = g.Slots[i·K+j]
	// for n tokens (kcpu.Pool.ScatterAdd), adding to out with accumulate
	// (a shared expert's output already there); y is [n·K, dim] grouped.
	ScatterAdd(out, y Buf, dim int, g ExpertGroups, n int, accumulate bool) error
}

// Mamba2 is the shape of one Mamba-2 mixer: kernels/cpu's (Inner, ConvDim,
// ConvStateLen, SSMStateLen and Validate are defined there, once).
type Mamba2 = kcpu.Mamba2

// MambaStates are one layer's recurrent states in a state pool (kv.State):
// slot s's conv state (s.ConvStateLen() values of ConvType: F32, F16 or
// BF16) starts at byte s·ConvBytes of Conv, its f32 SSM state
// (s.SSMStateLen() values) at byte s·SSMBytes of SSM.
type MambaStates struct {
	Conv, SSM           Span
	ConvType            DType
	ConvBytes, SSMBytes int64
}

// Slots is the number of slots both spans hold.
func (st MambaStates) Slots() int {
	if st.ConvBytes <= 0 || st.SSMBytes <= 0 {
		return 0
	}
	return int(min(st.Conv.Bytes/st.ConvBytes, st.SSM.Bytes/st.SSMBytes))
}

// Validate checks the states hold s's per-slot state.
func (st MambaStates) Validate(s Mamba2) error {
	eb := map[DType]int64{F32: 4, F16: 2, BF16: 2}[st.ConvType]
	switch {
	case eb == 0:
		return fmt.Errorf("device: mamba conv state type %s, want f32, f16 or bf16", st.ConvType)
	case st.ConvBytes < eb*int64(s.ConvStateLen()):
		return fmt.Errorf("device: mamba conv state slot of %d bytes, %d %s values need %d", st.ConvBytes, s.ConvStateLen(), st.ConvType, eb*int64(s.ConvStateLen()))
	case st.SSMBytes < 4*int64(s.SSMStateLen()):
		return fmt.Errorf("device: mamba ssm state slot of %d bytes, %d f32 values need %d", st.SSMBytes, s.SSMStateLen(), 4*int64(s.SSMStateLen()))
	case st.Conv.Ptr == 0 || st.SSM.Ptr == 0 || st.Slots() == 0:
		return fmt.Errorf("device: mamba states hold no slot (conv %d bytes, ssm %d bytes)", st.Conv.Bytes, st.SSM.Bytes)
	}
	return nil
}

// MambaBatch lists a Mamba-2 batch's sequences: sequence q is rows
// Starts[q]..Starts[q+1] of the activations and state slot Slots[q] (one
// sequence of n rows for a prefill chunk, many of one row for decode).
// Both are host slices read when the kernel runs.
type MambaBatch struct {
	Starts []int32 // len(Slots)+1 non-decreasing row offsets from 0
	Slots  []int32
}

// Check validates the batch against slots slots and returns its rows.
func (b MambaBatch) Check(slots int) (int, error) {
	if len(b.Starts) != len(b.Slots)+1 || b.Starts[0] != 0 {
		return 0, fmt.Errorf("device: mamba batch of %d slots needs %d starts from 0, has %d", len(b.Slots), len(b.Slots)+1, len(b.Starts))
	}
	for q, sl := range b.Slots {
		if sl < 0 || int(sl) >= slots {
			return 0, fmt.Errorf("device: mamba sequence %d: state slot %d outside the pool of %d", q, sl, slots)
		}
		if b.Starts[q+1] < b.Starts[q] {
			return 0, fmt.Errorf("device: mamba sequence %d ends at row %d before it starts at %d", q, b.Starts[q+1], b.Starts[q])
		}
	}
	return int(b.Starts[len(b.Slots)]), nil
}

// MambaParams are a layer's per-head scan parameters, F32 vectors of Heads
// values: A = −exp(A_log), D, dt_bias (kcpu.MambaParams).
type MambaParams struct {
	A, D, DtBias Weight
}

// Mamba is the Mamba-2 mixer's kernels: the causal depthwise convolution
// with its rolling state, the selective scan and the gated grouped RMSNorm
// (kernels/cpu mamba.go, mamba_scan.go, mamba_norm.go). The projections
// around them are MatMuls.
type Mamba interface {
	// MambaConv: out = silu(conv(xbc) + bias) of every sequence, continuing
	// and updating its conv state (kcpu.Pool.MambaConv); w is the F32
	// [ConvDim, ConvKernel] matrix, bias a zero Weight or ConvDim values;
	// out may be xbc.
	MambaConv(s Mamba2, out, xbc Buf, w, bias Weight, st MambaStates, b MambaBatch) error
	// MambaScan: y from the convolved xbc rows and the raw dt rows,
	// continuing and updating every sequence's SSM state
	// (kcpu.Pool.MambaScan); scratch holds MambaScanScratch floats.
	MambaScan(s Mamba2, y, xbc, dt Buf, p MambaParams, st MambaStates, b MambaBatch, scratch Buf) error
	// MambaScanScratch is the scratch floats MambaScan needs for at most
	// tokens rows in at most seqs sequences (0 on a device that needs none).
	MambaScanScratch(s Mamba2, tokens, seqs int) int
	// GatedRMSNorm: out = rmsnorm(y·silu(z)) per group of group values,
	// times weight (dim values) (kcpu.Pool.GatedRMSNorm); out may alias y
	// or z.
	GatedRMSNorm(out, y, z Buf, weight Weight, rows, dim, group int, eps float32) error
}

// ErrCaptureUnsupported is what a kernel returns when it is launched during
// graph capture but cannot be captured on its device (e.g. it must read a
// device array on the host first); the model then runs that step eagerly.
var ErrCaptureUnsupported = errors.New("device: the kernel cannot be captured into a graph on this device")
