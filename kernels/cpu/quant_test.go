package cpu

import (
	"bytes"
	"errors"
	"math"
	"testing"
)

// quantImpls runs f on every quantized-kernel variant this CPU has: the
// portable Go kernels, the AVX2 ones and (where the CPU has AVX-512 with
// VNNI) the AVX-512 ones, which replace AVX2 for some formats.
func quantImpls(t *testing.T, f func(t *testing.T)) {
	t.Helper()
	saved := useQ512
	defer func() { useQ512 = saved }()
	impls(t, func(t *testing.T) {
		useQ512 = false
		if !useSIMD {
			f(t)
			return
		}
		t.Run("avx2", f)
		if q512Available {
			useQ512 = true
			t.Run("avx512", f)
		}
	})
}

func TestDequantizeMatchesReference(t *testing.T) {
	r := newRand(7)
	for _, typ := range quantTypes {
		t.Run(typ.String(), func(t *testing.T) {
			const blocks = 9
			bs := typ.BlockSize()
			raw := randomBlocks(r, typ, blocks)
			out := make([]float32, blocks*bs)
			if err := DequantizeBlocks(typ, raw, out); err != nil {
				t.Fatal(err)
			}
			var nonzero int
			for i, got := range out {
				want := refElem(typ, raw[i/bs*typ.BlockBytes():], i%bs)
				if math.Abs(float64(got)-want) > 1e-6*math.Abs(want)+1e-9 {
					t.Fatalf("element %d = %v, want %v", i, got, want)
				}
				if got != 0 {
					nonzero++
				}
			}
			if nonzero < len(out)/2 {
				t.Fatalf("only %d of %d values are nonzero: the test data is degenerate", nonzero, len(out))
			}
		})
	}
	if err := DequantizeBlocks(Q4_K, make([]byte, 144), make([]float32, 255)); !errors.Is(err, ErrShape) {
		t.Errorf("255 Q4_K values: %v", err)
	}
	if err := DequantizeBlocks(Q4_K, make([]byte, 143), make([]float32, 256)); !errors.Is(err, ErrShape) {
		t.Errorf("a short Q4_K block: %v", err)
	}
	if err := DequantizeBlocks(F16, make([]byte, 2), make([]float32, 1)); !errors.Is(err, ErrShape) {
		t.Errorf("f16: %v", err)
	}
}

// TestQuantizeAct: activation blocks reproduce x to half a step, the value
// of largest magnitude maps to ±127, and the stored sums are the codes'.
func TestQuantizeAct(t *testing.T) {
	r := newRand(8)
	const cols = 512
	x := randVec(r, 2*cols, 3)
	for i := range 32 {
		x[cols+i] = 0 // an all-zero 32-block in the second row
	}
	x[5] = 40 // one outlier
	for _, typ := range []DType{Q4_0, Q4_K} {
		impls(t, func(t *testing.T) {
			xq := make([]byte, 2*actRowBytes(typ, cols))
			quantizeAct(typ, xq, x, 2, cols)
			got := dequantAct(typ, xq[:len(xq)/2], cols)
			got = append(got, dequantAct(typ, xq[len(xq)/2:], cols)...)
			bs := 32
			if actK(typ) {
				bs = QKK
			}
			for b := 0; b < len(x)/bs; b++ {
				var amax float64
				for _, v := range x[b*bs : (b+1)*bs] {
					amax = math.Max(amax, math.Abs(float64(v)))
				}
				step := amax / 127
				var top float64
				for j := b * bs; j < (b+1)*bs; j++ {
					if d := math.Abs(got[j] - float64(x[j])); d > step*0.5001+1e-12 {
						t.Fatalf("%v value %d: %v quantized to %v (step %v)", typ, j, x[j], got[j], step)
					}
					top = math.Max(top, math.Abs(got[j]))
				}
				if math.Abs(top-amax) > amax*1e-6 {
					t.Fatalf("%v block %d: largest decoded %v, largest value %v", typ, b, top, amax)
				}
			}
			if actK(typ) {
				for _, blk := range asQ8K(xq) {
					for g := range 16 {
						var s int
						for _, q := range blk.q[16*g : 16*g+16] {
							s += int(q)
						}
						if int(blk.bsums[g]) != s {
							t.Fatalf("bsums[%d] = %d, want %d", g, blk.bsums[g], s)
						}
					}
				}
			} else {
				for _, blk := range asQ8(xq) {
					var s int
					for _, q := range blk.q {
						s += int(q)
					}
					if want := blk.d * float32(s); blk.s != want {
						t.Fatalf("s = %v, want %v", blk.s, want)
					}
				}
			}
		})
	}
}

// TestQuantizeActSIMDMatchesGo: the AVX2 activation quantizers give the
// portable ones' bytes, on blocks with outliers, all-zero blocks, a tie
// between the maximum and the minus minimum, and tiny and huge values.
func TestQuantizeActSIMDMatchesGo(t *testing.T) {
	if !simdAvailable {
		t.Skip("no AVX2 on this CPU: the portable quantizers are the only ones")
	}
	saved := useSIMD
	defer func() { useSIMD = saved }()
	r := newRand(13)
	const cols = 4 * QKK
	x := randVec(r, cols, 2)
	clear(x[QKK : 2*QKK])                 // an all-zero K block (eight zero 32-blocks)
	x[2*QKK+5], x[2*QKK+77] = 9, -9       // a tie in the third K block
	for i := 3 * QKK; i < 3*QKK+64; i++ { // tiny and huge values
		x[i] = float32(r.NormFloat64()) * 1e-30
	}
	x[3*QKK+100] = 3e4
	for _, typ := range []DType{Q4_0, Q4_K} {
		got, want := make([]byte, actRowBytes(typ, cols)), make([]byte, actRowBytes(typ, cols))
		for i := range got { // stale scratch: every byte must be written
			got[i], want[i] = 0xaa, 0x55
		}
		useSIMD = true
		quantizeAct(typ, got, x, 1, cols)
		useSIMD = false
		quantizeAct(typ, want, x, 1, cols)
		if !bytes.Equal(got, want) {
			for i := range got {
				if got[i] != want[i] {
					t.Fatalf("%v: byte %d: AVX2 %#x, Go %#x", typ, i, got[i], want[i])
				}
			}
		}
	}
}

// TestVecDotQuant checks every quantized format's dot kernels (SIMD and
// portable) against the float64 reference computed on the dequantized
// weights and the quantized activation, within quantTol, on random blocks
// (every bit pattern) and on rows of one, a few and many blocks.
func TestVecDotQuant(t *testing.T) {
	quantImpls(t, func(t *testing.T) {
		r := newRand(9)
		for _, typ := range quantTypes {
			bs := typ.BlockSize()
			for _, nb := range []int{1, 2, 3, 8, 17} {
				cols := nb * bs
				const rows = 21
				rb := nb * typ.BlockBytes()
				w := randomBlocks(r, typ, rows*nb)
				x := randVec(r, cols, 4)
				xq := make([]byte, actRowBytes(typ, cols))
				quantizeAct(typ, xq, x, 1, cols)
				xd := dequantAct(typ, xq, cols)
				out := make([]float32, rows+1)
				out[rows] = 42
				vecDotRows(typ, w, rb, rows, xq, out[:rows])
				if out[rows] != 42 {
					t.Fatalf("%v: wrote past the output", typ)
				}
				for row := range rows {
					want, mag := refQuantDot(typ, w[row*rb:(row+1)*rb], xd)
					if tol := quantTol(nb, mag); math.Abs(float64(out[row])-want) > tol {
						t.Fatalf("%v %d blocks row %d: %v, want %v (tol %g)", typ, nb, row, out[row], want, tol)
					}
				}
			}
		}
	})
}

// TestMatMulQuant runs MatMul end to end for every quantized format on the
// nil Pool and on worker pools, for decode-sized and prefill-sized m,
// against the reference on the quantized activation rows.
func TestMatMulQuant(t *testing.T) {
	pools := []*Pool{nil, NewPool(2), NewPool(3)}
	defer func() {
		for _, p := range pools {
			p.Close()
		}
	}()
	// References are computed once; every kernel variant is held to them.
	type qcase struct {
		w         Matrix
		m         int
		x         []float32
		want, tol []float64
	}
	var cases []qcase
	r := newRand(10)
	for _, typ := range quantTypes {
		cols := 2 * typ.BlockSize()
		if typ.BlockSize() == 32 {
			cols = 96
		}
		for _, rows := range []int{5, 37} {
			w := Matrix{Type: typ, Rows: rows, Cols: cols, Data: randomBlocks(r, typ, rows*cols/typ.BlockSize())}
			// 70 rows span two activation-row blocks (qmXBlock); 11 is
			// one eight-row tile and three single rows, 70's second
			// block a four-row tile and two single rows.
			for _, m := range []int{1, 3, 11, 16, 70} {
				x := randVec(r, m*cols, 2)
				want, tol := quantMatMulRef(typ, x, m, w)
				cases = append(cases, qcase{w, m, x, want, tol})
			}
		}
	}
	quantImpls(t, func(t *testing.T) {
		for _, c := range cases {
			for _, p := range pools {
				out := make([]float32, c.m*c.w.Rows+1)
				out[len(out)-1] = 42
				p.MatMul(out, c.x, c.m, c.w)
				for i, g := range out[:c.m*c.w.Rows] {
					if !near(g, c.want[i], c.tol[i]) {
						t.Fatalf("%v %dx%d m=%d threads=%d: out[%d] = %v, want %v (tol %g)", c.w.Type, c.w.Rows, c.w.Cols, c.m, p.Threads(), i, g, c.want[i], c.tol[i])
					}
				}
				if out[len(out)-1] != 42 {
					t.Fatalf("%v m=%d wrote past the output", c.w.Type, c.m)
				}
			}
		}
	})
}

// quantMatMulRef is the reference for MatMul on a quantized w (every x row
// quantized as the kernels do, dotted in float64 with the dequantized
// weights) and the tolerance of each output.
func quantMatMulRef(typ DType, x []float32, m int, w Matrix) (want, tol []float64) {
	rb := w.rowBytes()
	want, tol = make([]float64, m*w.Rows), make([]float64, m*w.Rows)
	for i := range m {
		xq := make([]byte, actRowBytes(typ, w.Cols))
		quantizeAct(typ, xq, x[i*w.Cols:(i+1)*w.Cols], 1, w.Cols)
		xd := dequantAct(typ, xq, w.Cols)
		for r := range w.Rows {
			d, mag := refQuantDot(typ, w.Data[r*rb:(r+1)*rb], xd)
			want[i*w.Rows+r], tol[i*w.Rows+r] = d, quantTol(w.Cols/typ.BlockSize(), mag)
		}
	}
	return want, tol
}

// TestQuantizeBlocks: every weight quantizer round-trips normal data with
// a relative RMS error inside its format's range (llama.cpp's figures for
// Gaussian weights, with headroom), coarser formats err more, all-zero
// blocks stay zero, and partial blocks are refused.
func TestQuantizeBlocks(t *testing.T) {
	r := newRand(12)
	const n = QKK * 64
	src := make([]float32, n)
	for i := range src {
		src[i] = float32(r.NormFloat64())
	}
	clear(src[QKK : 2*QKK]) // an all-zero super-block
	maxRMSE := map[DType]float64{
		Q8_0: 0.007, Q6_K: 0.022, Q5_K: 0.045, Q5_0: 0.06, Q5_1: 0.05, IQ4_XS: 0.09, IQ4_NL: 0.09,
		Q4_K: 0.085, Q4_0: 0.12, Q4_1: 0.1, Q3_K: 0.18, Q2_K: 0.35, MXFP4: 0.14,
	}
	for _, typ := range quantTypes {
		t.Run(typ.String(), func(t *testing.T) {
			raw := make([]byte, n/typ.BlockSize()*typ.BlockBytes())
			if err := QuantizeBlocks(typ, raw, src); err != nil {
				t.Fatal(err)
			}
			out := make([]float32, n)
			if err := DequantizeBlocks(typ, raw, out); err != nil {
				t.Fatal(err)
			}
			var se, ss float64
			for i := range src {
				d := float64(out[i] - src[i])
				se += d * d
				ss += float64(src[i]) * float64(src[i])
				if i >= QKK && i < 2*QKK && out[i] != 0 {
					t.Fatalf("zero value %d decoded as %v", i, out[i])
				}
			}
			rmse := math.Sqrt(se / ss)
			t.Logf("%v: relative RMS error %.4f", typ, rmse)
			if rmse > maxRMSE[typ] || rmse == 0 {
				t.Fatalf("relative RMS error %.4f, want (0, %.3f]", rmse, maxRMSE[typ])
			}
		})
	}
	if err := QuantizeBlocks(Q4_K, make([]byte, 144), make([]float32, 255)); !errors.Is(err, ErrShape) {
		t.Errorf("255 values: %v", err)
	}
	if err := QuantizeBlocks(Q4_0, make([]byte, 17), make([]float32, 32)); !errors.Is(err, ErrShape) {
		t.Errorf("short dst: %v", err)
	}
	if err := QuantizeBlocks(BF16, make([]byte, 2), make([]float32, 1)); !errors.Is(err, ErrShape) {
		t.Errorf("bf16: %v", err)
	}
}
