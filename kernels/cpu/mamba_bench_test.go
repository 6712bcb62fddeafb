package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/kvhost/kvhost/internal/cputime"
	"github.com/kvhost/kvhost/internal/mambaref"
)

// benchMamba is a Nemotron-H-like small mixer: Nemotron-H-8B's head dim 64,
// state 128 and 8 groups, a quarter of its 128 heads (d_inner 2048, the
// width of a 1B-class hybrid).
var benchMamba = mambaCase{heads: 32, headDim: 64, groups: 8, state: 128, conv: 4}

// reportTokens reports tokens per wall second and per CPU second (all of
// the process's threads, idle pool workers spinning included).
func reportTokens(b *testing.B, tokens int, cpu0 float64) {
	b.ReportMetric(float64(tokens)/b.Elapsed().Seconds(), "tok/s")
	if cpu := cputime.Process().Seconds() - cpu0; cpu > 0 {
		b.ReportMetric(float64(tokens)/cpu, "tok/cpu-s")
	}
}

type scanBench struct {
	s       Mamba2
	xbc, dt []float32
	y       []float32
	prm     MambaParams
	seqs    []MambaSeq
	scratch []float32
}

func newScanBench(b *testing.B, p *Pool, mc mambaCase, lens []int) *scanBench {
	c := mc.config(1024)
	r := rand.New(rand.NewPCG(1, 2))
	w := mambaref.RandomWeights(c, r, true)
	sb := &scanBench{s: kernelShape(c), prm: scanParams(w)}
	n := 0
	for _, l := range lens {
		st := randomState(c, r, F32)
		sb.seqs = append(sb.seqs, kernelState(c, st, F32, l))
		n += l
	}
	sb.xbc = randVec(r, n*c.ConvDim(), 1)
	sb.dt = randVec(r, n*c.Heads, 2)
	sb.y = make([]float32, n*c.Inner())
	sb.scratch = make([]float32, MambaScanScratch(p, sb.s, n, len(lens)))
	return sb
}

// BenchmarkMambaScan measures prefill scan throughput (tokens/s of one
// sequence of n tokens) of the SSD chunked form against the recurrence
// kernel (the decode step run once per token), on one thread and on the
// pool, and against plainScan, a plain scalar loop over positions.
func BenchmarkMambaScan(b *testing.B) {
	for _, path := range []struct {
		name   string
		minLen int
	}{{"ssd", 1}, {"recurrence", 1 << 30}, {"plain", 0}} {
		for _, tc := range []struct{ n, threads int }{{512, 1}, {512, 2}, {64, 1}, {16, 1}} {
			n, threads := tc.n, tc.threads
			if path.name == "plain" && threads > 1 {
				continue // one thread by construction
			}
			b.Run(fmt.Sprintf("%s/n=%d/threads=%d", path.name, n, threads), func(b *testing.B) {
				p := NewPool(threads)
				defer p.Close()
				sb := newScanBench(b, p, benchMamba, []int{n})
				if path.name == "plain" {
					checkPlainScan(b, p, sb)
				} else {
					withSSDMinLen(b, path.minLen)
				}
				b.ReportAllocs()
				b.ResetTimer()
				cpu0 := cputime.Process().Seconds()
				for range b.N {
					if path.name == "plain" {
						plainScan(sb.s, sb.y, sb.xbc, sb.dt, sb.prm, n, sb.seqs[0].SSM)
					} else {
						p.MambaScan(sb.s, sb.y, sb.xbc, sb.dt, sb.prm, sb.seqs, sb.scratch)
					}
				}
				reportTokens(b, n*b.N, cpu0)
			})
		}
	}
}

// plainScan is the textbook sequential recurrence, position after
// position, in plain scalar Go on one thread (no SIMD, no chunking, no
// kernel helpers): per token and head, dt = clamp(softplus(raw + bias)),
// S ← exp(dt·A)·S + dt·B ⊗ x, y = C·S + D·x. It is the baseline
// BenchmarkMambaScan sets the chunked form against; newScanBench checks it
// computes what MambaScan computes.
func plainScan(s Mamba2, y, xbc, dt []float32, prm MambaParams, n int, S []float32) {
	H, P, N, C, I := s.Heads, s.HeadDim, s.State, s.ConvDim(), s.Inner()
	for t := range n {
		for h := range H {
			g := h / (H / s.Groups)
			b := xbc[t*C+I+g*N : t*C+I+g*N+N]
			c := xbc[t*C+I+s.Groups*N+g*N : t*C+I+s.Groups*N+g*N+N]
			x := xbc[t*C+h*P : t*C+h*P+P]
			d := float64(dt[t*H+h]) + float64(prm.DtBias[h])
			if d <= 20 {
				d = math.Log1p(math.Exp(d))
			}
			d = min(max(d, float64(s.DtMin)), float64(s.DtMax))
			a := float32(math.Exp(d * float64(prm.A[h])))
			df := float32(d)
			yh := y[t*I+h*P : t*I+h*P+P]
			for p := range P {
				yh[p] = prm.D[h] * x[p]
			}
			for k := range N {
				row := S[(h*N+k)*P : (h*N+k+1)*P]
				bk, ck := df*b[k], c[k]
				for p := range P {
					row[p] = a*row[p] + bk*x[p]
					yh[p] += ck * row[p]
				}
			}
		}
	}
}

// checkPlainScan runs plainScan and MambaScan once on copies of sb's
// state and fails b unless their outputs agree to 1e-3 of the largest.
func checkPlainScan(b *testing.B, p *Pool, sb *scanBench) {
	q := sb.seqs[0]
	S := slices.Clone(q.SSM)
	yPlain := make([]float32, len(sb.y))
	plainScan(sb.s, yPlain, sb.xbc, sb.dt, sb.prm, q.Len, S)
	kq := q
	kq.SSM = slices.Clone(q.SSM)
	kq.Conv.Data = slices.Clone(q.Conv.Data)
	yKernel := make([]float32, len(sb.y))
	p.MambaScan(sb.s, yKernel, slices.Clone(sb.xbc), sb.dt, sb.prm, []MambaSeq{kq}, sb.scratch)
	var big, worst float64
	for i := range yPlain {
		big = max(big, math.Abs(float64(yKernel[i])))
		worst = max(worst, math.Abs(float64(yPlain[i]-yKernel[i])))
	}
	for i := range S {
		worst = max(worst, math.Abs(float64(S[i]-kq.SSM[i]))/max(1, big))
	}
	if worst > 1e-3*max(big, 1) {
		b.Fatalf("plain recurrence and MambaScan differ by %g (largest output %g)", worst, big)
	}
}

// BenchmarkMambaScanDecode measures a decode step of 8 sequences.
func BenchmarkMambaScanDecode(b *testing.B) {
	for _, threads := range []int{1, 2} {
		b.Run(fmt.Sprintf("threads=%d", threads), func(b *testing.B) {
			p := NewPool(threads)
			defer p.Close()
			lens := []int{1, 1, 1, 1, 1, 1, 1, 1}
			sb := newScanBench(b, p, benchMamba, lens)
			b.ReportAllocs()
			b.ResetTimer()
			cpu0 := cputime.Process().Seconds()
			for range b.N {
				p.MambaScan(sb.s, sb.y, sb.xbc, sb.dt, sb.prm, sb.seqs, sb.scratch)
			}
			reportTokens(b, len(lens)*b.N, cpu0)
		})
	}
}

// BenchmarkMambaLayerParts puts the layer's kernels beside each other for a
// 512-token prefill chunk: the convolution and the gated norm against the
// input projection MatMul (f16 weights) they sit beside.
func BenchmarkMambaLayerParts(b *testing.B) {
	const n = 512
	c := benchMamba.config(1024)
	s := kernelShape(c)
	r := rand.New(rand.NewPCG(3, 4))
	w := mambaref.RandomWeights(c, r, true)
	p := NewPool(2)
	defer p.Close()
	b.Run("conv", func(b *testing.B) {
		xbc := randVec(r, n*s.ConvDim(), 1)
		seqs := []MambaSeq{kernelState(c, mambaref.NewState(c), F32, n)}
		convW, convB := flat(w.ConvW), f32s(w.ConvB)
		b.ReportAllocs()
		b.ResetTimer()
		cpu0 := cputime.Process().Seconds()
		for range b.N {
			p.MambaConv(s, xbc, xbc, convW, convB, seqs)
		}
		reportTokens(b, n*b.N, cpu0)
	})
	b.Run("gated-norm", func(b *testing.B) {
		y, z := randVec(r, n*s.Inner(), 1), randVec(r, n*s.Inner(), 1)
		nw := f32s(w.NormW)
		b.ReportAllocs()
		b.ResetTimer()
		cpu0 := cputime.Process().Seconds()
		for range b.N {
			p.GatedRMSNorm(y, y, z, nw, n, s.Inner(), c.NormGroup, 1e-5)
		}
		reportTokens(b, n*b.N, cpu0)
	})
	b.Run("in-proj-f16", func(b *testing.B) {
		in := encodeMatrix(b, F16, w.InProj)
		x := randVec(r, n*c.Hidden, 1)
		out := make([]float32, n*in.Rows)
		b.ResetTimer()
		cpu0 := cputime.Process().Seconds()
		for range b.N {
			p.MatMul(out, x, n, in)
		}
		reportTokens(b, n*b.N, cpu0)
	})
}
