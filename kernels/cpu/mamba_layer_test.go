package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/kvhost/kvhost/internal/mambaref"
)

// mixer runs one Mamba-2 mixer layer on the kernels the way a model does
// (docs/architectures/mamba2-hybrids.md, "Running the layer"):
//
//  1. the input projection as three MatMuls over row ranges of in_proj (z,
//     xBC, dt), so each lands in its own contiguous buffer;
//  2. MambaConv over xBC in place (SiLU included), updating conv states;
//  3. MambaScan into y, updating SSM states;
//  4. GatedRMSNorm(y, z) in place;
//  5. the output projection.
type mixer struct {
	s                Mamba2
	inZ, inX, inDt   Matrix
	out              Matrix
	convW, convB     []float32
	prm              MambaParams
	normW            []float32
	normGroup        int
	eps              float32
	z, xbc, dt, y, o []float32
	scratch          []float32
}

// rowsOf is the view of rows [r0, r1) of a row-major weight matrix: what the
// model passes to split in_proj without copying it.
func rowsOf(m Matrix, r0, r1 int) Matrix {
	rb := m.rowBytes()
	return Matrix{Type: m.Type, Rows: r1 - r0, Cols: m.Cols, Data: m.Data[r0*rb : r1*rb]}
}

func encodeMatrix(t testing.TB, dt DType, m [][]float64) Matrix {
	rows, cols := len(m), len(m[0])
	rb, err := dt.RowBytes(cols)
	if err != nil {
		t.Fatal(err)
	}
	data := make([]byte, rows*rb)
	for i, row := range m {
		for j, v := range row {
			switch dt {
			case F32:
				b := math.Float32bits(float32(v))
				o := i*rb + 4*j
				data[o], data[o+1], data[o+2], data[o+3] = byte(b), byte(b>>8), byte(b>>16), byte(b>>24)
			case F16:
				h := F32ToF16(float32(v))
				data[i*rb+2*j], data[i*rb+2*j+1] = byte(h), byte(h>>8)
			}
		}
	}
	return Matrix{Type: dt, Rows: rows, Cols: cols, Data: data}
}

func newMixer(t testing.TB, p *Pool, c mambaref.Config, w *mambaref.Weights, maxTokens, maxSeqs int) *mixer {
	s := kernelShape(c)
	in := encodeMatrix(t, F32, w.InProj)
	m := &mixer{
		s:         s,
		inZ:       rowsOf(in, 0, s.Inner()),
		inX:       rowsOf(in, s.Inner(), s.Inner()+s.ConvDim()),
		inDt:      rowsOf(in, s.Inner()+s.ConvDim(), s.Inner()+s.ConvDim()+s.Heads),
		out:       encodeMatrix(t, F32, w.OutProj),
		convW:     flat(w.ConvW),
		prm:       scanParams(w),
		normW:     f32s(w.NormW),
		normGroup: c.NormGroup,
		eps:       float32(c.Eps),
		z:         make([]float32, maxTokens*s.Inner()),
		xbc:       make([]float32, maxTokens*s.ConvDim()),
		dt:        make([]float32, maxTokens*s.Heads),
		y:         make([]float32, maxTokens*s.Inner()),
		o:         make([]float32, maxTokens*c.Hidden),
		scratch:   make([]float32, MambaScanScratch(p, s, maxTokens, maxSeqs)),
	}
	if w.ConvB != nil {
		m.convB = f32s(w.ConvB)
	}
	return m
}

// forward runs the layer over rows hidden rows of the batch seqs and returns
// the output rows (valid until the next call).
func (m *mixer) forward(p *Pool, hidden []float32, seqs []MambaSeq) []float32 {
	n := 0
	for _, q := range seqs {
		n += q.Len
	}
	s := m.s
	z, xbc, dt, y := m.z[:n*s.Inner()], m.xbc[:n*s.ConvDim()], m.dt[:n*s.Heads], m.y[:n*s.Inner()]
	p.MatMul(z, hidden, n, m.inZ)
	p.MatMul(xbc, hidden, n, m.inX)
	p.MatMul(dt, hidden, n, m.inDt)
	p.MambaConv(s, xbc, xbc, m.convW, m.convB, seqs)
	p.MambaScan(s, y, xbc, dt, m.prm, seqs, m.scratch)
	p.GatedRMSNorm(y, y, z, m.normW, n, s.Inner(), m.normGroup, m.eps)
	o := m.o[:n*m.out.Rows]
	p.MatMul(o, y, n, m.out)
	return o
}

// TestMambaMixerLayer runs whole mixer layers on the kernels against the
// float64 reference: a batched prefill of sequences of different lengths
// (one long enough for several SSD chunks), then 20 decode steps of the
// same sequences batched together; Nemotron-H's grouped norm and Granite's
// whole-row norm.
func TestMambaMixerLayer(t *testing.T) {
	r := newRand(12)
	for _, tc := range []struct {
		name  string
		mc    mambaCase
		whole bool
	}{
		{"nemotron-h-like", mambaCase{heads: 8, headDim: 16, groups: 4, state: 32, conv: 4}, false},
		{"granite-like", mambaCase{heads: 6, headDim: 24, groups: 1, state: 24, conv: 4}, true},
		{"odd", mambaCase{heads: 6, headDim: 7, groups: 2, state: 9, conv: 3, dtMin: 0.001, dtMax: 0.2}, false},
	} {
		c := tc.mc.config(48)
		if tc.whole {
			c.NormGroup = c.Inner()
		}
		w := mambaref.RandomWeights(c, rand.New(rand.NewPCG(3, 4)), true)
		lens := []int{3, 2*ssdChunk + 5, 1, 30}
		p := NewPool(2)
		m := newMixer(t, p, c, w, 300, len(lens))
		var seqs []MambaSeq
		var refs []*mambaref.State
		var hidden []float32
		var want []float64
		for _, n := range lens {
			st := mambaref.NewState(c)
			refs = append(refs, st)
			seqs = append(seqs, kernelState(c, st, F32, n))
			rows := make([][]float64, n)
			for i := range rows {
				rows[i] = make([]float64, c.Hidden)
				for j := range rows[i] {
					rows[i][j] = float64(float32(r.NormFloat64()))
				}
				hidden = append(hidden, f32s(rows[i])...)
			}
			want = append(want, flatRows(mambaref.Forward(c, w, st, rows))...)
		}
		got := m.forward(p, hidden, seqs)
		closeTo(t, tc.name+" prefill", f64s(got), want, 1e-4)
		for step := range 20 {
			hidden, want = hidden[:0], want[:0]
			for i := range seqs {
				seqs[i].Len = 1
				row := make([]float64, c.Hidden)
				for j := range row {
					row[j] = float64(float32(r.NormFloat64()))
				}
				hidden = append(hidden, f32s(row)...)
				want = append(want, mambaref.Forward(c, w, refs[i], [][]float64{row})[0]...)
			}
			got := m.forward(p, hidden, seqs)
			closeTo(t, fmt.Sprintf("%s decode step %d", tc.name, step), f64s(got), want, 1e-4)
		}
		for i, q := range seqs {
			checkState(t, fmt.Sprintf("%s seq %d", tc.name, i), c, q, refs[i], 1e-4)
		}
		p.Close()
	}
}
