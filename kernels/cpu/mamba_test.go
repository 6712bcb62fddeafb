package cpu

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/kvhost/kvhost/internal/mambaref"
)

func TestMamba2Validate(t *testing.T) {
	ok := Mamba2{Heads: 8, HeadDim: 64, Groups: 2, State: 128, ConvKernel: 4, DtMax: float32(math.Inf(1))}
	if err := ok.Validate(); err != nil {
		t.Fatalf("valid shape: %v", err)
	}
	bad := []struct {
		mod  func(*Mamba2)
		want string
	}{
		{func(s *Mamba2) { s.Heads = 0 }, "heads 0"},
		{func(s *Mamba2) { s.HeadDim = -1 }, "head dim -1"},
		{func(s *Mamba2) { s.Groups = 3 }, "not a multiple of groups 3"},
		{func(s *Mamba2) { s.State = 1 << 20 }, "state 1048576"},
		{func(s *Mamba2) { s.ConvKernel = 9 }, "conv kernel 9"},
		{func(s *Mamba2) { s.ConvKernel = 0 }, "conv kernel 0"},
		{func(s *Mamba2) { s.DtMax = 0 }, "time step limit"},
		{func(s *Mamba2) { s.DtMin = -1 }, "time step limit"},
		{func(s *Mamba2) { s.DtMin, s.DtMax = 0.5, 0.1 }, "time step limit"},
		{func(s *Mamba2) { s.DtMax = float32(math.NaN()) }, "time step limit"},
		{func(s *Mamba2) { s.Heads, s.HeadDim, s.State = 1<<16, 1<<16, 2 }, "too large"},
	}
	for _, b := range bad {
		s := ok
		b.mod(&s)
		err := s.Validate()
		if err == nil || !errors.Is(err, ErrShape) || !strings.Contains(err.Error(), b.want) {
			t.Errorf("%+v: err = %v, want ErrShape naming %q", s, err, b.want)
		}
	}
}

// TestAxpyRows checks the scan's one inner kernel on every path against
// float64 sums, over lengths that exercise the 128/64/16/8-column blocks and
// the Go tail, β = 0 overwriting garbage (NaN) and general β.
func TestAxpyRows(t *testing.T) {
	r := newRand(1)
	mambaImpls(t, func(t *testing.T) {
		for _, l := range []int{1, 7, 8, 16, 24, 64, 72, 128, 136, 200, 256} {
			for _, beta := range []float32{0, 1, 0.37} {
				m, as, rs := 1+r.IntN(70), 1+r.IntN(3), l+r.IntN(5)
				a := randVec(r, (m-1)*as+1, 1)
				rows := randVec(r, (m-1)*rs+l, 1)
				out := randVec(r, l, 1)
				if beta == 0 {
					for i := range out {
						out[i] = float32(math.NaN())
					}
				}
				want := make([]float64, l)
				for c := range l {
					if beta != 0 {
						want[c] = float64(beta) * float64(out[c])
					}
					for j := range m {
						want[c] += float64(a[j*as]) * float64(rows[j*rs+c])
					}
				}
				axpyRows(out, beta, a, as, rows, rs, m)
				closeTo(t, fmt.Sprintf("l=%d m=%d beta=%v", l, m, beta), f64s(out), want, 1e-6)
			}
		}
	})
}

// TestAxpyRows4 checks the four-row variant likewise, keep false
// overwriting NaN rows and keep true scaling each row by its own β.
func TestAxpyRows4(t *testing.T) {
	r := newRand(13)
	mambaImpls(t, func(t *testing.T) {
		for _, l := range []int{1, 5, 8, 16, 24, 64, 72, 80, 128, 136} {
			for _, keep := range []bool{false, true} {
				m, as, ak, rs := 1+r.IntN(70), 1+r.IntN(3), 70*3+r.IntN(4), l+r.IntN(5)
				os := l + r.IntN(6)
				a := randVec(r, 3*ak+(m-1)*as+1, 1)
				rows := randVec(r, (m-1)*rs+l, 1)
				out := randVec(r, 3*os+l, 1)
				beta := [4]float32{0.5, 0, 1, -2}
				want := f64s(out)
				for k := range 4 {
					for c := range l {
						v := 0.0
						if keep {
							v = float64(beta[k]) * float64(out[k*os+c])
						} else {
							out[k*os+c] = float32(math.NaN())
						}
						for j := range m {
							v += float64(a[k*ak+j*as]) * float64(rows[j*rs+c])
						}
						want[k*os+c] = v
					}
				}
				axpyRows4(out, os, l, &beta, keep, a, ak, as, rows, rs, m)
				closeTo(t, fmt.Sprintf("l=%d m=%d keep=%v", l, m, keep), f64s(out), want, 1e-6)
			}
		}
	})
}

// TestSSMStep checks the decode kernel on every path: state update and
// output against float64, with column counts off the vector width.
func TestSSMStep(t *testing.T) {
	r := newRand(2)
	mambaImpls(t, func(t *testing.T) {
		for _, l := range []int{3, 8, 13, 16, 32, 40, 64, 80, 128} {
			n, hs := 1+r.IntN(40), l+r.IntN(4)
			h := randVec(r, (n-1)*hs+l, 1)
			xdt, b, cv := randVec(r, l, 1), randVec(r, n, 1), randVec(r, n, 1)
			dA := float32(0.3 + 0.6*r.Float64())
			wantH := make([]float64, len(h))
			wantY := make([]float64, l)
			for s := range n {
				for c := range l {
					v := float64(h[s*hs+c])*float64(dA) + float64(b[s])*float64(xdt[c])
					wantH[s*hs+c] = v
					wantY[c] += float64(cv[s]) * v
				}
			}
			for i := range h {
				if i%hs >= l {
					wantH[i] = float64(h[i]) // padding between rows is untouched
				}
			}
			y := randVec(r, l, 1)
			ssmStep(h, hs, xdt, b, cv, dA, y)
			closeTo(t, fmt.Sprintf("l=%d n=%d y", l, n), f64s(y), wantY, 1e-6)
			closeTo(t, fmt.Sprintf("l=%d n=%d h", l, n), f64s(h), wantH, 1e-6)
		}
	})
}

// refConv runs the reference convolution of one sequence's rows.
func refConv(c mambaref.Config, w *mambaref.Weights, st *mambaref.State, rows [][]float64) [][]float64 {
	out := make([][]float64, len(rows))
	for i, x := range rows {
		out[i] = mambaref.ConvStep(c, w, st, x)
	}
	return out
}

// TestMambaConv checks the convolution of batches of sequences (lengths 0, 1,
// shorter than the kernel, long) against the reference, outputs and the
// states left behind, for f32, f16 and bf16 states, in place and not, on one
// and three threads.
func TestMambaConv(t *testing.T) {
	r := newRand(3)
	lens := []int{5, 0, 1, 2, 37, 1}
	mambaImpls(t, func(t *testing.T) {
		for ci, mc := range mambaCases {
			for _, dt := range []DType{F32, F16, BF16} {
				for _, threads := range []int{0, 1, 3} { // 0: a nil Pool
					c := mc.config(4)
					s := kernelShape(c)
					w := mambaref.RandomWeights(c, rand.New(rand.NewPCG(uint64(ci), 9)), ci%2 == 0)
					var seqs []MambaSeq
					var want [][]float64
					var xbc []float32
					var refs []*mambaref.State
					for _, n := range lens {
						st := randomState(c, r, dt)
						seqs = append(seqs, kernelState(c, st, dt, n))
						rows := make([][]float64, n)
						for i := range rows {
							rows[i] = make([]float64, c.ConvDim())
							for j := range rows[i] {
								rows[i][j] = float64(float32(2*r.Float64() - 1))
							}
							xbc = append(xbc, f32s(rows[i])...)
						}
						want = append(want, refConv(c, w, st, rows)...)
						refs = append(refs, st)
					}
					var p *Pool
					if threads > 0 {
						p = NewPool(threads)
					}
					inPlace := threads == 3
					out := make([]float32, len(xbc))
					if inPlace {
						out = xbc
					}
					var bias []float32
					if w.ConvB != nil {
						bias = f32s(w.ConvB)
					}
					p.MambaConv(s, out, xbc, flat(w.ConvW), bias, seqs)
					p.Close()
					var wantFlat []float64
					for _, row := range want {
						wantFlat = append(wantFlat, row...)
					}
					name := fmt.Sprintf("case %d %s threads %d", ci, dt, threads)
					closeTo(t, name+": out", f64s(out), wantFlat, 2e-6)
					for i, q := range seqs {
						checkState(t, fmt.Sprintf("%s seq %d", name, i), c, q, refs[i], 1e-6)
					}
				}
			}
		}
	})
}

// refScan runs the reference scan of one sequence: y rows from convolved
// rows u and raw dt rows.
func refScan(c mambaref.Config, w *mambaref.Weights, st *mambaref.State, u, dt [][]float64) [][]float64 {
	y := make([][]float64, len(u))
	for i := range u {
		y[i] = mambaref.ScanStep(c, w, st, u[i], dt[i])
	}
	return y
}

// scanInputs draws n convolved rows (SiLU outputs' range) and raw dt rows.
func scanInputs(c mambaref.Config, r *rand.Rand, n int) (u, dt [][]float64) {
	for range n {
		ur := make([]float64, c.ConvDim())
		for j := range ur {
			ur[j] = float64(float32(2*r.Float64() - 0.5))
		}
		dr := make([]float64, c.Heads)
		for j := range dr {
			dr[j] = float64(float32(3 * r.NormFloat64()))
		}
		u, dt = append(u, ur), append(dt, dr)
	}
	return u, dt
}

func flatRows(m [][]float64) []float64 {
	var o []float64
	for _, r := range m {
		o = append(o, r...)
	}
	return o
}

// TestMambaScan checks a mixed batch (a decode step, an empty sequence, a
// prefill of several chunks with a ragged last one, a short prefill) against
// the sequential float64 recurrence, for each shape, with the SSD path on
// for long sequences, forced on for all, and off.
func TestMambaScan(t *testing.T) {
	r := newRand(4)
	lens := []int{1, 0, 2*ssdChunk + 13, 9, 1, ssdChunk}
	mambaImpls(t, func(t *testing.T) {
		for ci, mc := range mambaCases {
			for mi, minLen := range []int{16, 1, 1 << 30} {
				withSSDMinLen(t, minLen)
				c := mc.config(4)
				s := kernelShape(c)
				w := mambaref.RandomWeights(c, rand.New(rand.NewPCG(uint64(ci), 10)), false)
				var seqs []MambaSeq
				var xbc, dtRaw []float32
				var want []float64
				var refs []*mambaref.State
				for _, n := range lens {
					st := randomState(c, r, F32)
					seqs = append(seqs, kernelState(c, st, F32, n))
					u, dt := scanInputs(c, r, n)
					xbc = append(xbc, f32s(flatRows(u))...)
					dtRaw = append(dtRaw, f32s(flatRows(dt))...)
					want = append(want, flatRows(refScan(c, w, st, u, dt))...)
					refs = append(refs, st)
				}
				rows := len(dtRaw) / c.Heads
				var p *Pool // nil on the first round: the inline path
				if mi > 0 {
					p = NewPool(1 + mi)
				}
				y := randVec(r, rows*c.Inner(), 100) // garbage the scan must overwrite
				scratch := make([]float32, MambaScanScratch(p, s, rows, len(seqs)))
				p.MambaScan(s, y, xbc, dtRaw, scanParams(w), seqs, scratch)
				p.Close()
				name := fmt.Sprintf("case %d ssdMinLen %d", ci, minLen)
				closeTo(t, name+": y", f64s(y), want, 2e-5)
				for i, q := range seqs {
					checkState(t, fmt.Sprintf("%s seq %d", name, i), c, q, refs[i], 2e-5)
				}
			}
		}
	})
}

// TestMambaScanPieces runs one sequence as one call, as chunked-prefill
// pieces of odd sizes, and token by token (decode), carrying the state
// between calls: all three agree with each other and with the reference.
func TestMambaScanPieces(t *testing.T) {
	r := newRand(5)
	const n = 4*ssdChunk + 29
	plans := map[string][]int{"one call": {n}}
	pieces, left := []int{1, 17, ssdChunk + 3, 5, ssdChunk - 1, 70}, n
	for _, k := range pieces {
		left -= k
	}
	plans["pieces"] = append(pieces, left)
	for range n {
		plans["decode"] = append(plans["decode"], 1)
	}
	mambaImpls(t, func(t *testing.T) {
		for ci, mc := range mambaCases[:4] {
			c := mc.config(4)
			s := kernelShape(c)
			w := mambaref.RandomWeights(c, rand.New(rand.NewPCG(uint64(ci), 11)), true)
			st := randomState(c, r, F32)
			u, dt := scanInputs(c, r, n)
			x32, dt32 := f32s(flatRows(u)), f32s(flatRows(dt))
			init := kernelState(c, st, F32, 0)
			want := flatRows(refScan(c, w, st, u, dt))
			results := map[string][]float64{}
			for name, plan := range plans {
				q := MambaSeq{SSM: append([]float32(nil), init.SSM...)}
				p := NewPool(3)
				y := make([]float32, n*c.Inner())
				row := 0
				for _, k := range plan {
					q.Len = k
					scratch := make([]float32, MambaScanScratch(p, s, k, 1))
					p.MambaScan(s, y[row*c.Inner():], x32[row*c.ConvDim():], dt32[row*c.Heads:], scanParams(w), []MambaSeq{q}, scratch)
					row += k
				}
				p.Close()
				if row != n {
					t.Fatalf("plan %s covers %d rows, want %d", name, row, n)
				}
				closeTo(t, fmt.Sprintf("case %d %s: y", ci, name), f64s(y), want, 2e-5)
				results[name] = f64s(y)
				var got, wantS []float64
				for h := range c.Heads {
					for p := range c.HeadDim {
						for k := range c.State {
							got = append(got, float64(q.SSM[h*c.State*c.HeadDim+k*c.HeadDim+p]))
							wantS = append(wantS, st.SSM[h][p][k])
						}
					}
				}
				closeTo(t, fmt.Sprintf("case %d %s: state", ci, name), got, wantS, 2e-5)
			}
			closeTo(t, fmt.Sprintf("case %d: pieces vs one call", ci), results["pieces"], results["one call"], 1e-5)
			closeTo(t, fmt.Sprintf("case %d: decode vs one call", ci), results["decode"], results["one call"], 1e-5)
		}
	})
}

// TestMambaScanLongDecay runs a long sequence whose decays underflow (large
// dt·|A|) and one whose decays barely move, where cumulative-sum exps would
// overflow or lose precision.
func TestMambaScanLongDecay(t *testing.T) {
	r := newRand(6)
	c := mambaCase{heads: 4, headDim: 16, groups: 2, state: 16, conv: 4}.config(4)
	s := kernelShape(c)
	for _, bias := range []float64{8, -12} {
		w := mambaref.RandomWeights(c, rand.New(rand.NewPCG(7, 7)), false)
		for h := range w.DtBias {
			w.DtBias[h] = bias
			w.ALog[h] = math.Log(16)
		}
		const n = 5 * ssdChunk
		st := randomState(c, r, F32)
		u, dt := scanInputs(c, r, n)
		q := kernelState(c, st, F32, n)
		want := flatRows(refScan(c, w, st, u, dt))
		y := make([]float32, n*c.Inner())
		scratch := make([]float32, MambaScanScratch(nil, s, n, 1))
		(*Pool)(nil).MambaScan(s, y, f32s(flatRows(u)), f32s(flatRows(dt)), scanParams(w), []MambaSeq{q}, scratch)
		closeTo(t, fmt.Sprintf("bias %v: y", bias), f64s(y), want, 2e-5)
		checkState(t, fmt.Sprintf("bias %v", bias), c, q, st, 2e-5)
	}
}

func TestGatedRMSNorm(t *testing.T) {
	r := newRand(8)
	for _, tc := range []struct{ rows, dim, group int }{{1, 16, 16}, {3, 48, 12}, {70, 40, 5}, {5, 2048, 256}} {
		c := mambaref.Config{Heads: 1, HeadDim: tc.dim, Groups: 1, NormGroup: tc.group, Eps: 1e-5}
		w := &mambaref.Weights{NormW: make([]float64, tc.dim)}
		for i := range w.NormW {
			w.NormW[i] = 0.5 + r.Float64()
		}
		y, z := randVec(r, tc.rows*tc.dim, 2), randVec(r, tc.rows*tc.dim, 3)
		var want []float64
		for i := range tc.rows {
			want = append(want, mambaref.GatedNorm(c, w, f64s(y[i*tc.dim:(i+1)*tc.dim]), f64s(z[i*tc.dim:(i+1)*tc.dim]))...)
		}
		impls(t, func(t *testing.T) {
			for _, threads := range []int{1, 2} {
				p := NewPool(threads)
				out := make([]float32, len(y))
				p.GatedRMSNorm(out, y, z, f32s(w.NormW), tc.rows, tc.dim, tc.group, 1e-5)
				closeTo(t, fmt.Sprintf("%+v threads %d", tc, threads), f64s(out), want, 1e-5)
				// In place over y.
				yy := append([]float32(nil), y...)
				p.GatedRMSNorm(yy, yy, z, f32s(w.NormW), tc.rows, tc.dim, tc.group, 1e-5)
				p.Close()
				closeTo(t, fmt.Sprintf("%+v in place", tc), f64s(yy), want, 1e-5)
			}
		})
	}
}

func TestMambaElementwise(t *testing.T) {
	x := []float32{-2, -0.5, 0, 0.5, 3}
	out := make([]float32, len(x))
	ReLUSquare(out, x)
	for i, want := range []float32{0, 0, 0, 0.25, 9} {
		if out[i] != want {
			t.Errorf("ReLUSquare(%v) = %v, want %v", x[i], out[i], want)
		}
	}
	y := []float32{1, 2, 3}
	Scale(y, 0.5)
	if y[0] != 0.5 || y[1] != 1 || y[2] != 1.5 {
		t.Errorf("Scale = %v", y)
	}
	AddScaled(y, y, []float32{2, 2, 2}, 0.25)
	if y[0] != 1 || y[1] != 1.5 || y[2] != 2 {
		t.Errorf("AddScaled = %v", y)
	}
	z := []float32{-3, -1, 0, 1, 3, 20, -20, 0.1, 2, 5}
	want := make([]float64, len(z))
	for i, v := range z {
		want[i] = float64(v) / (1 + math.Exp(-float64(v)))
	}
	impls(t, func(t *testing.T) {
		zz := append([]float32(nil), z...)
		siluInPlace(zz)
		closeTo(t, "silu", f64s(zz), want, 1e-6)
	})
}

// TestMambaPanics checks that malformed calls panic with a "cpu:" message
// naming what is wrong.
func TestMambaPanics(t *testing.T) {
	s := Mamba2{Heads: 2, HeadDim: 4, Groups: 1, State: 4, ConvKernel: 4, DtMax: 1}
	good := func() MambaSeq {
		return MambaSeq{Len: 1, Conv: ConvState{Type: F32, Data: make([]byte, 4*s.ConvStateLen())}, SSM: make([]float32, s.SSMStateLen())}
	}
	xbc := make([]float32, s.ConvDim())
	cases := []struct {
		name, want string
		f          func()
	}{
		{"bad shape", "heads 0", func() { (*Pool)(nil).MambaConv(Mamba2{}, xbc, xbc, nil, nil, nil) }},
		{"short conv state", "conv state has 4 bytes", func() {
			q := good()
			q.Conv.Data = q.Conv.Data[:4]
			(*Pool)(nil).MambaConv(s, xbc, xbc, make([]float32, 4*s.ConvDim()), nil, []MambaSeq{q})
		}},
		{"q8 conv state", "conv state type q8_0", func() {
			q := good()
			q.Conv.Type = Q8_0
			(*Pool)(nil).MambaConv(s, xbc, xbc, make([]float32, 4*s.ConvDim()), nil, []MambaSeq{q})
		}},
		{"short weights", "weights 3", func() { (*Pool)(nil).MambaConv(s, xbc, xbc, make([]float32, 3), nil, []MambaSeq{good()}) }},
		{"short ssm state", "ssm state has 1 floats", func() {
			q := good()
			q.SSM = q.SSM[:1]
			(*Pool)(nil).MambaScan(s, make([]float32, 8), xbc, make([]float32, 2), MambaParams{}, []MambaSeq{q}, nil)
		}},
		{"short scratch", "scratch has 0 floats", func() {
			prm := MambaParams{A: make([]float32, 2), D: make([]float32, 2), DtBias: make([]float32, 2)}
			(*Pool)(nil).MambaScan(s, make([]float32, 8), xbc, make([]float32, 2), prm, []MambaSeq{good()}, nil)
		}},
		{"negative length", "length -1", func() {
			q := good()
			q.Len = -1
			(*Pool)(nil).MambaConv(s, xbc, xbc, make([]float32, 4*s.ConvDim()), nil, []MambaSeq{q})
		}},
		{"norm groups", "in groups of 3", func() { (*Pool)(nil).GatedRMSNorm(xbc, xbc, xbc, xbc, 1, 8, 3, 1e-5) }},
	}
	for _, c := range cases {
		func() {
			defer func() {
				r := recover()
				msg := fmt.Sprint(r)
				if r == nil || !strings.HasPrefix(msg, "cpu:") || !strings.Contains(msg, c.want) {
					t.Errorf("%s: panic %q, want a cpu: message containing %q", c.name, msg, c.want)
				}
			}()
			c.f()
		}()
	}
}
