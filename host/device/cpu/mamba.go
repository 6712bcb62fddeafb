package cpu

import (
	"fmt"
	"unsafe"

	"github.com/kvhost/kvhost/host/device"
	kcpu "github.com/kvhost/kvhost/kernels/cpu"
)

var _ device.Mamba = (*kernels)(nil)

// mambaStates resolves a layer's state pool spans to host views.
type mambaStates struct {
	conv, ssm           []byte
	convType            kcpu.DType
	convBytes, ssmBytes int
	slots               int
}

func (k *kernels) mambaStates(s device.Mamba2, st device.MambaStates) (mambaStates, error) {
	if err := s.Validate(); err != nil {
		return mambaStates{}, fmt.Errorf("cpu device: %w", err)
	}
	if err := st.Validate(s); err != nil {
		return mambaStates{}, fmt.Errorf("cpu device: %w", err)
	}
	n := st.Slots()
	conv, err := k.d.mem.bytes(st.Conv.Ptr, int64(n)*st.ConvBytes)
	if err != nil {
		return mambaStates{}, err
	}
	ssm, err := k.d.mem.bytes(st.SSM.Ptr, int64(n)*st.SSMBytes)
	if err != nil {
		return mambaStates{}, err
	}
	if st.SSMBytes%4 != 0 || len(ssm) > 0 && uintptr(unsafe.Pointer(&ssm[0]))%4 != 0 {
		return mambaStates{}, fmt.Errorf("cpu device: ssm state span at %#x is misaligned", uintptr(st.SSM.Ptr))
	}
	return mambaStates{conv: conv, ssm: ssm, convType: kcpu.DType(st.ConvType), convBytes: int(st.ConvBytes), ssmBytes: int(st.SSMBytes), slots: n}, nil
}

// seqs builds the kernels' sequence list for b over the states (into a
// reused slice: a launch runs on the device goroutine, one at a time).
func (k *kernels) seqs(s device.Mamba2, ms mambaStates, b device.MambaBatch) ([]kcpu.MambaSeq, error) {
	if _, err := b.Check(ms.slots); err != nil {
		return nil, fmt.Errorf("cpu device: %w", err)
	}
	out := k.arch.mseqs[:0]
	for q, sl := range b.Slots {
		ssm := ms.ssm[int(sl)*ms.ssmBytes:]
		out = append(out, kcpu.MambaSeq{
			Len:  int(b.Starts[q+1] - b.Starts[q]),
			Conv: kcpu.ConvState{Type: ms.convType, Data: ms.conv[int(sl)*ms.convBytes : (int(sl)+1)*ms.convBytes]},
			SSM:  f32View(ssm[:4*s.SSMStateLen()]),
		})
	}
	k.arch.mseqs = out
	return out, nil
}

func (k *kernels) MambaConv(s device.Mamba2, out, xbc device.Buf, w, bias device.Weight, st device.MambaStates, b device.MambaBatch) error {
	ms, err := k.mambaStates(s, st)
	if err != nil {
		return err
	}
	rows, err := b.Check(ms.slots)
	if err != nil {
		return fmt.Errorf("cpu device: %w", err)
	}
	C := s.ConvDim()
	if err := need("mamba conv output", out.N, rows*C); err != nil {
		return err
	}
	if err := need("mamba conv input", xbc.N, rows*C); err != nil {
		return err
	}
	if out.Ptr != xbc.Ptr && out.Ptr < xbc.Ptr+device.Ptr(4*rows*C) && xbc.Ptr < out.Ptr+device.Ptr(4*rows*C) {
		return fmt.Errorf("cpu device: mamba conv output overlaps its input without being it")
	}
	o, err := k.f32(out)
	if err != nil {
		return err
	}
	xs, err := k.f32(xbc)
	if err != nil {
		return err
	}
	ws, err := k.f32Weight("mamba conv weights", w, C*s.ConvKernel)
	if err != nil {
		return err
	}
	var bs []float32
	if bias.Ptr != 0 {
		if bs, err = k.f32Weight("mamba conv bias", bias, C); err != nil {
			return err
		}
	}
	if !k.d.capturing {
		seqs, err := k.seqs(s, ms, b)
		if err != nil {
			return err
		}
		k.d.pool.MambaConv(s, o, xs, ws, bs, seqs)
		return nil
	}
	return k.record(func() {
		seqs, err := k.seqs(s, ms, b) // the slots a replay was given
		if err != nil {
			panic(err.Error())
		}
		k.d.pool.MambaConv(s, o, xs, ws, bs, seqs)
	})
}

func (k *kernels) MambaScanScratch(s device.Mamba2, tokens, seqs int) int {
	return kcpu.MambaScanScratch(k.d.pool, s, tokens, seqs)
}

func (k *kernels) MambaScan(s device.Mamba2, y, xbc, dt device.Buf, p device.MambaParams, st device.MambaStates, b device.MambaBatch, scratch device.Buf) error {
	ms, err := k.mambaStates(s, st)
	if err != nil {
		return err
	}
	rows, err := b.Check(ms.slots)
	if err != nil {
		return fmt.Errorf("cpu device: %w", err)
	}
	H := s.Heads
	for _, c := range []struct {
		name     string
		have, nd int
	}{{"mamba scan output", y.N, rows * s.Inner()}, {"mamba scan xbc", xbc.N, rows * s.ConvDim()}, {"mamba scan dt", dt.N, rows * H},
		{"mamba scan scratch", scratch.N, kcpu.MambaScanScratch(k.d.pool, s, rows, len(b.Slots))}} {
		if err := need(c.name, c.have, c.nd); err != nil {
			return err
		}
	}
	ys, err := k.f32(y)
	if err != nil {
		return err
	}
	xs, err := k.f32(xbc)
	if err != nil {
		return err
	}
	dts, err := k.f32(dt)
	if err != nil {
		return err
	}
	sc, err := k.f32(scratch)
	if err != nil {
		return err
	}
	// Fields set one by one, no pointers into prm: the recording closure
	// captures it, and an address taken would move it to the heap on every
	// call, eager ones included.
	var prm kcpu.MambaParams
	if prm.A, err = k.f32Weight("mamba A", p.A, H); err != nil {
		return err
	}
	if prm.D, err = k.f32Weight("mamba D", p.D, H); err != nil {
		return err
	}
	if prm.DtBias, err = k.f32Weight("mamba dt bias", p.DtBias, H); err != nil {
		return err
	}
	if !k.d.capturing {
		seqs, err := k.seqs(s, ms, b)
		if err != nil {
			return err
		}
		k.d.pool.MambaScan(s, ys, xs, dts, prm, seqs, sc)
		return nil
	}
	return k.record(func() {
		seqs, err := k.seqs(s, ms, b)
		if err != nil {
			panic(err.Error())
		}
		// A replayed batch has the captured shape, so the scratch fits.
		k.d.pool.MambaScan(s, ys, xs, dts, prm, seqs, sc)
	})
}

func (k *kernels) GatedRMSNorm(out, y, z device.Buf, weight device.Weight, rows, dim, group int, eps float32) error {
	if rows < 0 || dim < 1 || group < 1 || dim%group != 0 {
		return fmt.Errorf("cpu device: gated rmsnorm of %d rows of %d in groups of %d: the group must divide the row", rows, dim, group)
	}
	if !(eps > 0) {
		return fmt.Errorf("cpu device: gated rmsnorm eps %v must be positive", eps)
	}
	for _, c := range []struct {
		name     string
		have, nd int
	}{{"gated norm output", out.N, rows * dim}, {"gated norm y", y.N, rows * dim}, {"gated norm z", z.N, rows * dim}} {
		if err := need(c.name, c.have, c.nd); err != nil {
			return err
		}
	}
	o, err := k.f32(out)
	if err != nil {
		return err
	}
	ys, err := k.f32(y)
	if err != nil {
		return err
	}
	zs, err := k.f32(z)
	if err != nil {
		return err
	}
	w, err := k.f32Weight("gated norm weight", weight, dim)
	if err != nil {
		return err
	}
	if !k.d.capturing {
		k.d.pool.GatedRMSNorm(o, ys, zs, w, rows, dim, group, eps)
		return nil
	}
	return k.record(func() { k.d.pool.GatedRMSNorm(o, ys, zs, w, rows, dim, group, eps) })
}

// f32View is b's bytes as float32 values (b 4-byte aligned).
func f32View(b []byte) []float32 {
	if len(b) < 4 {
		return nil
	}
	return unsafe.Slice((*float32)(unsafe.Pointer(&b[0])), len(b)/4)
}
