//go:build cuda

package cuda

import (
	"fmt"
	"math"

	"github.com/kvhost/kvhost/host/device"
	kcpu "github.com/kvhost/kvhost/kernels/cpu"
)

// The kernels the newer architectures need beyond device.Kernels —
// mixture-of-experts routing, grouping by expert, a gather by device-resident
// indices and the weighted scatter-add (experts.cu); the GeGLU, gpt-oss
// SwiGLU, soft-cap and scale activations (pointwise.cu) — launched with
// kernels/cpu's semantics (moe.go, moe_group.go, act.go). Like LogSoftmax
// and Argmax they are methods of the device's kernels that the device.Kernels
// seam does not carry: gpu-check finds them by type assertion and compares
// them with kernels/cpu. The seam is the architecture work's to extend
// (into device.Kernels or an optional capability interface like
// DecodeKernels).
//
// int32 arrays (expert ids, offsets, tokens, slots) are device.Spans of
// 4 bytes per value; they stay on the device between the calls (a model
// that drives one MatMul per expert must copy the offsets to the host, which
// synchronises; a device-side grouped GEMM is the later, graph-friendly
// step).

// Launch geometry shared with experts.cu.
const (
	routeThreads = 256  // ROUTE_THREADS
	groupThreads = 1024 // GROUP_THREADS
	routeMaxTopK = 64   // ROUTE_MAX_TOPK
)

// f64Arg is the launch word of a double argument.
func f64Arg(v float64) uint64 { return math.Float64bits(v) }

func needInts(name string, s device.Span, n int) error {
	if s.Ptr == 0 || s.Bytes < 4*int64(n) {
		return fmt.Errorf("cuda device: %s holds %d bytes, needs %d int32", name, s.Bytes, n)
	}
	return nil
}

// RouteExperts routes n tokens by r: logits [n, r.Experts] becomes the scores; ids
// (int32) and weights receive [n, r.TopK]; bias is an empty Buf or
// r.Experts values added to the scores for selection only.
func (k *kernels) RouteExperts(r kcpu.Router, logits device.Buf, n int, bias device.Buf, ids device.Span, weights device.Buf) error {
	if err := r.Validate(); err != nil {
		return fmt.Errorf("cuda device: %w", err)
	}
	if n < 0 {
		return fmt.Errorf("cuda device: route %d tokens", n)
	}
	if r.TopK > routeMaxTopK {
		return fmt.Errorf("cuda device: router top-k %d exceeds the kernel's %d", r.TopK, routeMaxTopK)
	}
	if err := need("router logits", logits.N, n*r.Experts); err != nil {
		return err
	}
	if err := need("router weights", weights.N, n*r.TopK); err != nil {
		return err
	}
	if err := needInts("router ids", ids, n*r.TopK); err != nil {
		return err
	}
	if bias.N != 0 {
		if err := need("router bias", bias.N, r.Experts); err != nil {
			return err
		}
	}
	if n == 0 {
		return nil
	}
	norm := 0
	if r.NormTopK {
		norm = 1
	}
	return k.d.do(func() error {
		return k.d.launch("route_f32", Dims{Grid: [3]int{n, 1, 1}, Block: [3]int{routeThreads, 1, 1}},
			ptrArg(logits.Ptr), ptrArg(bias.Ptr), ptrArg(ids.Ptr), ptrArg(weights.Ptr),
			i32Arg(r.Experts), i32Arg(r.TopK), i32Arg(int(r.Scoring)), i32Arg(r.Groups), i32Arg(r.TopKGroups),
			i32Arg(int(r.GroupScoring)), i32Arg(norm), f32Arg(r.Scale))
	})
}

// GroupExperts groups RouteExperts' output for n tokens of k choices among
// experts, exactly as kernels/cpu.ExpertGroups.Group orders it, into the
// device arrays of kernels/cpu.ExpertGroups: offsets (experts+1 int32),
// tokens and slots (n·k int32), gweights (n·k floats).
func (kn *kernels) GroupExperts(ids device.Span, weights device.Buf, n, k, experts int, offsets, tokens, slots device.Span, gweights device.Buf) error {
	nk := n * k
	if experts < 1 || experts > kcpu.MaxRouterExperts || k < 1 || k > experts || n < 0 {
		return fmt.Errorf("cuda device: group %d tokens over %d experts, top %d: want 1 <= top <= experts <= %d", n, experts, k, kcpu.MaxRouterExperts)
	}
	for _, c := range []struct {
		name string
		s    device.Span
		n    int
	}{{"ids", ids, nk}, {"offsets", offsets, experts + 1}, {"tokens", tokens, nk}, {"slots", slots, nk}} {
		if err := needInts("expert groups "+c.name, c.s, c.n); err != nil {
			return err
		}
	}
	if err := need("router weights", weights.N, nk); err != nil {
		return err
	}
	if err := need("expert group weights", gweights.N, nk); err != nil {
		return err
	}
	d := kn.d
	return d.do(func() error {
		return d.launch("group_experts", Dims{Grid: [3]int{1, 1, 1}, Block: [3]int{groupThreads, 1, 1}},
			ptrArg(ids.Ptr), ptrArg(weights.Ptr), i32Arg(nk), i32Arg(k), i32Arg(experts),
			ptrArg(offsets.Ptr), ptrArg(tokens.Ptr), ptrArg(gweights.Ptr), ptrArg(slots.Ptr))
	})
}

// GatherRowsAt copies rows idx[j] of x [*, dim] to row j of out for j < n,
// with idx a device array (GroupExperts' Tokens): device.Kernels.GatherRows
// stages host indices instead. The indices are not checked on the host.
func (k *kernels) GatherRowsAt(out, x device.Buf, dim int, idx device.Span, n int) error {
	if err := need("gather output", out.N, n*dim); err != nil {
		return err
	}
	if err := needInts("gather indices", idx, n); err != nil {
		return err
	}
	if n == 0 || dim == 0 {
		return nil
	}
	return k.d.do(func() error {
		return k.d.launch("gather_rows_f32", perRow(n, dim), ptrArg(out.Ptr), ptrArg(x.Ptr), ptrArg(idx.Ptr), i32Arg(dim))
	})
}

// ScatterAdd sets (accumulate: adds to) out[i] = Σ_j gw[s]·y[s] over s =
// slots[i*k+j] for n tokens; y is [n·k, dim] in grouped order.
func (kn *kernels) ScatterAdd(out, y device.Buf, dim int, slots device.Span, gw device.Buf, n, k int, accumulate bool) error {
	if err := need("scatter output", out.N, n*dim); err != nil {
		return err
	}
	if err := need("scatter input", y.N, n*k*dim); err != nil {
		return err
	}
	if err := need("scatter weights", gw.N, n*k); err != nil {
		return err
	}
	if err := needInts("scatter slots", slots, n*k); err != nil {
		return err
	}
	if n == 0 || dim == 0 {
		return nil
	}
	acc := 0
	if accumulate {
		acc = 1
	}
	d := kn.d
	return d.do(func() error {
		return d.launch("scatter_add_f32", perRow(n, dim), ptrArg(out.Ptr), ptrArg(y.Ptr), ptrArg(slots.Ptr), ptrArg(gw.Ptr),
			i32Arg(k), i32Arg(dim), i32Arg(acc))
	})
}

// gated launches one of the (out, gate, up) activations.
func (k *kernels) gated(name string, out, gate, up device.Buf, extra ...uint64) error {
	if gate.N != out.N || up.N != out.N {
		return fmt.Errorf("cuda device: %s of %d, %d into %d floats", name, gate.N, up.N, out.N)
	}
	if out.N == 0 {
		return nil
	}
	args := append([]uint64{ptrArg(out.Ptr), ptrArg(gate.Ptr), ptrArg(up.Ptr)}, extra...)
	args = append(args, i64Arg(int64(out.N)))
	return k.d.do(func() error { return k.d.launch(name, elementwise(out.N), args...) })
}

// GeGLUTanh: out = gelu_tanh(gate)·up.
func (k *kernels) GeGLUTanh(out, gate, up device.Buf) error {
	return k.gated("geglu_tanh_f32", out, gate, up)
}

// SwiGLUOAI: gpt-oss's clamped SwiGLU.
func (k *kernels) SwiGLUOAI(out, gate, up device.Buf, alpha, limit float32) error {
	return k.gated("swiglu_oai_f32", out, gate, up, f32Arg(alpha), f32Arg(limit))
}

// SoftCap: x = cap·tanh(x/cap); cap must be positive.
func (k *kernels) SoftCap(x device.Buf, cap float32) error {
	if !(cap > 0) {
		return fmt.Errorf("cuda device: soft cap %v must be positive", cap)
	}
	if x.N == 0 {
		return nil
	}
	return k.d.do(func() error {
		return k.d.launch("softcap_f32", elementwise(x.N), ptrArg(x.Ptr), f32Arg(-2/cap), f32Arg(cap), i64Arg(int64(x.N)))
	})
}

// Scale: x *= s.
func (k *kernels) Scale(x device.Buf, s float32) error {
	if x.N == 0 {
		return nil
	}
	return k.d.do(func() error {
		return k.d.launch("scale_f32", elementwise(x.N), ptrArg(x.Ptr), f32Arg(s), i64Arg(int64(x.N)))
	})
}
