//go:build cuda

package gpucheck

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/kvhost/kvhost/host/device"
	kcpu "github.com/kvhost/kvhost/kernels/cpu"
)

// Mamba-2 kernels against kernels/cpu: the convolution and the scan of one
// batch from the same states, compared on the outputs and on the states
// left in the pools; the gated norm; the hybrids' elementwise operations.

// mambaShapes are a Nemotron-H-like shape and an awkward one (head dim and
// state off the warp size, three groups, a 3-tap kernel, an active time
// step clamp).
var mambaShapes = []kcpu.Mamba2{
	{Heads: 8, HeadDim: 64, Groups: 2, State: 128, ConvKernel: 4, DtMax: float32(math.Inf(1))},
	{Heads: 6, HeadDim: 24, Groups: 3, State: 40, ConvKernel: 3, DtMin: 0.001, DtMax: 0.3},
}

// mambaCases runs the Mamba-2 cases through CheckKernels' run.
func (c *checker) mambaCases(run func(string, func() (KernelResult, error))) {
	for si, s := range mambaShapes {
		for _, ct := range []kcpu.DType{kcpu.F32, kcpu.F16, kcpu.BF16} {
			for _, decode := range []bool{false, true} {
				name := fmt.Sprintf("mamba conv+scan shape %d state %s decode=%v", si, ct, decode)
				run(name, func() (KernelResult, error) { return c.mamba(s, ct, decode) })
			}
		}
	}
	run("mamba gated norm", c.gatedNorm)
	run("relu² / scale / add-scaled", c.hybridElementwise)
}

// encodeConv writes v as a conv state of type t.
func encodeConv(t kcpu.DType, v []float32) []byte {
	switch t {
	case kcpu.F32:
		b := make([]byte, 4*len(v))
		for i, f := range v {
			binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(f))
		}
		return b
	default:
		b := make([]byte, 2*len(v))
		for i, f := range v {
			h := kcpu.F32ToF16(f)
			if t == kcpu.BF16 {
				h = kcpu.F32ToBF16(f)
			}
			binary.LittleEndian.PutUint16(b[2*i:], h)
		}
		return b
	}
}

func decodeConv(t kcpu.DType, b []byte) []float32 {
	if t == kcpu.F32 {
		out := make([]float32, len(b)/4)
		for i := range out {
			out[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
		}
		return out
	}
	out := make([]float32, len(b)/2)
	for i := range out {
		h := binary.LittleEndian.Uint16(b[2*i:])
		if t == kcpu.BF16 {
			out[i] = kcpu.BF16ToF32(h)
		} else {
			out[i] = kcpu.F16ToF32(h)
		}
	}
	return out
}

// raw uploads bytes (a multiple of 4) and returns them as a float buffer,
// which CopyToHost can bring back bit for bit.
// f32Weight is an F32 buffer seen as a rows × cols weight.
func f32Weight(b device.Buf, rows, cols int) device.Weight {
	return device.Weight{Ptr: b.Ptr, Type: device.F32, Rows: rows, Cols: cols, Bytes: 4 * int64(rows*cols)}
}

func (c *checker) raw(b []byte) (device.Buf, error) {
	p, err := c.d.Malloc(int64(len(b)))
	if err != nil {
		return device.Buf{}, err
	}
	c.own = append(c.own, p)
	return device.Buf{Ptr: p, N: len(b) / 4}, c.k.Upload(p, b)
}

func (c *checker) getBytes(b device.Buf) ([]byte, error) {
	f, err := c.get(b)
	if err != nil {
		return nil, err
	}
	out := make([]byte, 4*len(f))
	for i, v := range f {
		binary.LittleEndian.PutUint32(out[4*i:], math.Float32bits(v))
	}
	return out, nil
}

func (c *checker) mamba(s kcpu.Mamba2, ct kcpu.DType, decode bool) (KernelResult, error) {
	lens, slots := []int{70, 0, 5, 130}, []int32{2, 5, 0, 1}
	if decode {
		lens, slots = []int{1, 1, 1, 1, 1}, []int32{3, 0, 4, 1, 2}
	}
	const nslots = 6
	rows := 0
	starts := []int32{0}
	for _, n := range lens {
		rows += n
		starts = append(starts, int32(rows))
	}
	C, H := s.ConvDim(), s.Heads
	eb := map[kcpu.DType]int{kcpu.F32: 4, kcpu.F16: 2, kcpu.BF16: 2}[ct]
	convLen, ssmLen := s.ConvStateLen(), s.SSMStateLen()
	if eb*convLen*nslots%4 != 0 {
		return KernelResult{}, fmt.Errorf("conv pool of %d bytes is not whole floats", eb*convLen*nslots)
	}
	// Inputs and states; the conv pool goes through its dtype once so both
	// sides start from the same values.
	xbcv, dtv := c.rand(rows*C, 1), c.rand(rows*H, 3)
	wv, bv := c.rand(C*s.ConvKernel, 0.5), c.rand(C, 0.5)
	av, dv, biasv := make([]float32, H), c.rand(H, 1), make([]float32, H)
	for h := range H {
		av[h] = -float32(1 + 15*c.rng.Float64())
		biasv[h] = float32(-2 - 4*c.rng.Float64())
	}
	convPool := encodeConv(ct, c.rand(convLen*nslots, 1))
	ssmPool := c.rand(ssmLen*nslots, 1)

	bufs := make([]device.Buf, 0, 9)
	for _, v := range [][]float32{xbcv, dtv, wv, bv, av, dv, biasv, ssmPool, make([]float32, rows*s.Inner())} {
		b, err := c.buf(v)
		if err != nil {
			return KernelResult{}, err
		}
		bufs = append(bufs, b)
	}
	xbc, dt, w, bias, A, D, dtBias, ssm, y := bufs[0], bufs[1], bufs[2], bufs[3], bufs[4], bufs[5], bufs[6], bufs[7], bufs[8]
	conv, err := c.raw(convPool)
	if err != nil {
		return KernelResult{}, err
	}
	mk, ok := c.k.(device.Mamba)
	if !ok {
		return KernelResult{}, fmt.Errorf("gpucheck: the device's kernels lack the device.Mamba capability")
	}
	st := device.MambaStates{Conv: device.Span{Ptr: conv.Ptr, Bytes: int64(len(convPool))}, SSM: device.Span{Ptr: ssm.Ptr, Bytes: ssm.Bytes()},
		ConvType: device.DType(ct), ConvBytes: int64(eb * convLen), SSMBytes: 4 * int64(ssmLen)}
	batch := device.MambaBatch{Starts: starts, Slots: slots}
	if err := mk.MambaConv(s, xbc, xbc, f32Weight(w, C, s.ConvKernel), f32Weight(bias, 1, C), st, batch); err != nil {
		return KernelResult{}, err
	}
	prm := device.MambaParams{A: f32Weight(A, 1, H), D: f32Weight(D, 1, H), DtBias: f32Weight(dtBias, 1, H)}
	if err := mk.MambaScan(s, y, xbc, dt, prm, st, batch, device.Buf{}); err != nil {
		return KernelResult{}, err
	}
	var got []float32
	for _, b := range []device.Buf{y, xbc, ssm} {
		v, err := c.get(b)
		if err != nil {
			return KernelResult{}, err
		}
		got = append(got, v...)
	}
	gotConv, err := c.getBytes(conv)
	if err != nil {
		return KernelResult{}, err
	}
	got = append(got, decodeConv(ct, gotConv)...)

	// The same batch on the CPU, on copies of the pools.
	cpuConv := append([]byte(nil), convPool...)
	cpuSSM := append([]float32(nil), ssmPool...)
	var seqs []kcpu.MambaSeq
	for q, n := range lens {
		sl := int(slots[q])
		seqs = append(seqs, kcpu.MambaSeq{Len: n,
			Conv: kcpu.ConvState{Type: ct, Data: cpuConv[sl*eb*convLen : (sl+1)*eb*convLen]},
			SSM:  cpuSSM[sl*ssmLen : (sl+1)*ssmLen]})
	}
	wantY := make([]float32, rows*s.Inner())
	c.cpu.MambaConv(s, xbcv, xbcv, wv, bv, seqs)
	scratch := make([]float32, kcpu.MambaScanScratch(c.cpu, s, rows, len(seqs)))
	c.cpu.MambaScan(s, wantY, xbcv, dtv, kcpu.MambaParams{A: av, D: dv, DtBias: biasv}, seqs, scratch)
	want := append(append(append(wantY, xbcv...), cpuSSM...), decodeConv(ct, cpuConv)...)
	r := compare("", got, want, 1e-4)
	r.Details = fmt.Sprintf("%d sequences, %d rows, y+conv out+ssm pool+conv pool", len(lens), rows)
	return r, nil
}

func (c *checker) gatedNorm() (KernelResult, error) {
	rows, dim, group := 9, 1536, 384
	yv, zv, wv := c.rand(rows*dim, 2), c.rand(rows*dim, 3), c.rand(dim, 1)
	var bufs []device.Buf
	for _, v := range [][]float32{yv, zv, wv} {
		b, err := c.buf(v)
		if err != nil {
			return KernelResult{}, err
		}
		bufs = append(bufs, b)
	}
	mk, ok := c.k.(device.Mamba)
	if !ok {
		return KernelResult{}, fmt.Errorf("gpucheck: the device's kernels lack the device.Mamba capability")
	}
	if err := mk.GatedRMSNorm(bufs[0], bufs[0], bufs[1], f32Weight(bufs[2], 1, dim), rows, dim, group, 1e-5); err != nil {
		return KernelResult{}, err
	}
	got, err := c.get(bufs[0])
	if err != nil {
		return KernelResult{}, err
	}
	want := make([]float32, rows*dim)
	c.cpu.GatedRMSNorm(want, yv, zv, wv, rows, dim, group, 1e-5)
	return compare("", got, want, 1e-5), nil
}

func (c *checker) hybridElementwise() (KernelResult, error) {
	n := 5000
	xv, av := c.rand(n, 3), c.rand(n, 1)
	x, err := c.buf(xv)
	if err != nil {
		return KernelResult{}, err
	}
	a, err := c.buf(av)
	if err != nil {
		return KernelResult{}, err
	}
	o, err := c.buf(make([]float32, n))
	if err != nil {
		return KernelResult{}, err
	}
	ek, ok := c.k.(device.Elementwise)
	if !ok {
		return KernelResult{}, fmt.Errorf("gpucheck: the device's kernels lack the device.Elementwise capability")
	}
	// o = relu²(x); o *= 0.5; o = a + 0.25·o
	if err := ek.ReLUSquare(o, x); err != nil {
		return KernelResult{}, err
	}
	if err := ek.Scale(o, 0.5); err != nil {
		return KernelResult{}, err
	}
	if err := ek.AddScaled(o, a, o, 0.25); err != nil {
		return KernelResult{}, err
	}
	got, err := c.get(o)
	if err != nil {
		return KernelResult{}, err
	}
	want := make([]float32, n)
	kcpu.ReLUSquare(want, xv)
	kcpu.Scale(want, 0.5)
	kcpu.AddScaled(want, av, want, 0.25)
	return compare("", got, want, 1e-6), nil
}
