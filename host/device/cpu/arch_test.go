package cpu

import (
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"unsafe"

	"github.com/kvhost/kvhost/host/device"
	kcpu "github.com/kvhost/kvhost/kernels/cpu"
)

// archRig puts host data on a CPU device for the capability tests.
type archRig struct {
	t *testing.T
	d *Device
	k *kernels
	r *rand.Rand
}

func newArchRig(t *testing.T) *archRig {
	d := open(t, 256<<20)
	return &archRig{t: t, d: d, k: &d.kern, r: rand.New(rand.NewPCG(1, 2))}
}

func (a *archRig) alloc(bytes int64) device.Ptr {
	a.t.Helper()
	p, err := a.d.Malloc(max(bytes, 4))
	if err != nil {
		a.t.Fatal(err)
	}
	return p
}

// buf copies v onto the device.
func (a *archRig) buf(v []float32) device.Buf {
	a.t.Helper()
	b := device.Buf{Ptr: a.alloc(int64(len(v)) * 4), N: len(v)}
	if err := a.k.CopyFromHost(b, v); err != nil {
		a.t.Fatal(err)
	}
	return b
}

func (a *archRig) zeros(n int) device.Buf { return a.buf(make([]float32, n)) }

func (a *archRig) rand(n int, scale float32) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = scale * float32(a.r.NormFloat64())
	}
	return v
}

func (a *archRig) host(b device.Buf) []float32 {
	a.t.Helper()
	out := make([]float32, b.N)
	if err := a.k.CopyToHost(out, b); err != nil {
		a.t.Fatal(err)
	}
	return out
}

// ints allocates n int32 on the device.
func (a *archRig) ints(n int) device.Span {
	return device.Span{Ptr: a.alloc(4 * int64(n)), Bytes: 4 * int64(n)}
}

func (a *archRig) hostInts(s device.Span, n int) []int32 {
	a.t.Helper()
	raw, err := a.d.Bytes(s.Ptr, 4*int64(n))
	if err != nil {
		a.t.Fatal(err)
	}
	return slices.Clone(unsafe.Slice((*int32)(unsafe.Pointer(&raw[0])), n))
}

// weight uploads an F32 (rows × cols) or Q8_0 matrix of v.
func (a *archRig) weight(v []float32, rows, cols int, typ device.DType) device.Weight {
	a.t.Helper()
	var raw []byte
	switch typ {
	case device.F32:
		raw = unsafe.Slice((*byte)(unsafe.Pointer(&v[0])), 4*len(v))
	case device.Q8_0:
		raw = make([]byte, len(v)/kcpu.Q8Block*kcpu.Q8BlockBytes)
		if err := kcpu.QuantizeQ8_0(raw, v); err != nil {
			a.t.Fatal(err)
		}
	}
	p := a.alloc(int64(len(raw)))
	if err := a.k.Upload(p, raw); err != nil {
		a.t.Fatal(err)
	}
	return device.Weight{Ptr: p, Type: typ, Rows: rows, Cols: cols, Bytes: int64(len(raw))}
}

func (a *archRig) matrix(w device.Weight) kcpu.Matrix {
	a.t.Helper()
	m, err := a.k.matrix(w)
	if err != nil {
		a.t.Fatal(err)
	}
	return m
}

// wantErr fails unless err is an error whose message holds every part.
func wantErr(t *testing.T, what string, err error, parts ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: accepted", what)
	}
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			t.Fatalf("%s: error %q does not say %q", what, err, p)
		}
	}
}

func same(t *testing.T, what string, got, want []float32) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	for i := range got {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			t.Fatalf("%s[%d] = %v, kernels/cpu gives %v", what, i, got[i], want[i])
		}
	}
}

// TestElementwiseEqualKernels: each elementwise method gives kernels/cpu's
// values exactly, eagerly and replayed from a captured graph (which reads
// the inputs as they are at the replay), and names a bad operand.
func TestElementwiseEqualKernels(t *testing.T) {
	a := newArchRig(t)
	const n = 1003 // past the vector width, with a tail
	gv, uv, xv := a.rand(n, 3), a.rand(n, 3), a.rand(n, 40)
	gate, up, x := a.buf(gv), a.buf(uv), a.buf(xv)
	out := a.zeros(n)
	ops := []struct {
		name string
		dev  func() error
		want func() []float32
	}{
		{"geglu", func() error { return a.k.GeGLUTanh(out, gate, up) },
			func() []float32 { w := make([]float32, n); kcpu.GeGLUTanh(w, gv, uv); return w }},
		{"swiglu-oai", func() error { return a.k.SwiGLUOAI(out, gate, up, 1.702, 7) },
			func() []float32 { w := make([]float32, n); kcpu.SwiGLUOAI(w, gv, uv, 1.702, 7); return w }},
		{"relu²", func() error { return a.k.ReLUSquare(out, x) },
			func() []float32 { w := make([]float32, n); kcpu.ReLUSquare(w, xv); return w }},
		{"add-scaled", func() error { return a.k.AddScaled(out, gate, x, 0.25) },
			func() []float32 { w := make([]float32, n); kcpu.AddScaled(w, gv, xv, 0.25); return w }},
		{"soft cap", func() error {
			if err := a.k.CopyFromHost(out, xv); err != nil {
				return err
			}
			return a.k.SoftCap(out, 30)
		}, func() []float32 { w := slices.Clone(xv); kcpu.SoftCap(w, 30); return w }},
		{"scale", func() error {
			if err := a.k.CopyFromHost(out, xv); err != nil {
				return err
			}
			return a.k.Scale(out, 48)
		}, func() []float32 { w := slices.Clone(xv); kcpu.Scale(w, 48); return w }},
	}
	for _, op := range ops {
		if err := op.dev(); err != nil {
			t.Fatalf("%s: %v", op.name, err)
		}
		same(t, op.name, a.host(out), op.want())
	}
	// Captured: the launches read gate, up and x when replayed.
	if err := a.d.BeginCapture(); err != nil {
		t.Fatal(err)
	}
	if err := a.k.GeGLUTanh(out, gate, up); err != nil {
		t.Fatal(err)
	}
	if err := a.k.SoftCap(out, 5); err != nil {
		t.Fatal(err)
	}
	g, err := a.d.EndCapture()
	if err != nil {
		t.Fatal(err)
	}
	gv2 := a.rand(n, 2)
	if err := a.k.CopyFromHost(gate, gv2); err != nil {
		t.Fatal(err)
	}
	if err := g.Launch(); err != nil {
		t.Fatal(err)
	}
	want := make([]float32, n)
	kcpu.GeGLUTanh(want, gv2, uv)
	kcpu.SoftCap(want, 5)
	same(t, "replayed geglu+softcap", a.host(out), want)

	short := device.Buf{Ptr: out.Ptr, N: n - 1}
	wantErr(t, "geglu of unequal lengths", a.k.GeGLUTanh(short, gate, up), "geglu", "1003", "1002")
	wantErr(t, "swiglu-oai of unequal lengths", a.k.SwiGLUOAI(out, short, up, 1.702, 7), "swiglu-oai", "1002 floats into 1003")
	wantErr(t, "swiglu-oai limit 0", a.k.SwiGLUOAI(out, gate, up, 1.702, 0), "limit 0")
	wantErr(t, "relu² of a short input", a.k.ReLUSquare(out, short), "relu²", "1002 floats into 1003")
	wantErr(t, "add-scaled of a short operand", a.k.AddScaled(out, gate, short, 1), "add-scaled", "1002")
	wantErr(t, "soft cap 0", a.k.SoftCap(out, 0), "soft cap 0")
	wantErr(t, "scale of unallocated memory", a.k.Scale(device.Buf{Ptr: 12345, N: 4}, 2), "not device memory")
	wantErr(t, "geglu past its allocation", a.k.GeGLUTanh(device.Buf{Ptr: out.Ptr, N: 1 << 20}, device.Buf{Ptr: gate.Ptr, N: 1 << 20}, device.Buf{Ptr: up.Ptr, N: 1 << 20}), "past its allocation")
}

// moeRig is one routed step's buffers on the device.
type moeRig struct {
	r                device.Router
	n, hidden, width int
	logitsV, biasV   []float32
	xV               []float32
	logits, x        device.Buf
	bias             device.Weight
	ids              device.Span
	weights          device.Buf
	g                device.ExpertGroups
	xs, ys, out      device.Buf
	w                device.Weight
}

func newMoERig(a *archRig, typ device.DType) *moeRig {
	m := &moeRig{
		r: device.Router{Experts: 16, TopK: 4, Scoring: kcpu.ScoreSigmoid, Groups: 4, TopKGroups: 2, GroupScoring: kcpu.GroupTop2Sum, NormTopK: true, Scale: 2.5},
		n: 7, hidden: 64, width: 32,
	}
	E, K := m.r.Experts, m.r.TopK
	m.logitsV, m.biasV, m.xV = a.rand(m.n*E, 2), a.rand(E, 0.5), a.rand(m.n*m.hidden, 1)
	m.logits, m.x = a.buf(m.logitsV), a.buf(m.xV)
	m.bias = a.weight(slices.Clone(m.biasV), 1, E, device.F32)
	m.ids, m.weights = a.ints(m.n*K), a.zeros(m.n*K)
	m.g = device.ExpertGroups{Experts: E, K: K, Offsets: a.ints(E + 1), Tokens: a.ints(m.n * K), Slots: a.ints(m.n * K), Weights: a.zeros(m.n * K)}
	m.xs, m.ys, m.out = a.zeros(m.n*K*m.hidden), a.zeros(m.n*K*m.width), a.zeros(m.n*m.width)
	m.w = a.weight(a.rand(E*m.width*m.hidden, 0.1), E*m.width, m.hidden, typ)
	return m
}

// step runs route, group, gather, expert matmul and scatter-add.
func (m *moeRig) step(k *kernels, accumulate bool) error {
	for _, f := range []func() error{
		func() error { return k.RouteExperts(m.r, m.logits, m.n, m.bias, m.ids, m.weights) },
		func() error { return k.GroupExperts(m.ids, m.weights, m.n, m.g) },
		func() error { return k.GatherRowsAt(m.xs, m.x, m.hidden, m.g.Tokens, m.n*m.r.TopK) },
		func() error { return k.ExpertMatMul(m.ys, m.xs, m.n, m.w, m.g) },
		func() error { return k.ScatterAdd(m.out, m.ys, m.width, m.g, m.n, accumulate) },
	} {
		if err := f(); err != nil {
			return err
		}
	}
	return nil
}

// want computes the same step with kernels/cpu on host copies: the
// routing, the grouping, and each token's output as the weighted sum of its
// experts' rows (every expert's matrix its slice of the stack).
func (m *moeRig) want(a *archRig, logits []float32, prev []float32) (ids []int32, weights, out []float32, g *kcpu.ExpertGroups) {
	E, K := m.r.Experts, m.r.TopK
	lg := slices.Clone(logits)
	ids, weights = make([]int32, m.n*K), make([]float32, m.n*K)
	a.d.pool.Route(m.r, lg, m.n, m.biasV, ids, weights)
	g = kcpu.NewExpertGroups(E, K, m.n)
	if err := g.Group(ids, weights, m.n); err != nil {
		a.t.Fatal(err)
	}
	mat := a.matrix(m.w)
	eb := len(mat.Data) / E
	ys := make([]float32, m.n*K*m.width)
	for e := range E {
		lo, hi := g.Rows(e)
		var xs []float32
		for _, tok := range g.Tokens[lo:hi] {
			xs = append(xs, m.xV[int(tok)*m.hidden:(int(tok)+1)*m.hidden]...)
		}
		sub := kcpu.Matrix{Type: mat.Type, Rows: m.width, Cols: m.hidden, Data: mat.Data[e*eb : (e+1)*eb]}
		a.d.pool.MatMul(ys[lo*m.width:hi*m.width], xs, hi-lo, sub)
	}
	out = make([]float32, m.n*m.width)
	copy(out, prev)
	a.d.pool.ScatterAdd(out, ys, m.width, g, prev != nil)
	return ids, weights, out, g
}

// TestExpertsEqualKernels: routing, grouping, the gather, the grouped
// matmul (f32 and q8_0 experts) and the scatter-add on the device give
// kernels/cpu's results, eagerly and from a captured graph replayed on new
// router logits, with the shared output accumulated or not.
func TestExpertsEqualKernels(t *testing.T) {
	for _, typ := range []device.DType{device.F32, device.Q8_0} {
		t.Run(typ.String(), func(t *testing.T) {
			a := newArchRig(t)
			m := newMoERig(a, typ)
			if err := m.step(a.k, false); err != nil {
				t.Fatal(err)
			}
			ids, weights, out, g := m.want(a, m.logitsV, nil)
			if got := a.hostInts(m.ids, len(ids)); !slices.Equal(got, ids) {
				t.Fatalf("expert ids %v, kernels/cpu %v", got, ids)
			}
			same(t, "router weights", a.host(m.weights), weights)
			for _, c := range []struct {
				name string
				s    device.Span
				want []int32
			}{{"offsets", m.g.Offsets, g.Offsets}, {"tokens", m.g.Tokens, g.Tokens}, {"slots", m.g.Slots, g.Slots}} {
				if got := a.hostInts(c.s, len(c.want)); !slices.Equal(got, c.want) {
					t.Fatalf("group %s %v, kernels/cpu %v", c.name, got, c.want)
				}
			}
			same(t, "group weights", a.host(m.g.Weights), g.Weights)
			same(t, "scatter-add", a.host(m.out), out)

			// Accumulating onto what out holds (a shared expert's output).
			prev := a.host(m.out)
			if err := a.k.CopyFromHost(m.logits, m.logitsV); err != nil { // routing left scores there
				t.Fatal(err)
			}
			if err := m.step(a.k, true); err != nil {
				t.Fatal(err)
			}
			_, _, acc, _ := m.want(a, m.logitsV, prev)
			same(t, "scatter-add accumulated", a.host(m.out), acc)

			// Captured, then replayed on other logits: a new routing.
			if err := a.d.BeginCapture(); err != nil {
				t.Fatal(err)
			}
			if err := m.step(a.k, false); err != nil {
				t.Fatal(err)
			}
			gr, err := a.d.EndCapture()
			if err != nil {
				t.Fatal(err)
			}
			next := a.rand(m.n*m.r.Experts, 2)
			if err := a.k.CopyFromHost(m.logits, next); err != nil {
				t.Fatal(err)
			}
			if err := gr.Launch(); err != nil {
				t.Fatal(err)
			}
			_, _, out2, _ := m.want(a, next, nil)
			same(t, "replayed step", a.host(m.out), out2)
		})
	}
}

// TestExpertsRefuseBadShapes: each capability names what is wrong.
func TestExpertsRefuseBadShapes(t *testing.T) {
	a := newArchRig(t)
	m := newMoERig(a, device.F32)
	bad := m.r
	bad.TopK = 17
	wantErr(t, "top-k past the experts", a.k.RouteExperts(bad, m.logits, m.n, m.bias, m.ids, m.weights), "top-k 17", "experts 16")
	wantErr(t, "short logits", a.k.RouteExperts(m.r, device.Buf{Ptr: m.logits.Ptr, N: 10}, m.n, m.bias, m.ids, m.weights), "router logits", "10", "112")
	wantErr(t, "short ids", a.k.RouteExperts(m.r, m.logits, m.n, m.bias, device.Span{Ptr: m.ids.Ptr, Bytes: 8}, m.weights), "router ids", "8 bytes")
	wantErr(t, "short bias", a.k.RouteExperts(m.r, m.logits, m.n, device.Weight{Ptr: m.bias.Ptr, Type: device.F32, Rows: 1, Cols: 3, Bytes: 12}, m.ids, m.weights), "router bias", "16 values")
	g := m.g
	g.Offsets.Bytes = 8
	wantErr(t, "short offsets", a.k.GroupExperts(m.ids, m.weights, m.n, g), "offsets", "8 bytes")
	g = m.g
	g.K = 0
	wantErr(t, "top 0 groups", a.k.GroupExperts(m.ids, m.weights, m.n, g), "top 0")
	wantErr(t, "groups past their room", a.k.GroupExperts(m.ids, m.weights, m.n+1, m.g), "tokens", "int32")
	// Expert ids out of range are refused eagerly.
	if err := a.k.CopyFromHost(device.Buf{Ptr: m.ids.Ptr, N: 1}, []float32{math.Float32frombits(99)}); err != nil {
		t.Fatal(err)
	}
	wantErr(t, "expert id 99", a.k.GroupExperts(m.ids, m.weights, m.n, m.g), "expert 99")
	w := m.w
	w.Rows--
	wantErr(t, "weights not split over experts", a.k.ExpertMatMul(m.ys, m.xs, m.n, w, m.g), "do not split over 16 experts")
	wantErr(t, "short expert output", a.k.ExpertMatMul(device.Buf{Ptr: m.ys.Ptr, N: 5}, m.xs, m.n, m.w, m.g), "expert matmul output", "896")
	wantErr(t, "short gather indices", a.k.GatherRowsAt(m.xs, m.x, m.hidden, device.Span{Ptr: m.g.Tokens.Ptr, Bytes: 4}, 28), "gather indices")
	wantErr(t, "short scatter input", a.k.ScatterAdd(m.out, device.Buf{Ptr: m.ys.Ptr, N: 3}, m.width, m.g, m.n, false), "scatter input", "896")
}

// mambaRig holds a small Mamba-2 layer's inputs and a state pool of 3
// slots on the device.
type mambaRig struct {
	s                      device.Mamba2
	convW, convB, A, D, dB device.Weight
	convWV, convBV         []float32
	AV, DV, dBV            []float32
	st                     device.MambaStates
}

func newMambaRig(a *archRig, convType device.DType) *mambaRig {
	s := device.Mamba2{Heads: 4, HeadDim: 8, Groups: 2, State: 8, ConvKernel: 4, DtMax: float32(math.Inf(1))}
	m := &mambaRig{s: s}
	C, H := s.ConvDim(), s.Heads
	m.convWV, m.convBV = a.rand(C*s.ConvKernel, 0.5), a.rand(C, 0.1)
	m.AV, m.DV, m.dBV = make([]float32, H), a.rand(H, 1), a.rand(H, 0.5)
	for h := range m.AV {
		m.AV[h] = -float32(math.Exp(a.r.Float64()))
	}
	m.convW = a.weight(slices.Clone(m.convWV), C, s.ConvKernel, device.F32)
	m.convB = a.weight(slices.Clone(m.convBV), 1, C, device.F32)
	m.A, m.D, m.dB = a.weight(slices.Clone(m.AV), 1, H, device.F32), a.weight(slices.Clone(m.DV), 1, H, device.F32), a.weight(slices.Clone(m.dBV), 1, H, device.F32)
	eb := int64(4)
	if convType != device.F32 {
		eb = 2
	}
	const slots = 3
	cb, sb := eb*int64(s.ConvStateLen()), 4*int64(s.SSMStateLen())
	m.st = device.MambaStates{Conv: device.Span{Ptr: a.alloc(slots * cb), Bytes: slots * cb}, SSM: device.Span{Ptr: a.alloc(slots * sb), Bytes: slots * sb},
		ConvType: convType, ConvBytes: cb, SSMBytes: sb}
	return m
}

// states copies the pool's bytes to the host.
func (m *mambaRig) states(a *archRig) (conv, ssm []byte) {
	c, err := a.d.Bytes(m.st.Conv.Ptr, m.st.Conv.Bytes)
	if err != nil {
		a.t.Fatal(err)
	}
	s, err := a.d.Bytes(m.st.SSM.Ptr, m.st.SSM.Bytes)
	if err != nil {
		a.t.Fatal(err)
	}
	return slices.Clone(c), slices.Clone(s)
}

// want runs the batch with kernels/cpu on copies of the states.
func (m *mambaRig) want(a *archRig, conv, ssm []byte, xbc, dt []float32, b device.MambaBatch) (y, xbcOut []float32, convOut, ssmOut []byte) {
	var seqs []kcpu.MambaSeq
	for q, sl := range b.Slots {
		cb, sb := int(m.st.ConvBytes), int(m.st.SSMBytes)
		seqs = append(seqs, kcpu.MambaSeq{Len: int(b.Starts[q+1] - b.Starts[q]),
			Conv: kcpu.ConvState{Type: kcpu.DType(m.st.ConvType), Data: conv[int(sl)*cb : (int(sl)+1)*cb]},
			SSM:  f32View(ssm[int(sl)*sb : (int(sl)+1)*sb])})
	}
	rows := int(b.Starts[len(b.Slots)])
	xbcOut = slices.Clone(xbc)
	a.d.pool.MambaConv(m.s, xbcOut, xbcOut, m.convWV, m.convBV, seqs)
	y = make([]float32, rows*m.s.Inner())
	scratch := make([]float32, kcpu.MambaScanScratch(a.d.pool, m.s, rows, len(seqs)))
	a.d.pool.MambaScan(m.s, y, xbcOut, dt, kcpu.MambaParams{A: m.AV, D: m.DV, DtBias: m.dBV}, seqs, scratch)
	return y, xbcOut, conv, ssm
}

func (m *mambaRig) run(a *archRig, xbc, y, dt, scratch device.Buf, b device.MambaBatch) error {
	if err := a.k.MambaConv(m.s, xbc, xbc, m.convW, m.convB, m.st, b); err != nil {
		return err
	}
	return a.k.MambaScan(m.s, y, xbc, dt, device.MambaParams{A: m.A, D: m.D, DtBias: m.dB}, m.st, b, scratch)
}

// TestMambaEqualsKernels: the conv and the scan over a mixed batch (a
// 20-token prefill chunk and two decode rows in other slots) give
// kernels/cpu's outputs and leave its states (f32 and bf16 conv states);
// a captured decode step replayed with the slots swapped reads the slots
// it is given; the gated norm equals kernels/cpu's.
func TestMambaEqualsKernels(t *testing.T) {
	for _, ct := range []device.DType{device.F32, device.BF16} {
		t.Run(ct.String(), func(t *testing.T) {
			a := newArchRig(t)
			m := newMambaRig(a, ct)
			s := m.s
			b := device.MambaBatch{Starts: []int32{0, 20, 21, 22}, Slots: []int32{2, 0, 1}}
			rows := 22
			xbcV, dtV := a.rand(rows*s.ConvDim(), 1), a.rand(rows*s.Heads, 1)
			xbc, dt, y := a.buf(xbcV), a.buf(dtV), a.zeros(rows*s.Inner())
			scratch := a.zeros(a.k.MambaScanScratch(s, rows, 3))
			for step := range 2 { // the second call continues from the states the first left
				conv, ssm := m.states(a)
				wy, wx, wconv, wssm := m.want(a, conv, ssm, xbcV, dtV, b)
				if err := a.k.CopyFromHost(xbc, xbcV); err != nil {
					t.Fatal(err)
				}
				if err := m.run(a, xbc, y, dt, scratch, b); err != nil {
					t.Fatal(err)
				}
				same(t, "conv output", a.host(xbc), wx)
				same(t, "scan output", a.host(y), wy)
				gc, gs := m.states(a)
				if !slices.Equal(gc, wconv) || !slices.Equal(gs, wssm) {
					t.Fatalf("step %d: states differ from kernels/cpu's", step)
				}
			}

			// A decode step captured over slots {0, 1}, replayed over {1, 0}.
			db := device.MambaBatch{Starts: []int32{0, 1, 2}, Slots: []int32{0, 1}}
			dx, ddt := a.rand(2*s.ConvDim(), 1), a.rand(2*s.Heads, 1)
			if err := a.k.CopyFromHost(xbc, dx); err != nil {
				t.Fatal(err)
			}
			if err := a.k.CopyFromHost(dt, ddt); err != nil {
				t.Fatal(err)
			}
			if err := a.d.BeginCapture(); err != nil {
				t.Fatal(err)
			}
			dscratch := a.zeros(a.k.MambaScanScratch(s, 2, 2))
			if err := m.run(a, device.Buf{Ptr: xbc.Ptr, N: 2 * s.ConvDim()}, device.Buf{Ptr: y.Ptr, N: 2 * s.Inner()}, dt, dscratch, db); err != nil {
				t.Fatal(err)
			}
			gr, err := a.d.EndCapture()
			if err != nil {
				t.Fatal(err)
			}
			db.Slots[0], db.Slots[1] = 1, 0
			conv, ssm := m.states(a)
			wy, _, wconv, wssm := m.want(a, conv, ssm, dx, ddt, db)
			if err := gr.Launch(); err != nil {
				t.Fatal(err)
			}
			same(t, "replayed decode scan", a.host(y)[:2*s.Inner()], wy)
			if gc, gs := m.states(a); !slices.Equal(gc, wconv) || !slices.Equal(gs, wssm) {
				t.Fatal("replayed decode: states differ from kernels/cpu's over the swapped slots")
			}

			// Gated norm, Nemotron-H's groups.
			yv, zv, nw := a.rand(3*s.Inner(), 1), a.rand(3*s.Inner(), 1), a.rand(s.Inner(), 1)
			out := a.zeros(3 * s.Inner())
			if err := a.k.GatedRMSNorm(out, a.buf(yv), a.buf(zv), a.weight(slices.Clone(nw), 1, s.Inner(), device.F32), 3, s.Inner(), s.Inner()/s.Groups, 1e-5); err != nil {
				t.Fatal(err)
			}
			want := make([]float32, len(yv))
			a.d.pool.GatedRMSNorm(want, yv, zv, nw, 3, s.Inner(), s.Inner()/s.Groups, 1e-5)
			same(t, "gated norm", a.host(out), want)
		})
	}
}

// TestMambaRefusesBadShapes: each Mamba method names what is wrong.
func TestMambaRefusesBadShapes(t *testing.T) {
	a := newArchRig(t)
	m := newMambaRig(a, device.F32)
	s := m.s
	b := device.MambaBatch{Starts: []int32{0, 2}, Slots: []int32{1}}
	xbc, dt, y := a.zeros(2*s.ConvDim()), a.zeros(2*s.Heads), a.zeros(2*s.Inner())
	scratch := a.zeros(a.k.MambaScanScratch(s, 2, 1))
	prm := device.MambaParams{A: m.A, D: m.D, DtBias: m.dB}
	wantErr(t, "slot past the pool", a.k.MambaConv(s, xbc, xbc, m.convW, m.convB, m.st, device.MambaBatch{Starts: []int32{0, 2}, Slots: []int32{3}}), "state slot 3", "pool of 3")
	wantErr(t, "starts not from 0", a.k.MambaScan(s, y, xbc, dt, prm, m.st, device.MambaBatch{Starts: []int32{1, 2}, Slots: []int32{0}}, scratch), "starts from 0")
	wantErr(t, "decreasing starts", a.k.MambaConv(s, xbc, xbc, m.convW, m.convB, m.st, device.MambaBatch{Starts: []int32{0, 2, 1}, Slots: []int32{0, 1}}), "ends at row 1")
	bad := s
	bad.Groups = 3
	wantErr(t, "heads not over groups", a.k.MambaConv(bad, xbc, xbc, m.convW, m.convB, m.st, b), "groups 3")
	wantErr(t, "short conv input", a.k.MambaConv(s, xbc, device.Buf{Ptr: xbc.Ptr, N: 7}, m.convW, m.convB, m.st, b), "mamba conv input", "7")
	wantErr(t, "overlapping conv output", a.k.MambaConv(s, device.Buf{Ptr: xbc.Ptr + 4, N: xbc.N - 1}, device.Buf{Ptr: xbc.Ptr, N: xbc.N - 1}, m.convW, m.convB, m.st, device.MambaBatch{Starts: []int32{0, 1}, Slots: []int32{0}}), "overlaps")
	q8 := a.weight(a.rand(s.ConvDim()*32, 1), s.ConvDim(), 32, device.Q8_0)
	wantErr(t, "q8_0 conv weights", a.k.MambaConv(s, xbc, xbc, q8, m.convB, m.st, b), "conv weights must be f32")
	st := m.st
	st.SSMBytes = 16
	wantErr(t, "small ssm slot", a.k.MambaScan(s, y, xbc, dt, prm, st, b, scratch), "ssm state slot of 16 bytes")
	st = m.st
	st.ConvType = device.Q8_0
	wantErr(t, "q8_0 conv state", a.k.MambaConv(s, xbc, xbc, m.convW, m.convB, st, b), "conv state type q8_0")
	wantErr(t, "short scratch", a.k.MambaScan(s, y, xbc, dt, prm, m.st, b, device.Buf{Ptr: scratch.Ptr, N: 1}), "mamba scan scratch")
	wantErr(t, "short A", a.k.MambaScan(s, y, xbc, dt, device.MambaParams{A: device.Weight{Ptr: m.A.Ptr, Type: device.F32, Rows: 1, Cols: 2, Bytes: 8}, D: m.D, DtBias: m.dB}, m.st, b, scratch), "mamba A", "4 values")
	wantErr(t, "group not dividing the row", a.k.GatedRMSNorm(y, y, y, m.A, 1, 16, 3, 1e-5), "groups of 3")
	wantErr(t, "short norm weight", a.k.GatedRMSNorm(y, y, y, m.A, 1, 16, 8, 1e-5), "gated norm weight", "16 values")
}
