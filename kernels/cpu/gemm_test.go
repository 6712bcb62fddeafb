package cpu

import (
	"fmt"
	"testing"
)

// gemmImpls runs f on every GEMM microkernel this CPU has: the portable Go
// kernel, AVX2 alone and AVX2 with the AVX-512 12-row tile.
func gemmImpls(t *testing.T, f func(t *testing.T)) {
	t.Helper()
	saved := useAVX512
	defer func() { useAVX512 = saved }()
	impls(t, func(t *testing.T) {
		useAVX512 = false
		if !useSIMD {
			f(t)
			return
		}
		t.Run("avx2", f)
		if avx512Available {
			useAVX512 = true
			t.Run("avx512", f)
		}
	})
}

// forceGEMM routes every m through the GEMM path for the test's duration.
func forceGEMM(t *testing.T) {
	saved := gemmMinMOverride
	gemmMinMOverride = 1
	t.Cleanup(func() { gemmMinMOverride = saved })
}

type gemmCase struct {
	w         Matrix
	m         int
	x         []float32
	want, mag []float64
}

func (c gemmCase) String() string {
	return fmt.Sprintf("%v %dx%d m=%d", c.w.Type, c.w.Rows, c.w.Cols, c.m)
}

// TestMatMulGEMMEdges drives the packed GEMM through its edges: x rows that
// leave partial 6- and 12-row tiles, weight rows that leave a partial panel,
// columns that leave a partial k chunk or a partial 8-column packing group,
// and m beyond one gemmMC block, for every dtype and microkernel. With
// AVX-512 and a Pool, m <= 16 takes the small-batch path (gemm16.go): f32
// rows read in place, staged f16/bf16 and 4 KiB-stride f32 rows, partial
// tiles and partial 16-column staging groups.
func TestMatMulGEMMEdges(t *testing.T) {
	forceGEMM(t)
	r := newRand(70)
	var cases []gemmCase
	add := func(dt DType, m, rows, cols int) {
		w := makeMatrix(t, r, dt, rows, cols)
		x := randVec(r, m*cols, 2)
		want, mag := refMatMul(x, m, w)
		cases = append(cases, gemmCase{w, m, x, want, mag})
	}
	for _, dt := range []DType{F32, F16, BF16} {
		colsList := []int{1, 31, 257, 1000}
		for _, m := range []int{7, 8, 13, 16, 64, 129} {
			for _, rows := range []int{15, 16, 17, 33} {
				for _, cols := range colsList {
					if m*rows*cols > 1<<21 && rows != 33 {
						continue // the largest shapes once per m, to bound the reference's cost
					}
					add(dt, m, rows, cols)
				}
			}
		}
		for _, m := range []int{12, 16} {
			// The small-batch path (gemm16.go) on a row stride of 4 KiB
			// (f32: staged, not read in place), with a partial last tile.
			add(dt, m, 35, 1024)
		}
		add(dt, 2*gemmMC+13, 17, 64) // three x-row blocks, the last partial
		add(dt, 16, 51*gemmNR+5, 40) // work items of several panels, the last item and panel partial
	}
	pool, one := NewPool(3), NewPool(1)
	defer pool.Close()
	defer one.Close()
	gemmImpls(t, func(t *testing.T) {
		for _, c := range cases {
			for _, p := range []*Pool{nil, one, pool} {
				out := make([]float32, c.m*c.w.Rows+1)
				out[len(out)-1] = 42
				p.MatMul(out, c.x, c.m, c.w)
				for i, g := range out[:c.m*c.w.Rows] {
					if tol := 2e-6*c.mag[i] + 1e-7; !near(g, c.want[i], tol) {
						t.Fatalf("%v threads=%d: out[%d] = %v, want %v (tol %g)", c, p.Threads(), i, g, c.want[i], tol)
					}
				}
				if out[len(out)-1] != 42 {
					t.Fatalf("%v threads=%d wrote past the output", c, p.Threads())
				}
			}
		}
	})
}

// TestMatMulGEMMMatchesTiles checks that the default thresholds give the same
// results (within rounding) on both sides of them.
func TestMatMulGEMMMatchesTiles(t *testing.T) {
	r := newRand(71)
	w := makeMatrix(t, r, F16, 40, 300)
	gemmImpls(t, func(t *testing.T) {
		for _, m := range []int{gemmMinM(F16) - 1, gemmMinM(F16), 48} {
			if m < 1 || m > 1000 {
				continue
			}
			x := randVec(r, m*300, 1)
			want, mag := refMatMul(x, m, w)
			out := make([]float32, m*40)
			(*Pool)(nil).MatMul(out, x, m, w)
			for i, g := range out {
				if !near(g, want[i], 2e-6*mag[i]+1e-7) {
					t.Fatalf("m=%d: out[%d] = %v, want %v", m, i, g, want[i])
				}
			}
		}
	})
}

// TestPackPanel compares the assembly packers with the portable packing
// bit for bit, including a column count that is not a multiple of 8.
func TestPackPanel(t *testing.T) {
	if !simdAvailable {
		t.Skip("no AVX2 on this CPU: the portable packing is the only one (covered by TestMatMulGEMMEdges)")
	}
	r := newRand(72)
	saved := useSIMD
	defer func() { useSIMD = saved }()
	for _, dt := range []DType{F32, F16, BF16} {
		w := makeMatrix(t, r, dt, 40, 320)
		rb := w.rowBytes()
		for _, kc := range []int{8, 32, 61, 256} {
			for _, r0 := range []int{0, 24} {
				k0 := 64
				got := randVec(r, gemmNR*gemmKC, 1)
				want := randVec(r, gemmNR*gemmKC, 1)
				useSIMD = true
				packPanel(got, w, rb, r0, gemmNR, k0, kc)
				useSIMD = false
				packPanel(want, w, rb, r0, gemmNR, k0, kc)
				for i := range kc * gemmNR {
					if got[i] != want[i] {
						t.Fatalf("%v kc=%d r0=%d: pk[%d] = %v, want %v", dt, kc, r0, i, got[i], want[i])
					}
				}
				for j := range gemmNR {
					ref := refDecode(dt, w.Data[(r0+j)*rb:], w.Cols)
					for k := range kc {
						if float64(want[k*gemmNR+j]) != ref[k0+k] {
							t.Fatalf("%v row %d col %d: packed %v, want %v", dt, r0+j, k0+k, want[k*gemmNR+j], ref[k0+k])
						}
					}
				}
			}
		}
	}
}

func TestMatMulGEMMDoesNotAllocate(t *testing.T) {
	forceGEMM(t)
	r := newRand(73)
	p := NewPool(2)
	defer p.Close()
	for _, dt := range []DType{F32, F16, BF16} {
		w := makeMatrix(t, r, dt, 40, 320)
		x := randVec(r, 29*320, 1)
		out := make([]float32, 29*40)
		gemmImpls(t, func(t *testing.T) {
			for _, pl := range []*Pool{nil, p} {
				if a := testing.AllocsPerRun(10, func() { pl.MatMul(out, x, 29, w) }); a != 0 {
					t.Errorf("%v threads=%d: %v allocations per call", dt, pl.Threads(), a)
				}
			}
		})
	}
}
