package cpu

import (
	"fmt"
	"math"
	"testing"

	"github.com/kvhost/kvhost/internal/cputime"
)

// TestMatMuls checks one grouped call against each weight's own MatMul (the
// same item code, so bit for bit) and against the float64 reference
// (matMulRef's tolerances), for groups that mix the GEMM, the row-chunk
// matvec and quantized kernels (sharing one quantized activation copy where
// the formats agree, a copy each where they do not), on the Go, AVX2 and
// AVX-512 paths, with nil, 1-, 2- and 3-thread pools. Outputs are written
// only within their m×rows.
func TestMatMuls(t *testing.T) {
	type wshape struct {
		dt         DType
		rows, cols int
	}
	groups := [][]wshape{
		{{F32, 48, 64}, {F32, 16, 64}, {F32, 16, 64}},     // q, k, v of a GQA layer
		{{F16, 37, 100}, {F16, 5, 100}},                   // gate, up of odd sizes
		{{BF16, 33, 257}, {F32, 17, 257}, {F16, 1, 257}},  // mixed plain types
		{{Q4_K, 9, 256}, {Q4_K, 3, 256}, {Q6_K, 3, 256}},  // a Q4_K_M layer: one Q8_K copy
		{{Q8_0, 40, 96}, {Q8_0, 8, 96}},                   // a Q8_0 pair: one Q8 copy
		{{Q8_0, 24, 256}, {Q6_K, 7, 256}, {Q4_0, 5, 256}}, // Q8 and Q8_K activations in one group
		{{F32, 300, 40}}, // a group of one
		// Pipelined tiles (gemm16.go pipeTiles) running on from one weight
		// into the next: partial last tiles, chunks of 256 and 16 columns,
		// f16 beside bf16, f32 of a 4 KiB stride (staged) beside f16 of
		// another stride, and a quantized item that ends a pipeline.
		{{F16, 83, 528}, {F16, 21, 528}, {BF16, 40, 528}},
		{{F32, 35, 1024}, {F16, 50, 1024}},
		{{F16, 40, 256}, {Q8_0, 24, 256}, {F16, 33, 256}},
	}
	pools := []*Pool{nil, NewPool(1), NewPool(2), NewPool(3)}
	defer func() {
		for _, p := range pools {
			p.Close()
		}
	}()
	r := newRand(91)
	gemmImpls(t, func(t *testing.T) {
		for gi, g := range groups {
			ws := make([]Matrix, len(g))
			for i, s := range g {
				ws[i] = makeMatrix(t, r, s.dt, s.rows, s.cols)
			}
			for _, m := range []int{1, 3, 16, 130} {
				x := randVec(r, m*ws[0].Cols, 2)
				for _, p := range pools {
					// MatMul alone on the same pool: its row chunks (and so
					// which rows take the four-row kernel) follow the threads.
					alone := make([][]float32, len(ws))
					for i, w := range ws {
						alone[i] = make([]float32, m*w.Rows)
						p.MatMul(alone[i], x, m, w)
					}
					name := fmt.Sprintf("group %d m=%d threads=%d", gi, m, p.Threads())
					outs := make([][]float32, len(ws))
					for i, w := range ws {
						outs[i] = make([]float32, m*w.Rows+1)
						outs[i][m*w.Rows] = 42
					}
					views := make([][]float32, len(ws))
					for i := range outs {
						views[i] = outs[i][:len(outs[i])-1]
					}
					p.MatMuls(views, x, m, ws)
					for i, w := range ws {
						want, tol := matMulRef(x, m, w)
						for j, v := range outs[i][:m*w.Rows] {
							if math.Float32bits(v) != math.Float32bits(alone[i][j]) {
								t.Fatalf("%s: weight %d (%v %dx%d) out[%d] = %v, MatMul gives %v", name, i, w.Type, w.Rows, w.Cols, j, v, alone[i][j])
							}
							if !near(v, want[j], tol[j]) {
								t.Fatalf("%s: weight %d out[%d] = %v, want %v (tol %g)", name, i, j, v, want[j], tol[j])
							}
						}
						if outs[i][m*w.Rows] != 42 {
							t.Fatalf("%s: weight %d written past its output", name, i)
						}
					}
				}
			}
		}
	})
}

func TestMatMulsRejectsMalformed(t *testing.T) {
	p := NewPool(2)
	defer p.Close()
	r := newRand(92)
	w := makeMatrix(t, r, F32, 4, 8)
	x := randVec(r, 8, 1)
	for name, f := range map[string]func(){
		"count mismatch": func() { p.MatMuls([][]float32{make([]float32, 4)}, x, 1, []Matrix{w, w}) },
		"too many":       func() { p.MatMuls(make([][]float32, 4), x, 1, []Matrix{w, w, w, w}) },
		"short output":   func() { p.MatMuls([][]float32{make([]float32, 3)}, x, 1, []Matrix{w}) },
		"short input":    func() { p.MatMuls([][]float32{make([]float32, 8)}, x, 2, []Matrix{w}) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: no panic", name)
				}
			}()
			f()
		}()
	}
}

// BenchmarkMatMuls compares one grouped call with the same MatMuls one
// weight at a time, on the small and medium presets' q/k/v and gate/up
// shapes at prefill (m=128) and decode (m=1) sizes.
func BenchmarkMatMuls(b *testing.B) {
	r := newRand(93)
	for _, c := range []struct {
		name string
		dt   DType
		rows []int
		cols int
	}{
		{"small-qkv", F32, []int{288, 288, 288}, 288},
		{"small-gateup", F32, []int{768, 768}, 288},
		{"medium-qkv", F32, []int{768, 256, 256}, 768},
		{"medium-gateup", F32, []int{2048, 2048}, 768},
		{"medium-qkv-q4k", Q4_K, []int{768, 256, 256}, 768},
		{"medium-gateup-q4k", Q4_K, []int{2048, 2048}, 768},
	} {
		ws := make([]Matrix, len(c.rows))
		for i, rows := range c.rows {
			ws[i] = makeMatrix(b, r, c.dt, rows, c.cols)
		}
		for _, m := range []int{1, 16, 128} {
			x := randVec(r, m*c.cols, 1)
			outs := make([][]float32, len(ws))
			for i, w := range ws {
				outs[i] = make([]float32, m*w.Rows)
			}
			for _, mode := range []string{"each", "group"} {
				b.Run(fmt.Sprintf("%s/m=%d/%s", c.name, m, mode), func(b *testing.B) {
					p := NewPool(2)
					defer p.Close()
					b.ReportAllocs()
					cpu0 := cputime.Process().Seconds()
					for b.Loop() {
						if mode == "group" {
							p.MatMuls(outs, x, m, ws)
							continue
						}
						for i, w := range ws {
							p.MatMul(outs[i], x, m, w)
						}
					}
					b.ReportMetric(float64(b.N)/(cputime.Process().Seconds()-cpu0), "calls/cpu-s")
				})
			}
		}
	}
}
