//go:build cuda

package cuda

import (
	"fmt"
	"math"
	"unsafe"

	"github.com/kvhost/kvhost/host/device"
)

// The device's optional capabilities for the architectures after Llama
// (host/device/capabilities.go): mixture-of-experts routing, grouping by
// expert, a gather by device-resident indices, the grouped expert matmul and
// the weighted scatter-add (experts.cu); the GeGLU, gpt-oss SwiGLU, soft-cap
// and scale activations (pointwise.cu; relu², add-scaled and the Mamba-2
// kernels are in mamba.go), launched with kernels/cpu's semantics (moe.go,
// moe_group.go, act.go), which gpu-check compares them with.

var (
	_ device.Elementwise = (*kernels)(nil)
	_ device.Experts     = (*kernels)(nil)
)

// Launch geometry shared with experts.cu.
const (
	routeThreads = 256  // ROUTE_THREADS
	groupThreads = 1024 // GROUP_THREADS
	routeMaxTopK = 64   // ROUTE_MAX_TOPK
)

// f64Arg is the launch word of a double argument.
func f64Arg(v float64) uint64 { return math.Float64bits(v) }

func needInts(name string, s device.Span, n int) error {
	if err := device.NeedInts(name, s, n); err != nil {
		return fmt.Errorf("cuda device: %w", err)
	}
	return nil
}

// RouteExperts routes n tokens by r: logits [n, r.Experts] becomes the scores; ids
// (int32) and weights receive [n, r.TopK]; bias is a zero Weight or
// r.Experts F32 values added to the scores for selection only.
func (k *kernels) RouteExperts(r device.Router, logits device.Buf, n int, bias device.Weight, ids device.Span, weights device.Buf) error {
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
	if bias.Ptr != 0 {
		if err := vector(bias); err != nil {
			return err
		}
		if err := need("router bias", bias.Cols, r.Experts); err != nil {
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

// GroupExperts groups RouteExperts' output for n tokens into g's device
// arrays, exactly as kernels/cpu.ExpertGroups.Group orders it.
func (kn *kernels) GroupExperts(ids device.Span, weights device.Buf, n int, g device.ExpertGroups) error {
	if err := g.Validate(n); err != nil {
		return fmt.Errorf("cuda device: %w", err)
	}
	nk := n * g.K
	if err := needInts("router ids", ids, nk); err != nil {
		return err
	}
	if err := need("router weights", weights.N, nk); err != nil {
		return err
	}
	d := kn.d
	return d.do(func() error {
		return d.launch("group_experts", Dims{Grid: [3]int{1, 1, 1}, Block: [3]int{groupThreads, 1, 1}},
			ptrArg(ids.Ptr), ptrArg(weights.Ptr), i32Arg(nk), i32Arg(g.K), i32Arg(g.Experts),
			ptrArg(g.Offsets.Ptr), ptrArg(g.Tokens.Ptr), ptrArg(g.Weights.Ptr), ptrArg(g.Slots.Ptr))
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

// ExpertMatMul multiplies each expert's grouped rows by its slice of the
// stacked w. No grouped GEMM kernel exists yet, so it reads g.Offsets on
// the host (a synchronising copy) and runs one MatMul per expert with rows:
// correct eagerly, but not capturable (a graph would bake one step's
// routing in), which it says with device.ErrCaptureUnsupported.
func (kn *kernels) ExpertMatMul(out, x device.Buf, n int, w device.Weight, g device.ExpertGroups) error {
	if err := g.Validate(n); err != nil {
		return fmt.Errorf("cuda device: %w", err)
	}
	if w.Rows%g.Experts != 0 {
		return fmt.Errorf("cuda device: expert matmul: %d weight rows do not split over %d experts", w.Rows, g.Experts)
	}
	rb, err := rowBytes(w)
	if err != nil {
		return err
	}
	rows, per := n*g.K, w.Rows/g.Experts
	if err := need("expert matmul output", out.N, rows*per); err != nil {
		return err
	}
	if err := need("expert matmul input", x.N, rows*w.Cols); err != nil {
		return err
	}
	d := kn.d
	return d.do(func() error {
		if d.mode != modeEager {
			return fmt.Errorf("cuda device: expert matmul reads the routing on the host: %w", device.ErrCaptureUnsupported)
		}
		off := make([]int32, g.Experts+1)
		if err := dtohSync(unsafe.Pointer(&off[0]), uintptr(g.Offsets.Ptr), int64(4*len(off)), d.st); err != nil {
			return err
		}
		for e := range g.Experts {
			lo, hi := int(off[e]), int(off[e+1])
			if lo < 0 || hi > rows || lo > hi {
				return fmt.Errorf("cuda device: expert %d rows [%d, %d) outside the %d grouped rows", e, lo, hi, rows)
			}
			if hi == lo {
				continue
			}
			sub := device.Weight{Ptr: w.Ptr + device.Ptr(e*per*rb), Type: w.Type, Rows: per, Cols: w.Cols, Bytes: int64(per * rb)}
			if err := kn.MatMul(out.Slice(lo*per, (hi-lo)*per), x.Slice(lo*w.Cols, (hi-lo)*w.Cols), hi-lo, sub); err != nil {
				return err
			}
		}
		return nil
	})
}

// ScatterAdd sets (accumulate: adds to) out[i] = Σ_j g.Weights[s]·y[s]
// over s = g.Slots[i·K+j] for n tokens; y is [n·K, dim] in grouped order.
func (kn *kernels) ScatterAdd(out, y device.Buf, dim int, g device.ExpertGroups, n int, accumulate bool) error {
	if err := g.Validate(n); err != nil {
		return fmt.Errorf("cuda device: %w", err)
	}
	k := g.K
	if err := need("scatter output", out.N, n*dim); err != nil {
		return err
	}
	if err := need("scatter input", y.N, n*k*dim); err != nil {
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
		return d.launch("scatter_add_f32", perRow(n, dim), ptrArg(out.Ptr), ptrArg(y.Ptr), ptrArg(g.Slots.Ptr), ptrArg(g.Weights.Ptr),
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
