//go:build cuda

package gpucheck

import (
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/kvhost/kvhost/host/device"
	"github.com/kvhost/kvhost/host/device/cuda"
	kcpu "github.com/kvhost/kvhost/kernels/cpu"
)

// KernelResult is one kernel's agreement with kernels/cpu on random inputs.
type KernelResult struct {
	Name    string  `json:"name"`
	MaxAbs  float64 `json:"max_abs_diff"`
	MaxRef  float64 `json:"max_abs_ref"`
	Tol     float64 `json:"tolerance"`
	OK      bool    `json:"ok"`
	Error   string  `json:"error,omitempty"`
	Details string  `json:"details,omitempty"`
}

// checker uploads host data, runs one device kernel and compares.
type checker struct {
	d   *cuda.Device
	k   device.Kernels
	rng *rand.Rand
	cpu *kcpu.Pool
	own []device.Ptr
}

func (c *checker) rand(n int, scale float32) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = (c.rng.Float32()*2 - 1) * scale
	}
	return v
}

func (c *checker) buf(v []float32) (device.Buf, error) {
	p, err := c.d.Malloc(int64(max(len(v), 1)) * 4)
	if err != nil {
		return device.Buf{}, err
	}
	c.own = append(c.own, p)
	b := device.Buf{Ptr: p, N: len(v)}
	return b, c.k.CopyFromHost(b, v)
}

func (c *checker) weight(t kcpu.DType, rows, cols int, v []float32) (device.Weight, kcpu.Matrix, error) {
	rb, err := t.RowBytes(cols)
	if err != nil {
		return device.Weight{}, kcpu.Matrix{}, err
	}
	raw := make([]byte, rb*rows)
	switch t {
	case kcpu.F32:
		for i, f := range v {
			b := math.Float32bits(f)
			raw[4*i], raw[4*i+1], raw[4*i+2], raw[4*i+3] = byte(b), byte(b>>8), byte(b>>16), byte(b>>24)
		}
	case kcpu.F16, kcpu.BF16:
		for i, f := range v {
			h := kcpu.F32ToF16(f)
			if t == kcpu.BF16 {
				h = kcpu.F32ToBF16(f)
			}
			raw[2*i], raw[2*i+1] = byte(h), byte(h>>8)
		}
	default:
		if err := kcpu.QuantizeBlocks(t, raw, v); err != nil {
			return device.Weight{}, kcpu.Matrix{}, err
		}
	}
	p, err := c.d.Malloc(int64(len(raw)))
	if err != nil {
		return device.Weight{}, kcpu.Matrix{}, err
	}
	c.own = append(c.own, p)
	w := device.Weight{Ptr: p, Type: device.DType(t), Rows: rows, Cols: cols, Bytes: int64(len(raw))}
	return w, kcpu.Matrix{Type: t, Rows: rows, Cols: cols, Data: raw}, c.k.Upload(p, raw)
}

func (c *checker) get(b device.Buf) ([]float32, error) {
	out := make([]float32, b.N)
	return out, c.k.CopyToHost(out, b)
}

func compare(name string, got, want []float32, tol float64) KernelResult {
	r := KernelResult{Name: name, Tol: tol}
	if len(got) != len(want) {
		r.Error = fmt.Sprintf("length %d, want %d", len(got), len(want))
		return r
	}
	for i := range got {
		r.MaxAbs = math.Max(r.MaxAbs, math.Abs(float64(got[i])-float64(want[i])))
		r.MaxRef = math.Max(r.MaxRef, math.Abs(float64(want[i])))
		if got[i] != got[i] && want[i] == want[i] {
			r.MaxAbs = math.Inf(1)
		}
	}
	r.OK = r.MaxAbs <= tol*(1+r.MaxRef)
	return r
}

// CheckKernels runs every kernel on random inputs and compares it with the
// CPU kernels; a failing kernel is recorded and the next one runs.
func CheckKernels(d *cuda.Device, seed uint64) []KernelResult {
	c := &checker{d: d, k: d.Kernels(), rng: rand.New(rand.NewPCG(seed, 1)), cpu: kcpu.NewPool(1)}
	defer c.cpu.Close()
	defer func() {
		for _, p := range c.own {
			_ = d.Free(p)
		}
	}()
	var out []KernelResult
	run := func(name string, f func() (KernelResult, error)) {
		r, err := f()
		if err != nil {
			r = KernelResult{Name: name, Error: err.Error()}
		}
		r.Name = name
		out = append(out, r)
	}
	for _, t := range kcpu.DTypes() {
		for _, m := range []int{1, 5, 40} {
			run(fmt.Sprintf("matmul %s m=%d", t, m), func() (KernelResult, error) { return c.matmul(t, m, 200, 512) })
		}
		run("embedding "+t.String(), func() (KernelResult, error) { return c.embedding(t) })
	}
	run("rmsnorm", c.rmsnorm)
	run("add / add_bias / silu_mul", c.elementwise)
	for _, neox := range []bool{false, true} {
		for _, sc := range []string{"", "llama3"} {
			run(fmt.Sprintf("rope neox=%v scaling=%q", neox, sc), func() (KernelResult, error) { return c.rope(neox, sc) })
		}
	}
	for _, a := range attnChecks() {
		run(a.String(), func() (KernelResult, error) { return c.attention(a) })
	}
	run("gather_rows", c.gather)
	run("log_softmax + argmax", c.sampling)
	c.checkArch(run)
	c.mambaCases(run)
	return out
}

func (c *checker) matmul(t kcpu.DType, m, n, k int) (KernelResult, error) {
	wv := c.rand(n*k, 0.5)
	w, mat, err := c.weight(t, n, k, wv)
	if err != nil {
		return KernelResult{}, err
	}
	xv := c.rand(m*k, 1)
	x, err := c.buf(xv)
	if err != nil {
		return KernelResult{}, err
	}
	o, err := c.buf(make([]float32, m*n))
	if err != nil {
		return KernelResult{}, err
	}
	if err := c.k.MatMul(o, x, m, w); err != nil {
		return KernelResult{}, err
	}
	got, err := c.get(o)
	if err != nil {
		return KernelResult{}, err
	}
	want := make([]float32, m*n)
	if t.Quantized() {
		// The CPU kernels dot quantized weights with 8-bit activation rows;
		// matvec_q dots the decoded weights with f32 x, so its reference
		// is the float64 product of the decoded weights and x.
		quantRef(want, xv, m, mat)
	} else {
		c.cpu.MatMul(want, xv, m, mat)
	}
	tol := 1e-4
	if m >= cuda.CublasMinM && (t == kcpu.F16 || t == kcpu.BF16) {
		tol = 3e-2 // cuBLAS takes x in the weight's half type
	}
	r := compare("", got, want, tol)
	switch {
	case t.Quantized():
		r.Details = "matvec_q kernel"
	case m >= cuda.CublasMinM && c.d.Facts().CublasPath != "":
		r.Details = "cuBLAS " + c.d.Facts().CublasPath
	default:
		r.Details = "matvec kernel"
	}
	return r, nil
}

// quantRef sets want = x · Wᵀ in float64 over the decoded weights.
func quantRef(want, x []float32, m int, w kcpu.Matrix) {
	row := make([]float32, w.Cols)
	for r := range w.Rows {
		kcpu.Dequantize(row, w, r)
		for i := range m {
			var s float64
			for k, v := range row {
				s += float64(v) * float64(x[i*w.Cols+k])
			}
			want[i*w.Rows+r] = float32(s)
		}
	}
}

func (c *checker) embedding(t kcpu.DType) (KernelResult, error) {
	rows, cols := 300, 512
	w, mat, err := c.weight(t, rows, cols, c.rand(rows*cols, 1))
	if err != nil {
		return KernelResult{}, err
	}
	ids := []int32{0, 299, 17, 17, 150, 3}
	o, err := c.buf(make([]float32, len(ids)*cols))
	if err != nil {
		return KernelResult{}, err
	}
	if err := c.k.Embedding(o, w, ids); err != nil {
		return KernelResult{}, err
	}
	got, err := c.get(o)
	if err != nil {
		return KernelResult{}, err
	}
	want := make([]float32, len(ids)*cols)
	kcpu.EmbeddingGather(want, mat, ids)
	return compare("", got, want, 0), nil
}

func (c *checker) vec(v []float32) (device.Weight, error) {
	w, _, err := c.weight(kcpu.F32, 1, len(v), v)
	return w, err
}

func (c *checker) rmsnorm() (KernelResult, error) {
	rows, dim := 7, 1000
	xv, wv := c.rand(rows*dim, 3), c.rand(dim, 1)
	x, err := c.buf(xv)
	if err != nil {
		return KernelResult{}, err
	}
	w, err := c.vec(wv)
	if err != nil {
		return KernelResult{}, err
	}
	if err := c.k.RMSNorm(x, x, w, rows, dim, 1e-5); err != nil {
		return KernelResult{}, err
	}
	got, err := c.get(x)
	if err != nil {
		return KernelResult{}, err
	}
	want := make([]float32, rows*dim)
	kcpu.RMSNorm(want, xv, wv, rows, dim, 1e-5)
	return compare("", got, want, 1e-5), nil
}

func (c *checker) elementwise() (KernelResult, error) {
	m, n := 9, 333
	av, bv, biasv := c.rand(m*n, 4), c.rand(m*n, 4), c.rand(n, 1)
	a, err := c.buf(av)
	if err != nil {
		return KernelResult{}, err
	}
	b, err := c.buf(bv)
	if err != nil {
		return KernelResult{}, err
	}
	bias, err := c.vec(biasv)
	if err != nil {
		return KernelResult{}, err
	}
	if err := c.k.Add(a, a, b); err != nil {
		return KernelResult{}, err
	}
	if err := c.k.AddBias(a, bias, m); err != nil {
		return KernelResult{}, err
	}
	if err := c.k.SiLUMul(a, a, b); err != nil {
		return KernelResult{}, err
	}
	got, err := c.get(a)
	if err != nil {
		return KernelResult{}, err
	}
	want := append([]float32(nil), av...)
	kcpu.Add(want, want, bv)
	kcpu.AddBias(want, biasv, m)
	kcpu.SiLUMul(want, want, bv)
	return compare("", got, want, 1e-5), nil
}

// rope checks RoPE on both devices for a Llama head (NeoX or interleaved,
// optionally with llama3 scaling).
func (c *checker) rope(neox bool, scaling string) (KernelResult, error) {
	spec := device.RopeSpec{HeadDim: 64, RotDim: 64, Theta: 500000, Neox: neox}
	if scaling == "llama3" {
		spec.Scaling, spec.Factor, spec.LowFreqFactor, spec.HighFreqFactor, spec.OriginalMaxPos = "llama3", 8, 1, 4, 8192
	}
	return c.ropeSpec(spec, 4)
}

func (c *checker) gather() (KernelResult, error) {
	dim := 130
	xv := c.rand(10*dim, 1)
	idx := []int32{9, 0, 4}
	x, err := c.buf(xv)
	if err != nil {
		return KernelResult{}, err
	}
	o, err := c.buf(make([]float32, len(idx)*dim))
	if err != nil {
		return KernelResult{}, err
	}
	if err := c.k.GatherRows(o, x, dim, idx); err != nil {
		return KernelResult{}, err
	}
	got, err := c.get(o)
	if err != nil {
		return KernelResult{}, err
	}
	var want []float32
	for _, r := range idx {
		want = append(want, xv[int(r)*dim:(int(r)+1)*dim]...)
	}
	return compare("", got, want, 0), nil
}

// samplingKernels is the CUDA device's on-device sampling pair, which the
// device.Kernels seam does not (yet) carry; found by type assertion.
type samplingKernels interface {
	LogSoftmax(out, x device.Buf, rows, cols int) error
	Argmax(out, x device.Buf, rows, cols int) error
}

func (c *checker) sampling() (KernelResult, error) {
	sk, ok := c.k.(samplingKernels)
	if !ok {
		return KernelResult{}, fmt.Errorf("gpucheck: the device's kernels have no LogSoftmax/Argmax")
	}
	rows, cols := 4, 5000
	xv := c.rand(rows*cols, 10)
	xv[cols+17] = 50 // a clear winner in row 1; row 2 gets a tie, first wins
	xv[2*cols+5], xv[2*cols+4000] = 60, 60
	x, err := c.buf(xv)
	if err != nil {
		return KernelResult{}, err
	}
	o, err := c.buf(make([]float32, rows*cols))
	if err != nil {
		return KernelResult{}, err
	}
	am, err := c.buf(make([]float32, rows))
	if err != nil {
		return KernelResult{}, err
	}
	if err := sk.Argmax(am, x, rows, cols); err != nil {
		return KernelResult{}, err
	}
	if err := sk.LogSoftmax(o, x, rows, cols); err != nil {
		return KernelResult{}, err
	}
	got, err := c.get(o)
	if err != nil {
		return KernelResult{}, err
	}
	idxBits, err := c.get(am)
	if err != nil {
		return KernelResult{}, err
	}
	want := make([]float32, rows*cols)
	for r := range rows {
		kcpu.LogSoftmax(want[r*cols:(r+1)*cols], xv[r*cols:(r+1)*cols])
	}
	res := compare("", got, want, 1e-5)
	for r := range rows {
		gi := int(int32(math.Float32bits(idxBits[r])))
		if wi := kcpu.Argmax(xv[r*cols : (r+1)*cols]); gi != wi {
			res.OK = false
			res.Details += fmt.Sprintf("argmax row %d: %d, want %d; ", r, gi, wi)
		}
	}
	return res, nil
}
