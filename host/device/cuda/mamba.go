//go:build cuda

package cuda

import (
	"fmt"

	"github.com/kvhost/kvhost/host/device"
	kcpu "github.com/kvhost/kvhost/kernels/cpu"
)

// Mamba-2 kernels (kernels/cuda/mamba.cu) on the concrete device.
//
// Provisional: these are methods of *Device, not of device.Kernels, because
// the device seam has no Mamba operations yet. The architecture that adds
// Nemotron-H / Granite-4.0-H defines that seam (a capability interface
// beside device.Kernels, found by type assertion, as DecodeKernels is) and
// moves these behind it; gpu-check calls them directly until then. Shapes,
// layouts and semantics are kernels/cpu's (MambaConv, MambaScan,
// GatedRMSNorm, ReLUSquare, Scale, AddScaled), which gpu-check compares
// them with.

func validShape(s kcpu.Mamba2) error {
	if err := s.Validate(); err != nil {
		return fmt.Errorf("cuda device: %w", err)
	}
	return nil
}

// MambaConv is kcpu.Pool.MambaConv: the causal convolution with bias and
// SiLU of every sequence's xbc rows, continuing and updating its conv state.
// w holds ConvDim×ConvKernel values; bias ConvDim values, or N 0 for none.
func (d *Device) MambaConv(s kcpu.Mamba2, out, xbc, w, bias device.Buf, st MambaStates, b MambaBatch) error {
	if err := validShape(s); err != nil {
		return err
	}
	rows, err := b.check(st)
	if err != nil {
		return err
	}
	eb, err := convElem(st.ConvType)
	if err != nil {
		return err
	}
	C := s.ConvDim()
	for _, c := range []struct {
		name     string
		have, nd int
	}{{"mamba conv output", out.N, rows * C}, {"mamba conv input", xbc.N, rows * C}, {"mamba conv weights", w.N, C * s.ConvKernel}} {
		if err := need(c.name, c.have, c.nd); err != nil {
			return err
		}
	}
	if bias.N != 0 {
		if err := need("mamba conv bias", bias.N, C); err != nil {
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
		slots, err := d.stageIDs(b.Slots, st.Slots) // re-checked on every graph refill
		if err != nil {
			return err
		}
		return d.launch("mamba_conv", dims, ptrArg(out.Ptr), ptrArg(xbc.Ptr), ptrArg(w.Ptr), ptrArg(biasPtr),
			ptrArg(st.Conv), i64Arg(int64(eb*s.ConvStateLen())), i32Arg(int(st.ConvType)),
			uint64(starts), uint64(slots), i32Arg(C), i32Arg(s.ConvKernel))
	})
}

// MambaScan is kcpu.Pool.MambaScan: y from the convolved xbc rows and the
// raw dt rows, continuing and updating every sequence's SSM state. A batch
// of one-token sequences (decode) takes mamba_ssm_update, anything else
// mamba_chunk_scan. A, D and dtBias hold Heads values.
func (d *Device) MambaScan(s kcpu.Mamba2, y, xbc, dt, A, D, dtBias device.Buf, st MambaStates, b MambaBatch) error {
	if err := validShape(s); err != nil {
		return err
	}
	rows, err := b.check(st)
	if err != nil {
		return err
	}
	H := s.Heads
	for _, c := range []struct {
		name     string
		have, nd int
	}{{"mamba scan output", y.N, rows * s.Inner()}, {"mamba scan xbc", xbc.N, rows * s.ConvDim()}, {"mamba scan dt", dt.N, rows * H},
		{"mamba A", A.N, H}, {"mamba D", D.N, H}, {"mamba dt bias", dtBias.N, H}} {
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
		slots, err := d.stageIDs(b.Slots, st.Slots)
		if err != nil {
			return err
		}
		if decode {
			return d.launch("mamba_ssm_update", dims, ptrArg(y.Ptr), ptrArg(xbc.Ptr), ptrArg(dt.Ptr), ptrArg(A.Ptr),
				ptrArg(D.Ptr), ptrArg(dtBias.Ptr), ptrArg(st.SSM), uint64(slots), i32Arg(H), i32Arg(s.HeadDim),
				i32Arg(s.Groups), i32Arg(s.State), f32Arg(s.DtMin), f32Arg(s.DtMax))
		}
		starts, err := d.stageInts(b.Starts)
		if err != nil {
			return err
		}
		return d.launch("mamba_chunk_scan", dims, ptrArg(y.Ptr), ptrArg(xbc.Ptr), ptrArg(dt.Ptr), ptrArg(A.Ptr),
			ptrArg(D.Ptr), ptrArg(dtBias.Ptr), ptrArg(st.SSM), uint64(starts), uint64(slots), i32Arg(H),
			i32Arg(s.HeadDim), i32Arg(s.Groups), i32Arg(s.State), i32Arg(r), i32Arg(q), f32Arg(s.DtMin), f32Arg(s.DtMax))
	})
}

// GatedRMSNorm is kcpu.Pool.GatedRMSNorm: out = norm(y·silu(z)) per group
// of group values, times weight (dim values).
func (d *Device) GatedRMSNorm(out, y, z, weight device.Buf, rows, dim, group int, eps float32) error {
	dims, err := gatedNormDims(rows, dim, group)
	if err != nil {
		return err
	}
	for _, c := range []struct {
		name     string
		have, nd int
	}{{"gated norm output", out.N, rows * dim}, {"gated norm y", y.N, rows * dim}, {"gated norm z", z.N, rows * dim}, {"gated norm weight", weight.N, dim}} {
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
func (d *Device) ReLUSquare(out, x device.Buf) error {
	if err := need("relu² input", x.N, out.N); err != nil || out.N == 0 {
		return err
	}
	return d.do(func() error {
		return d.launch("relu_sq_f32", elementwise(out.N), ptrArg(out.Ptr), ptrArg(x.Ptr), i64Arg(int64(out.N)))
	})
}

// Scale is kcpu.Scale: x *= s.
func (d *Device) Scale(x device.Buf, s float32) error {
	if x.N == 0 {
		return nil
	}
	return d.do(func() error {
		return d.launch("scale_f32", elementwise(x.N), ptrArg(x.Ptr), f32Arg(s), i64Arg(int64(x.N)))
	})
}

// AddScaled is kcpu.AddScaled: out = a + s·b over out.N values.
func (d *Device) AddScaled(out, a, b device.Buf, s float32) error {
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
