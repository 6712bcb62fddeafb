//go:build cuda

package cuda

import (
	"fmt"

	"github.com/kvhost/kvhost/host/device"
)

// The device.Mamba capability (kernels/cuda/mamba.cu) and the relu² and
// add-scaled elementwise ops beside it. Shapes, layouts and semantics are
// kernels/cpu's (MambaConv, MambaScan, GatedRMSNorm, ReLUSquare,
// AddScaled), which gpu-check compares them with. The kernels address a
// state slot as slot × the slot's bytes (SSM: exactly SSMStateLen f32).

var _ device.Mamba = (*kernels)(nil)

func validShape(s device.Mamba2) error {
	if err := s.Validate(); err != nil {
		return fmt.Errorf("cuda device: %w", err)
	}
	return nil
}

// states checks st against s and returns its slots.
func states(s device.Mamba2, st device.MambaStates) (int, error) {
	if err := st.Validate(s); err != nil {
		return 0, fmt.Errorf("cuda device: %w", err)
	}
	if st.SSMBytes != 4*int64(s.SSMStateLen()) {
		return 0, fmt.Errorf("cuda device: ssm state slots of %d bytes: the kernels address %d-byte slots", st.SSMBytes, 4*s.SSMStateLen())
	}
	return st.Slots(), nil
}

// weightBuf is an F32 weight of at least n values as a Buf.
func weightBuf(name string, w device.Weight, n int) (device.Buf, error) {
	if w.Type != device.F32 || w.Ptr == 0 || int64(w.Rows)*int64(w.Cols) < int64(n) {
		return device.Buf{}, fmt.Errorf("cuda device: %s must be f32 with %d values, got %s %dx%d", name, n, w.Type, w.Rows, w.Cols)
	}
	return device.Buf{Ptr: w.Ptr, N: n}, nil
}

// MambaConv is kcpu.Pool.MambaConv: the causal convolution with bias and
// SiLU of every sequence's xbc rows, continuing and updating its conv state.
// w holds ConvDim×ConvKernel F32 values; bias ConvDim values, or a zero
// Weight for none.
func (k *kernels) MambaConv(s device.Mamba2, out, xbc device.Buf, wt, bt device.Weight, st device.MambaStates, b device.MambaBatch) error {
	d := k.d
	if err := validShape(s); err != nil {
		return err
	}
	slots, err := states(s, st)
	if err != nil {
		return err
	}
	rows, err := b.Check(slots)
	if err != nil {
		return fmt.Errorf("cuda device: %w", err)
	}
	C := s.ConvDim()
	w, err := weightBuf("mamba conv weights", wt, C*s.ConvKernel)
	if err != nil {
		return err
	}
	var bias device.Buf
	if bt.Ptr != 0 {
		if bias, err = weightBuf("mamba conv bias", bt, C); err != nil {
			return err
		}
	}
	for _, c := range []struct {
		name     string
		have, nd int
	}{{"mamba conv output", out.N, rows * C}, {"mamba conv input", xbc.N, rows * C}} {
		if err := need(c.name, c.have, c.nd); err != nil {
			return err
		}
	}
	if rows == 0 {
		return nil
	}
	dims, err := mambaConvDims(C, len(b.Slots))
	if err != nil {
		return err
	}
	biasPtr := bias.Ptr
	if bias.N == 0 {
		biasPtr = 0 // the kernel's "no bias"
	}
	return d.do(func() error {
		starts, err := d.stageInts(b.Starts)
		if err != nil {
			return err
		}
		ids, err := d.stageIDs(b.Slots, slots) // re-checked on every graph refill
		if err != nil {
			return err
		}
		return d.launch("mamba_conv", dims, ptrArg(out.Ptr), ptrArg(xbc.Ptr), ptrArg(w.Ptr), ptrArg(biasPtr),
			ptrArg(st.Conv.Ptr), i64Arg(st.ConvBytes), i32Arg(int(st.ConvType)),
			uint64(starts), uint64(ids), i32Arg(C), i32Arg(s.ConvKernel))
	})
}

// MambaScan is kcpu.Pool.MambaScan: y from the convolved xbc rows and the
// raw dt rows, continuing and updating every sequence's SSM state. A batch
// of one-token sequences (decode) takes mamba_ssm_update, anything else
// mamba_chunk_scan. The kernels keep their partial sums in registers: they
// need no scratch (MambaScanScratch is 0).
func (k *kernels) MambaScan(s device.Mamba2, y, xbc, dt device.Buf, p device.MambaParams, st device.MambaStates, b device.MambaBatch, _ device.Buf) error {
	d := k.d
	if err := validShape(s); err != nil {
		return err
	}
	slots, err := states(s, st)
	if err != nil {
		return err
	}
	rows, err := b.Check(slots)
	if err != nil {
		return fmt.Errorf("cuda device: %w", err)
	}
	H := s.Heads
	A, err := weightBuf("mamba A", p.A, H)
	if err != nil {
		return err
	}
	D, err := weightBuf("mamba D", p.D, H)
	if err != nil {
		return err
	}
	dtBias, err := weightBuf("mamba dt bias", p.DtBias, H)
	if err != nil {
		return err
	}
	for _, c := range []struct {
		name     string
		have, nd int
	}{{"mamba scan output", y.N, rows * s.Inner()}, {"mamba scan xbc", xbc.N, rows * s.ConvDim()}, {"mamba scan dt", dt.N, rows * H}} {
		if err := need(c.name, c.have, c.nd); err != nil {
			return err
		}
	}
	if rows == 0 {
		return nil
	}
	decode := rows == len(b.Slots)
	for q := range b.Slots {
		decode = decode && b.Starts[q+1]-b.Starts[q] == 1
	}
	var (
		dims Dims
		r, q int
	)
	if decode {
		dims, err = mambaUpdateDims(H, s.HeadDim, s.State, len(b.Slots))
	} else {
		dims, r, q, err = mambaScanDims(H, s.HeadDim, s.State, len(b.Slots))
	}
	if err != nil {
		return err
	}
	return d.do(func() error {
		ids, err := d.stageIDs(b.Slots, slots)
		if err != nil {
			return err
		}
		if decode {
			return d.launch("mamba_ssm_update", dims, ptrArg(y.Ptr), ptrArg(xbc.Ptr), ptrArg(dt.Ptr), ptrArg(A.Ptr),
				ptrArg(D.Ptr), ptrArg(dtBias.Ptr), ptrArg(st.SSM.Ptr), uint64(ids), i32Arg(H), i32Arg(s.HeadDim),
				i32Arg(s.Groups), i32Arg(s.State), f32Arg(s.DtMin), f32Arg(s.DtMax))
		}
		starts, err := d.stageInts(b.Starts)
		if err != nil {
			return err
		}
		return d.launch("mamba_chunk_scan", dims, ptrArg(y.Ptr), ptrArg(xbc.Ptr), ptrArg(dt.Ptr), ptrArg(A.Ptr),
			ptrArg(D.Ptr), ptrArg(dtBias.Ptr), ptrArg(st.SSM.Ptr), uint64(starts), uint64(ids), i32Arg(H),
			i32Arg(s.HeadDim), i32Arg(s.Groups), i32Arg(s.State), i32Arg(r), i32Arg(q), f32Arg(s.DtMin), f32Arg(s.DtMax))
	})
}

// MambaScanScratch is 0: the scan kernels need no scratch.
func (k *kernels) MambaScanScratch(device.Mamba2, int, int) int { return 0 }

// GatedRMSNorm is kcpu.Pool.GatedRMSNorm: out = norm(y·silu(z)) per group
// of group values, times weight (dim F32 values).
func (k *kernels) GatedRMSNorm(out, y, z device.Buf, w device.Weight, rows, dim, group int, eps float32) error {
	d := k.d
	dims, err := gatedNormDims(rows, dim, group)
	if err != nil {
		return err
	}
	weight, err := weightBuf("gated norm weight", w, dim)
	if err != nil {
		return err
	}
	for _, c := range []struct {
		name     string
		have, nd int
	}{{"gated norm output", out.N, rows * dim}, {"gated norm y", y.N, rows * dim}, {"gated norm z", z.N, rows * dim}} {
		if err := need(c.name, c.have, c.nd); err != nil {
			return err
		}
	}
	if rows == 0 {
		return nil
	}
	return d.do(func() error {
		return d.launch("mamba_gated_norm", dims, ptrArg(out.Ptr), ptrArg(y.Ptr), ptrArg(z.Ptr), ptrArg(weight.Ptr),
			i32Arg(dim), i32Arg(group), f32Arg(eps))
	})
}

// ReLUSquare is kcpu.ReLUSquare: out = max(x, 0)² over out.N values.
func (k *kernels) ReLUSquare(out, x device.Buf) error {
	d := k.d
	if err := need("relu² input", x.N, out.N); err != nil || out.N == 0 {
		return err
	}
	return d.do(func() error {
		return d.launch("relu_sq_f32", elementwise(out.N), ptrArg(out.Ptr), ptrArg(x.Ptr), i64Arg(int64(out.N)))
	})
}

// AddScaled is kcpu.AddScaled: out = a + s·b over out.N values.
func (k *kernels) AddScaled(out, a, b device.Buf, s float32) error {
	d := k.d
	if a.N < out.N || b.N < out.N {
		return fmt.Errorf("cuda device: add-scaled of %d, %d into %d floats", a.N, b.N, out.N)
	}
	if out.N == 0 {
		return nil
	}
	return d.do(func() error {
		return d.launch("add_scaled_f32", elementwise(out.N), ptrArg(out.Ptr), ptrArg(a.Ptr), ptrArg(b.Ptr), f32Arg(s), i64Arg(int64(out.N)))
	})
}
