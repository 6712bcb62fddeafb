//go:build cuda

package gpucheck

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/kvhost/kvhost/host/device"
	"github.com/kvhost/kvhost/host/device/rotary"
	kcpu "github.com/kvhost/kvhost/kernels/cpu"
)

// archKernels are the device's Elementwise and Experts capabilities
// (host/device/capabilities.go), found by type assertion.
type archKernels interface {
	device.Elementwise
	device.Experts
}

// archRouters are the routing rules of the served MoE families (their HF
// configs; DeepSeek-V2 at full size).
var archRouters = []struct {
	name string
	r    kcpu.Router
	bias bool
}{
	{"qwen3-moe", kcpu.Router{Experts: 128, TopK: 8, NormTopK: true}, false},
	{"deepseek-v2", kcpu.Router{Experts: 160, TopK: 6, Groups: 8, TopKGroups: 3, GroupScoring: kcpu.GroupMax, Scale: 16}, false},
	{"deepseek-v3", kcpu.Router{Experts: 256, TopK: 8, Scoring: kcpu.ScoreSigmoid, Groups: 8, TopKGroups: 4, GroupScoring: kcpu.GroupTop2Sum, NormTopK: true, Scale: 2.5}, true},
	{"gpt-oss", kcpu.Router{Experts: 32, TopK: 4, Scoring: kcpu.ScoreSoftmaxTopK}, false},
}

// checkArch runs the architecture kernels' cases.
func (c *checker) checkArch(run func(string, func() (KernelResult, error))) {
	for _, rc := range []struct {
		name string
		spec device.RopeSpec
	}{
		{"rope yarn deepseek query (offset 128)", device.RopeSpec{HeadDim: 192, RotDim: 64, RotOffset: 128, Theta: 10000,
			Scaling: "deepseek_yarn", Factor: 40, OriginalMaxPos: 4096, BetaFast: 32, BetaSlow: 1, Mscale: 0.707, MscaleAllDim: 0.707}},
		{"rope yarn gpt-oss (not truncated)", device.RopeSpec{HeadDim: 64, RotDim: 64, Theta: 150000, Neox: true,
			Scaling: "yarn", Factor: 32, OriginalMaxPos: 4096, BetaFast: 32, BetaSlow: 1, NoTruncate: true}},
		{"rope gemma3 global (linear 8)", device.RopeSpec{HeadDim: 256, RotDim: 256, Theta: 1e6, Neox: true, Scaling: "linear", Factor: 8}},
	} {
		run(rc.name, func() (KernelResult, error) { return c.ropeSpec(rc.spec, 4) })
	}
	ak, ok := c.k.(archKernels)
	if !ok {
		run("architecture kernels", func() (KernelResult, error) {
			return KernelResult{}, fmt.Errorf("gpucheck: the device's kernels lack the device.Elementwise and device.Experts capabilities")
		})
		return
	}
	for _, rt := range archRouters {
		run("route "+rt.name, func() (KernelResult, error) { return c.route(ak, rt.r, rt.bias) })
	}
	// f32 experts, and MXFP4 ones (gpt-oss's, decoded by matvec_q).
	for _, t := range []kcpu.DType{kcpu.F32, kcpu.MXFP4} {
		run("group_experts + gather + expert matmul "+t.String()+" + scatter_add", func() (KernelResult, error) { return c.groupScatter(ak, t) })
	}
	run("geglu_tanh / swiglu_oai / softcap / scale", func() (KernelResult, error) { return c.activations(ak) })
}

// ropeSpec applies spec on both devices to heads heads of 5 positions.
func (c *checker) ropeSpec(spec device.RopeSpec, heads int) (KernelResult, error) {
	n := 5
	xv := c.rand(n*heads*spec.HeadDim, 2)
	pos := []int32{0, 1, 77, 4095, 100000}
	x, err := c.buf(xv)
	if err != nil {
		return KernelResult{}, err
	}
	r, err := c.k.NewRope(spec)
	if err != nil {
		return KernelResult{}, err
	}
	if err := c.k.ApplyRope(r, x, n, heads, pos); err != nil {
		return KernelResult{}, err
	}
	got, err := c.get(x)
	if err != nil {
		return KernelResult{}, err
	}
	cr, err := rotary.Table(spec)
	if err != nil {
		return KernelResult{}, err
	}
	want := append([]float32(nil), xv...)
	cr.Apply(want, n, heads, pos)
	return compare("", got, want, 1e-5), nil
}

// ints uploads int32 values.
func (c *checker) ints(v []int32) (device.Span, error) {
	p, err := c.d.Malloc(int64(max(len(v), 1)) * 4)
	if err != nil {
		return device.Span{}, err
	}
	c.own = append(c.own, p)
	raw := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(raw[4*i:], uint32(x))
	}
	return device.Span{Ptr: p, Bytes: int64(len(raw))}, c.k.Upload(p, raw)
}

// getInts reads n int32 values back (through the float copy: same bytes).
func (c *checker) getInts(s device.Span, n int) ([]int32, error) {
	f, err := c.get(device.Buf{Ptr: s.Ptr, N: n})
	if err != nil {
		return nil, err
	}
	out := make([]int32, n)
	for i, v := range f {
		out[i] = int32(math.Float32bits(v))
	}
	return out, nil
}

// spread draws logits far apart compared with float32 rounding, so the
// devices agree on every choice.
func (c *checker) spread(n, e int) []float32 {
	out := make([]float32, n*e)
	for i := range n {
		for j, p := range c.rng.Perm(e) {
			out[i*e+j] = float32(p-e/2)*0.05 + (c.rng.Float32()-0.5)*0.01
		}
	}
	return out
}

func (c *checker) route(ak archKernels, r kcpu.Router, withBias bool) (KernelResult, error) {
	const n = 40
	lv := c.spread(n, r.Experts)
	var biasv []float32
	bias := device.Weight{}
	if withBias {
		biasv = make([]float32, r.Experts)
		for i := range biasv {
			biasv[i] = float32(c.rng.IntN(21)-10) * 0.0005
		}
		b, err := c.buf(biasv)
		if err != nil {
			return KernelResult{}, err
		}
		bias = device.Weight{Ptr: b.Ptr, Type: device.F32, Rows: 1, Cols: r.Experts, Bytes: 4 * int64(r.Experts)}
	}
	logits, err := c.buf(lv)
	if err != nil {
		return KernelResult{}, err
	}
	ids, err := c.ints(make([]int32, n*r.TopK))
	if err != nil {
		return KernelResult{}, err
	}
	w, err := c.buf(make([]float32, n*r.TopK))
	if err != nil {
		return KernelResult{}, err
	}
	if err := ak.RouteExperts(r, logits, n, bias, ids, w); err != nil {
		return KernelResult{}, err
	}
	gotIDs, err := c.getInts(ids, n*r.TopK)
	if err != nil {
		return KernelResult{}, err
	}
	gotW, err := c.get(w)
	if err != nil {
		return KernelResult{}, err
	}
	gotScores, err := c.get(logits)
	if err != nil {
		return KernelResult{}, err
	}
	wantScores := append([]float32(nil), lv...)
	wantIDs := make([]int32, n*r.TopK)
	wantW := make([]float32, n*r.TopK)
	c.cpu.Route(r, wantScores, n, biasv, wantIDs, wantW)
	res := compare("", gotW, wantW, 1e-5)
	if sr := compare("", gotScores, wantScores, 1e-5); !sr.OK {
		res.OK = false
		res.Details += fmt.Sprintf("scores differ by %g; ", sr.MaxAbs)
	}
	for i := range wantIDs {
		if gotIDs[i] != wantIDs[i] {
			res.OK = false
			res.Details += fmt.Sprintf("token %d choice %d: expert %d, want %d; ", i/r.TopK, i%r.TopK, gotIDs[i], wantIDs[i])
			break
		}
	}
	return res, nil
}

func (c *checker) groupScatter(ak archKernels, wt kcpu.DType) (KernelResult, error) {
	const n, k, experts, dim = 50, 4, 16, 96
	idv := make([]int32, n*k)
	for i := range n {
		for j, e := range c.rng.Perm(experts)[:k] {
			idv[i*k+j] = int32(e)
		}
	}
	wv := c.rand(n*k, 1)
	ids, err := c.ints(idv)
	if err != nil {
		return KernelResult{}, err
	}
	w, err := c.buf(wv)
	if err != nil {
		return KernelResult{}, err
	}
	offsets, err := c.ints(make([]int32, experts+1))
	if err != nil {
		return KernelResult{}, err
	}
	tokens, err := c.ints(make([]int32, n*k))
	if err != nil {
		return KernelResult{}, err
	}
	slots, err := c.ints(make([]int32, n*k))
	if err != nil {
		return KernelResult{}, err
	}
	gw, err := c.buf(make([]float32, n*k))
	if err != nil {
		return KernelResult{}, err
	}
	dg := device.ExpertGroups{Experts: experts, K: k, Offsets: offsets, Tokens: tokens, Slots: slots, Weights: gw}
	if err := ak.GroupExperts(ids, w, n, dg); err != nil {
		return KernelResult{}, err
	}
	g := kcpu.NewExpertGroups(experts, k, n)
	if err := g.Group(idv, wv, n); err != nil {
		return KernelResult{}, err
	}
	res := KernelResult{Tol: 1e-5, OK: true}
	for _, a := range []struct {
		name string
		s    device.Span
		want []int32
	}{{"offsets", offsets, g.Offsets}, {"tokens", tokens, g.Tokens}, {"slots", slots, g.Slots}} {
		got, err := c.getInts(a.s, len(a.want))
		if err != nil {
			return KernelResult{}, err
		}
		for i := range got {
			if got[i] != a.want[i] {
				res.OK = false
				res.Details += fmt.Sprintf("%s[%d] = %d, want %d; ", a.name, i, got[i], a.want[i])
				break
			}
		}
	}
	gotGW, err := c.get(gw)
	if err != nil {
		return KernelResult{}, err
	}
	if r := compare("", gotGW, g.Weights, 0); !r.OK {
		res.OK = false
		res.Details += "grouped weights differ; "
	}
	// Gather the token rows by the device's token list, then scatter
	// random expert outputs back onto a shared expert's output.
	xv := c.rand(n*dim, 1)
	x, err := c.buf(xv)
	if err != nil {
		return KernelResult{}, err
	}
	xs, err := c.buf(make([]float32, n*k*dim))
	if err != nil {
		return KernelResult{}, err
	}
	if err := ak.GatherRowsAt(xs, x, dim, tokens, n*k); err != nil {
		return KernelResult{}, err
	}
	gotXS, err := c.get(xs)
	if err != nil {
		return KernelResult{}, err
	}
	wantXS := make([]float32, 0, n*k*dim)
	for _, t := range g.Tokens {
		wantXS = append(wantXS, xv[int(t)*dim:(int(t)+1)*dim]...)
	}
	if r := compare("", gotXS, wantXS, 0); !r.OK {
		res.OK = false
		res.Details += "gathered rows differ; "
	}
	// Each expert's rows through its slice of a stacked weight.
	const width = 48
	wm := c.rand(experts*width*dim, 0.2)
	ew, em, err := c.weight(wt, experts*width, dim, wm)
	if err != nil {
		return KernelResult{}, err
	}
	ey, err := c.buf(make([]float32, n*k*width))
	if err != nil {
		return KernelResult{}, err
	}
	if err := ak.ExpertMatMul(ey, xs, n, ew, dg); err != nil {
		return KernelResult{}, err
	}
	gotEY, err := c.get(ey)
	if err != nil {
		return KernelResult{}, err
	}
	wantEY := make([]float32, n*k*width)
	eb := len(em.Data) / experts
	for e := range experts {
		lo, hi := g.Rows(e)
		if hi > lo {
			sub := kcpu.Matrix{Type: em.Type, Rows: width, Cols: dim, Data: em.Data[e*eb : (e+1)*eb]}
			if wt.Quantized() { // matvec_q's reference: decoded weights, f32 x (CheckKernels' matmul)
				quantRef(wantEY[lo*width:hi*width], wantXS[lo*dim:hi*dim], hi-lo, sub)
			} else {
				c.cpu.MatMul(wantEY[lo*width:hi*width], wantXS[lo*dim:hi*dim], hi-lo, sub)
			}
		}
	}
	if r := compare("", gotEY, wantEY, 1e-4); !r.OK {
		res.OK = false
		res.Details += fmt.Sprintf("expert matmul differs by %g; ", r.MaxAbs)
	}
	yv := c.rand(n*k*dim, 1)
	y, err := c.buf(yv)
	if err != nil {
		return KernelResult{}, err
	}
	ov := c.rand(n*dim, 1)
	out, err := c.buf(ov)
	if err != nil {
		return KernelResult{}, err
	}
	if err := ak.ScatterAdd(out, y, dim, dg, n, true); err != nil {
		return KernelResult{}, err
	}
	got, err := c.get(out)
	if err != nil {
		return KernelResult{}, err
	}
	want := append([]float32(nil), ov...)
	c.cpu.ScatterAdd(want, yv, dim, g, true)
	r := compare("", got, want, 1e-5)
	r.OK = r.OK && res.OK
	r.Details = res.Details
	return r, nil
}

func (c *checker) activations(ak archKernels) (KernelResult, error) {
	const n = 5000
	gv, uv, xv := c.rand(n, 12), c.rand(n, 12), c.rand(n, 80)
	bufs := make([]device.Buf, 0, 6)
	for _, v := range [][]float32{gv, uv, make([]float32, n), make([]float32, n), xv, xv} {
		b, err := c.buf(v)
		if err != nil {
			return KernelResult{}, err
		}
		bufs = append(bufs, b)
	}
	gate, up, geglu, oai, capped, scaled := bufs[0], bufs[1], bufs[2], bufs[3], bufs[4], bufs[5]
	if err := ak.GeGLUTanh(geglu, gate, up); err != nil {
		return KernelResult{}, err
	}
	if err := ak.SwiGLUOAI(oai, gate, up, 1.702, 7); err != nil {
		return KernelResult{}, err
	}
	if err := ak.SoftCap(capped, 30); err != nil {
		return KernelResult{}, err
	}
	if err := ak.Scale(scaled, 48); err != nil {
		return KernelResult{}, err
	}
	var got, want []float32
	for i, b := range []device.Buf{geglu, oai, capped, scaled} {
		g, err := c.get(b)
		if err != nil {
			return KernelResult{}, err
		}
		w := make([]float32, n)
		switch i {
		case 0:
			kcpu.GeGLUTanh(w, gv, uv)
		case 1:
			kcpu.SwiGLUOAI(w, gv, uv, 1.702, 7)
		case 2:
			copy(w, xv)
			kcpu.SoftCap(w, 30)
		case 3:
			copy(w, xv)
			kcpu.Scale(w, 48)
		}
		got, want = append(got, g...), append(want, w...)
	}
	return compare("", got, want, 1e-5), nil
}
