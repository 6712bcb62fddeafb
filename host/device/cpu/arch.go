package cpu

import (
	"fmt"
	"unsafe"

	"github.com/kvhost/kvhost/host/device"
	kcpu "github.com/kvhost/kvhost/kernels/cpu"
)

// The optional capabilities (host/device/capabilities.go) on kernels/cpu:
// elementwise ops, mixture-of-experts routing and grouped execution, and
// the Mamba-2 mixer (mamba.go). Every method checks its spans and shapes
// first and returns an error naming what is wrong, so the kernels, which
// panic on malformed input, only ever see valid calls.

var (
	_ device.Elementwise = (*kernels)(nil)
	_ device.MatMuls     = (*kernels)(nil)
	_ device.Experts     = (*kernels)(nil)
)

// archState is what the capability kernels keep between calls: one
// kcpu.ExpertGroups per shape (repointed at each call's device arrays) and
// the Mamba batch's sequence list.
type archState struct {
	groups map[[2]int]*kcpu.ExpertGroups
	mseqs  []kcpu.MambaSeq
}

// sameLen checks that the operands of an elementwise op have out's length.
func sameLen(name string, out device.Buf, in ...device.Buf) error {
	for _, b := range in {
		if b.N != out.N {
			return fmt.Errorf("cpu device: %s of %d floats into %d", name, b.N, out.N)
		}
	}
	return nil
}

func (k *kernels) gated(name string, out, gate, up device.Buf, f func(o, g, u []float32)) error {
	o, g, u, err := k.gatedArgs(name, out, gate, up)
	if err != nil {
		return err
	}
	if k.d.capturing {
		return k.record(func() { f(o, g, u) })
	}
	f(o, g, u)
	return nil
}

// gatedArgs checks and maps a gated activation's buffers.
func (k *kernels) gatedArgs(name string, out, gate, up device.Buf) (o, g, u []float32, err error) {
	if err = sameLen(name, out, gate, up); err != nil {
		return nil, nil, nil, err
	}
	if o, err = k.f32(out); err != nil {
		return nil, nil, nil, err
	}
	if g, err = k.f32(gate); err != nil {
		return nil, nil, nil, err
	}
	if u, err = k.f32(up); err != nil {
		return nil, nil, nil, err
	}
	return o, g, u, nil
}

func (k *kernels) GeGLUTanh(out, gate, up device.Buf) error {
	return k.gated("geglu", out, gate, up, kcpu.GeGLUTanh)
}

func (k *kernels) SwiGLUOAI(out, gate, up device.Buf, alpha, limit float32) error {
	if !(limit > 0) || alpha != alpha {
		return fmt.Errorf("cpu device: swiglu-oai limit %v must be positive and alpha %v a number", limit, alpha)
	}
	o, g, u, err := k.gatedArgs("swiglu-oai", out, gate, up)
	if err != nil {
		return err
	}
	// The closure over alpha and limit is built only when recording: built
	// eagerly (gated's f), it would allocate on every call.
	if k.d.capturing {
		return k.record(func() { kcpu.SwiGLUOAI(o, g, u, alpha, limit) })
	}
	kcpu.SwiGLUOAI(o, g, u, alpha, limit)
	return nil
}

func (k *kernels) ReLUSquare(out, x device.Buf) error {
	if x.N < out.N {
		return fmt.Errorf("cpu device: relu² of %d floats into %d", x.N, out.N)
	}
	o, err := k.f32(out)
	if err != nil {
		return err
	}
	xs, err := k.f32(x)
	if err != nil {
		return err
	}
	if k.d.capturing {
		return k.record(func() { kcpu.ReLUSquare(o, xs) })
	}
	kcpu.ReLUSquare(o, xs)
	return nil
}

func (k *kernels) SoftCap(x device.Buf, cap float32) error {
	if !(cap > 0) {
		return fmt.Errorf("cpu device: soft cap %v must be positive", cap)
	}
	xs, err := k.f32(x)
	if err != nil {
		return err
	}
	if k.d.capturing {
		return k.record(func() { kcpu.SoftCap(xs, cap) })
	}
	kcpu.SoftCap(xs, cap)
	return nil
}

func (k *kernels) Scale(x device.Buf, s float32) error {
	xs, err := k.f32(x)
	if err != nil {
		return err
	}
	if k.d.capturing {
		return k.record(func() { kcpu.Scale(xs, s) })
	}
	kcpu.Scale(xs, s)
	return nil
}

func (k *kernels) AddScaled(out, a, b device.Buf, s float32) error {
	if a.N < out.N || b.N < out.N {
		return fmt.Errorf("cpu device: add-scaled of %d, %d into %d floats", a.N, b.N, out.N)
	}
	o, err := k.f32(out)
	if err != nil {
		return err
	}
	as, err := k.f32(a)
	if err != nil {
		return err
	}
	bs, err := k.f32(b)
	if err != nil {
		return err
	}
	if k.d.capturing {
		return k.record(func() { kcpu.AddScaled(o, as, bs, s) })
	}
	kcpu.AddScaled(o, as, bs, s)
	return nil
}

// ints resolves n int32 values at s to a host view.
func (k *kernels) ints(name string, s device.Span, n int) ([]int32, error) {
	if err := device.NeedInts(name, s, n); err != nil {
		return nil, fmt.Errorf("cpu device: %w", err)
	}
	if n == 0 {
		return nil, nil
	}
	raw, err := k.d.mem.bytes(s.Ptr, 4*int64(n))
	if err != nil {
		return nil, err
	}
	if uintptr(unsafe.Pointer(&raw[0]))%4 != 0 {
		return nil, fmt.Errorf("cpu device: int32 span at %#x is misaligned", uintptr(s.Ptr))
	}
	return unsafe.Slice((*int32)(unsafe.Pointer(&raw[0])), n), nil
}

// f32Weight resolves an F32 weight of at least n values (a vector, or a
// matrix read as its rows one after another) to a host view.
func (k *kernels) f32Weight(name string, w device.Weight, n int) ([]float32, error) {
	if w.Type != device.F32 || w.Ptr == 0 || int64(w.Rows)*int64(w.Cols) < int64(n) || w.Bytes < 4*int64(n) {
		return nil, fmt.Errorf("cpu device: %s must be f32 with %d values, got %s %dx%d (%d bytes)", name, n, w.Type, w.Rows, w.Cols, w.Bytes)
	}
	return k.f32(device.Buf{Ptr: w.Ptr, N: n})
}

func (k *kernels) RouteExperts(r device.Router, logits device.Buf, n int, bias device.Weight, ids device.Span, weights device.Buf) error {
	if err := r.Validate(); err != nil {
		return fmt.Errorf("cpu device: %w", err)
	}
	if n < 0 {
		return fmt.Errorf("cpu device: route %d tokens", n)
	}
	if err := need("router logits", logits.N, n*r.Experts); err != nil {
		return err
	}
	if err := need("router weights", weights.N, n*r.TopK); err != nil {
		return err
	}
	lg, err := k.f32(logits)
	if err != nil {
		return err
	}
	ws, err := k.f32(weights)
	if err != nil {
		return err
	}
	is, err := k.ints("router ids", ids, n*r.TopK)
	if err != nil {
		return err
	}
	var b []float32
	if bias.Ptr != 0 {
		if b, err = k.f32Weight("router bias", bias, r.Experts); err != nil {
			return err
		}
	}
	if k.d.capturing {
		return k.record(func() { k.d.pool.Route(r, lg, n, b, is, ws) })
	}
	k.d.pool.Route(r, lg, n, b, is, ws)
	return nil
}

// groupsView is g's arrays as host views in a kcpu.ExpertGroups.
type groupsView struct {
	offsets, tokens, slots []int32
	weights                []float32
}

func (k *kernels) groupsOf(g device.ExpertGroups, n int) (groupsView, error) {
	if err := g.Validate(n); err != nil {
		return groupsView{}, fmt.Errorf("cpu device: %w", err)
	}
	var v groupsView
	var err error
	if v.offsets, err = k.ints("expert offsets", g.Offsets, g.Experts+1); err != nil {
		return v, err
	}
	if v.tokens, err = k.ints("expert tokens", g.Tokens, n*g.K); err != nil {
		return v, err
	}
	if v.slots, err = k.ints("expert slots", g.Slots, n*g.K); err != nil {
		return v, err
	}
	v.weights, err = k.f32(device.Buf{Ptr: g.Weights.Ptr, N: n * g.K})
	return v, err
}

// expertGroups returns a kcpu.ExpertGroups over v (one per shape, reused:
// only its cursor is its own; the launch runs on the device goroutine).
func (k *kernels) expertGroups(experts, topK int, v groupsView, n int) *kcpu.ExpertGroups {
	key := [2]int{experts, topK}
	g := k.arch.groups[key]
	if g == nil {
		if k.arch.groups == nil {
			k.arch.groups = map[[2]int]*kcpu.ExpertGroups{}
		}
		g = kcpu.NewExpertGroups(experts, topK, 0)
		k.arch.groups[key] = g
	}
	g.Offsets, g.Tokens, g.Slots, g.Weights, g.N = v.offsets, v.tokens, v.slots, v.weights, n
	return g
}

func (k *kernels) GroupExperts(ids device.Span, weights device.Buf, n int, g device.ExpertGroups) error {
	v, err := k.groupsOf(g, n)
	if err != nil {
		return err
	}
	is, err := k.ints("router ids", ids, n*g.K)
	if err != nil {
		return err
	}
	if err := need("router weights", weights.N, n*g.K); err != nil {
		return err
	}
	ws, err := k.f32(weights)
	if err != nil {
		return err
	}
	if !k.d.capturing {
		// Eagerly, an expert id out of range is the caller's error.
		if err := k.expertGroups(g.Experts, g.K, v, n).Group(is, ws, n); err != nil {
			return fmt.Errorf("cpu device: %w", err)
		}
		return nil
	}
	return k.record(func() {
		// Replayed ids come from RouteExperts, so always in range.
		if err := k.expertGroups(g.Experts, g.K, v, n).Group(is, ws, n); err != nil {
			panic(fmt.Sprintf("cpu device: replayed expert grouping: %v", err))
		}
	})
}

func (k *kernels) GatherRowsAt(out, x device.Buf, dim int, idx device.Span, n int) error {
	if dim < 0 || n < 0 {
		return fmt.Errorf("cpu device: gather %d rows of %d", n, dim)
	}
	if err := need("gather output", out.N, n*dim); err != nil {
		return err
	}
	o, err := k.f32(out)
	if err != nil {
		return err
	}
	xs, err := k.f32(x)
	if err != nil {
		return err
	}
	is, err := k.ints("gather indices", idx, n)
	if err != nil {
		return err
	}
	if !k.d.capturing {
		return gatherAt(o, xs, dim, is)
	}
	return k.record(func() {
		if err := gatherAt(o, xs, dim, is); err != nil {
			panic(err.Error()) // replayed indices come from GroupExperts
		}
	})
}

// gatherAt copies rows idx[j] of xs to row j of o.
func gatherAt(o, xs []float32, dim int, idx []int32) error {
	for j, r := range idx {
		if r < 0 || (int(r)+1)*dim > len(xs) {
			return fmt.Errorf("cpu device: gather row %d outside %d rows", r, len(xs)/max(dim, 1))
		}
		copy(o[j*dim:(j+1)*dim], xs[int(r)*dim:(int(r)+1)*dim])
	}
	return nil
}

func (k *kernels) ExpertMatMul(out, x device.Buf, n int, w device.Weight, g device.ExpertGroups) error {
	if err := g.Validate(n); err != nil {
		return fmt.Errorf("cpu device: %w", err)
	}
	if w.Rows%g.Experts != 0 {
		return fmt.Errorf("cpu device: expert matmul: %d weight rows do not split over %d experts", w.Rows, g.Experts)
	}
	mat, err := k.matrix(w)
	if err != nil {
		return err
	}
	rows := n * g.K
	per := w.Rows / g.Experts
	if err := need("expert matmul output", out.N, rows*per); err != nil {
		return err
	}
	if err := need("expert matmul input", x.N, rows*w.Cols); err != nil {
		return err
	}
	o, err := k.f32(out)
	if err != nil {
		return err
	}
	xs, err := k.f32(x)
	if err != nil {
		return err
	}
	off, err := k.ints("expert offsets", g.Offsets, g.Experts+1)
	if err != nil {
		return err
	}
	if !k.d.capturing {
		return k.expertMatMul(o, xs, rows, mat, off)
	}
	return k.record(func() {
		if err := k.expertMatMul(o, xs, rows, mat, off); err != nil {
			panic(err.Error()) // replayed offsets come from GroupExperts
		}
	})
}

// expertMatMul multiplies each expert's rows [off[e], off[e+1]) of xs by
// its slice of the stacked mat, once per expert.
func (k *kernels) expertMatMul(o, xs []float32, rows int, mat kcpu.Matrix, off []int32) error {
	experts := len(off) - 1
	per, eb := mat.Rows/experts, len(mat.Data)/experts
	for e := range experts {
		lo, hi := int(off[e]), int(off[e+1])
		if lo < 0 || hi > rows || lo > hi {
			return fmt.Errorf("cpu device: expert %d rows [%d, %d) outside the %d grouped rows", e, lo, hi, rows)
		}
		if hi == lo {
			continue
		}
		sub := kcpu.Matrix{Type: mat.Type, Rows: per, Cols: mat.Cols, Data: mat.Data[e*eb : (e+1)*eb]}
		k.d.pool.MatMul(o[lo*per:hi*per], xs[lo*mat.Cols:hi*mat.Cols], hi-lo, sub)
	}
	return nil
}

func (k *kernels) ScatterAdd(out, y device.Buf, dim int, g device.ExpertGroups, n int, accumulate bool) error {
	v, err := k.groupsOf(g, n)
	if err != nil {
		return err
	}
	if dim < 0 {
		return fmt.Errorf("cpu device: scatter rows of %d", dim)
	}
	if err := need("scatter output", out.N, n*dim); err != nil {
		return err
	}
	if err := need("scatter input", y.N, n*g.K*dim); err != nil {
		return err
	}
	o, err := k.f32(out)
	if err != nil {
		return err
	}
	ys, err := k.f32(y)
	if err != nil {
		return err
	}
	if !k.d.capturing {
		return k.scatterAdd(o, ys, dim, g, v, n, accumulate)
	}
	return k.record(func() {
		if err := k.scatterAdd(o, ys, dim, g, v, n, accumulate); err != nil {
			panic(err.Error()) // replayed slots come from GroupExperts
		}
	})
}

func (k *kernels) scatterAdd(o, ys []float32, dim int, g device.ExpertGroups, v groupsView, n int, accumulate bool) error {
	for _, s := range v.slots {
		if s < 0 || int(s) >= n*g.K {
			return fmt.Errorf("cpu device: scatter slot %d outside the %d grouped rows", s, n*g.K)
		}
	}
	k.d.pool.ScatterAdd(o, ys, dim, k.expertGroups(g.Experts, g.K, v, n), accumulate)
	return nil
}
