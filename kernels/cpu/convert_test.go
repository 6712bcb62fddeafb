package cpu

import (
	"encoding/binary"
	"errors"
	"math"
	"testing"
)

func TestF16ToF32Exhaustive(t *testing.T) {
	for h := range 1 << 16 {
		got := float64(F16ToF32(uint16(h)))
		want := refHalf(uint16(h))
		if math.IsNaN(want) {
			if !math.IsNaN(got) {
				t.Fatalf("F16ToF32(%#04x) = %v, want NaN", h, got)
			}
			continue
		}
		if got != want || math.Signbit(got) != math.Signbit(want) {
			t.Fatalf("F16ToF32(%#04x) = %v, want %v", h, got, want)
		}
	}
}

func TestF16RoundTripExhaustive(t *testing.T) {
	for h := range 1 << 16 {
		f := F16ToF32(uint16(h))
		got := F32ToF16(f)
		if f != f {
			if got&0x7c00 != 0x7c00 || got&0x3ff == 0 || got&0x8000 != uint16(h)&0x8000 {
				t.Fatalf("NaN %#04x -> %#04x is not a NaN of the same sign", h, got)
			}
			continue
		}
		if got != uint16(h) {
			t.Fatalf("F32ToF16(F16ToF32(%#04x)) = %#04x", h, got)
		}
	}
}

// checkNearestEven verifies that enc(f) is the nearest representable value,
// ties to an even encoding, using the float64 decoder dec.
func checkNearestEven(t *testing.T, name string, f float32, h uint16, dec func(uint16) float64, maxFinite float64, overflow float64) {
	t.Helper()
	x := float64(f)
	if math.Abs(x) >= overflow {
		if !math.IsInf(dec(h), int(math.Copysign(1, x))) {
			t.Fatalf("%s(%v) = %#04x, want infinity", name, f, h)
		}
		return
	}
	got := dec(h)
	if math.Abs(got) > maxFinite || math.Signbit(got) != math.Signbit(x) && got != 0 {
		t.Fatalf("%s(%v) = %#04x (%v)", name, f, h, got)
	}
	err := math.Abs(got - x)
	for _, nb := range []uint16{h - 1, h + 1, h ^ 0x8000} {
		v := dec(nb)
		if math.IsNaN(v) || math.IsInf(v, 0) {
			continue
		}
		e := math.Abs(v - x)
		if e < err || (e == err && h&1 == 1 && nb&1 == 0 && v != got) {
			t.Fatalf("%s(%v) = %#04x (%v, err %g) but %#04x (%v, err %g) is nearer or even", name, f, h, got, err, nb, v, e)
		}
	}
}

func TestF32ToF16Rounding(t *testing.T) {
	r := newRand(1)
	cases := []float32{0, 1, -1, 65504, 65519.996, 65520, -65520, 1e-8, 2.9802322e-08, 2.9802326e-08, 8.940697e-08, 6.1035156e-05, 6.1e-05, 0.1, 1.0009766, 1.0004883, 1.0014648}
	for range 200000 {
		// Random exponents across the f16 range, subnormals included.
		e := r.IntN(40) - 28
		cases = append(cases, float32(math.Ldexp(r.Float64()*2-1, e)))
	}
	for _, f := range cases {
		checkNearestEven(t, "F32ToF16", f, F32ToF16(f), refHalf, 65504, 65520)
	}
	// Exact ties: halfway between 1 and the next f16 rounds to even (1), the
	// next tie rounds up to the even neighbour.
	for _, c := range []struct {
		f    float32
		want uint16
	}{
		{1 + 1.0/2048, 0x3c00}, {1 + 3.0/2048, 0x3c02}, {float32(math.Ldexp(1, -25)), 0}, {float32(math.Ldexp(3, -25)), 2},
		{float32(math.Ldexp(1.5, -25)), 1}, {65520, 0x7c00}, {65519.996, 0x7bff}, {float32(math.Inf(-1)), 0xfc00},
		{float32(math.Copysign(0, -1)), 0x8000},
	} {
		if got := F32ToF16(c.f); got != c.want {
			t.Errorf("F32ToF16(%v) = %#04x, want %#04x", c.f, got, c.want)
		}
	}
	if h := F32ToF16(float32(math.NaN())); h&0x7c00 != 0x7c00 || h&0x3ff == 0 {
		t.Errorf("F32ToF16(NaN) = %#04x, not a NaN", h)
	}
}

func TestBF16Conversions(t *testing.T) {
	for h := range 1 << 16 {
		got := float64(BF16ToF32(uint16(h)))
		want := refBF16(uint16(h))
		if math.IsNaN(want) != math.IsNaN(got) || (!math.IsNaN(want) && got != want) {
			t.Fatalf("BF16ToF32(%#04x) = %v, want %v", h, got, want)
		}
		if !math.IsNaN(want) && F32ToBF16(float32(got)) != uint16(h) {
			t.Fatalf("bf16 round trip of %#04x = %#04x", h, F32ToBF16(float32(got)))
		}
	}
	r := newRand(2)
	maxBF := refBF16(0x7f7f)
	overflow := maxBF + math.Ldexp(1, 127-8) // halfway to the next power
	for range 200000 {
		f := float32(math.Ldexp(r.Float64()*2-1, r.IntN(300)-150))
		checkNearestEven(t, "F32ToBF16", f, F32ToBF16(f), refBF16, maxBF, overflow)
	}
	if got := F32ToBF16(1 + 1.0/256); got != 0x3f80 {
		t.Errorf("tie 1+2^-8 rounded to %#04x, want 0x3f80", got)
	}
	if got := F32ToBF16(1 + 3.0/256); got != 0x3f82 {
		t.Errorf("tie 1+3*2^-8 rounded to %#04x, want 0x3f82", got)
	}
	if h := F32ToBF16(float32(math.NaN())); h&0x7f80 != 0x7f80 || h&0x7f == 0 {
		t.Errorf("F32ToBF16(NaN) = %#04x, not a NaN", h)
	}
	if h := F32ToBF16(math.MaxFloat32); h != 0x7f80 {
		t.Errorf("F32ToBF16(MaxFloat32) = %#04x, want +inf", h)
	}
}

// refQuantQ8 is GGML's quantize_row_q8_0_ref written out in float32.
func refQuantQ8(x []float32) (d uint16, q [32]int8) {
	var amax float32
	for _, v := range x {
		amax = max(amax, float32(math.Abs(float64(v))))
	}
	df := amax / 127
	id := float32(0)
	if df != 0 {
		id = 1 / df
	}
	for j, v := range x {
		p := v * id
		// roundf: half away from zero
		r := math.Floor(math.Abs(float64(p)) + 0.5)
		q[j] = int8(math.Copysign(r, float64(p)))
	}
	return F32ToF16(df), q
}

func TestQuantizeQ8_0(t *testing.T) {
	r := newRand(3)
	for _, n := range []int{0, 32, 96, 320} {
		src := randVec(r, n, 3)
		if n >= 64 {
			clear(src[32:64]) // an all-zero block has d = 0 and q = 0
			src[70] = 0.5
		}
		dst := make([]byte, n/32*34)
		if err := QuantizeQ8_0(dst, src); err != nil {
			t.Fatal(err)
		}
		for b := 0; b < n/32; b++ {
			d, q := refQuantQ8(src[b*32 : (b+1)*32])
			blk := dst[b*34:]
			if got := binary.LittleEndian.Uint16(blk); got != d {
				t.Fatalf("n=%d block %d: d = %#04x, want %#04x", n, b, got, d)
			}
			dv := refHalf(d)
			for j := range 32 {
				if int8(blk[2+j]) != q[j] {
					t.Fatalf("n=%d block %d q[%d] = %d, want %d", n, b, j, int8(blk[2+j]), q[j])
				}
				if e := math.Abs(dv*float64(q[j]) - float64(src[b*32+j])); e > dv*(0.5+127.0/2048)+1e-12 { // rounding plus the f16 error of d
					t.Fatalf("n=%d block %d value %d error %g beyond bound for d = %g", n, b, j, e, dv)
				}
			}
		}
	}
	// A hand-checked block: max 127 → d = 1, values round half away from zero.
	src := make([]float32, 32)
	src[0], src[1], src[2], src[3] = 127, -2.5, 2.5, 0.49
	dst := make([]byte, 34)
	if err := QuantizeQ8_0(dst, src); err != nil {
		t.Fatal(err)
	}
	if binary.LittleEndian.Uint16(dst) != 0x3c00 || int8(dst[2]) != 127 || int8(dst[3]) != -3 || int8(dst[4]) != 3 || dst[5] != 0 {
		t.Fatalf("hand block = %x", dst)
	}
	for _, c := range []struct{ dst, src int }{{34, 31}, {33, 32}, {0, 32}} {
		err := QuantizeQ8_0(make([]byte, c.dst), make([]float32, c.src))
		if !errors.Is(err, ErrShape) {
			t.Errorf("QuantizeQ8_0(%d bytes, %d floats) err = %v, want ErrShape", c.dst, c.src, err)
		}
	}
}

func TestDTypeAndValidate(t *testing.T) {
	for _, c := range []struct {
		d    DType
		name string
		cols int
		want int
		err  bool
	}{
		{F32, "f32", 7, 28, false}, {F16, "f16", 7, 14, false}, {BF16, "bf16", 9, 18, false},
		{Q8_0, "q8_0", 64, 68, false}, {Q8_0, "q8_0", 48, 0, true}, {F32, "f32", -1, 0, true}, {DType(200), "dtype(200)", 4, 0, true}, {Q4_K, "q4_k", 512, 288, false}, {Q6_K, "q6_k", 255, 0, true},
	} {
		got, err := c.d.RowBytes(c.cols)
		if c.d.String() != c.name || got != c.want || (err != nil) != c.err {
			t.Errorf("%v.RowBytes(%d) = %d, %v; want %d, err=%v", c.d, c.cols, got, err, c.want, c.err)
		}
		if err != nil && !errors.Is(err, ErrShape) {
			t.Errorf("error %v does not wrap ErrShape", err)
		}
	}
	ok := Matrix{Type: Q8_0, Rows: 2, Cols: 32, Data: make([]byte, 68)}
	if err := ok.Validate(); err != nil {
		t.Errorf("valid matrix: %v", err)
	}
	for _, m := range []Matrix{
		{Type: Q8_0, Rows: 2, Cols: 32, Data: make([]byte, 67)},
		{Type: F32, Rows: -1, Cols: 2},
		{Type: F16, Rows: 1, Cols: 3, Data: make([]byte, 8)},
	} {
		if err := m.Validate(); !errors.Is(err, ErrShape) {
			t.Errorf("Validate(%v %dx%d, %d bytes) = %v, want ErrShape", m.Type, m.Rows, m.Cols, len(m.Data), err)
		}
	}
}

func TestDequantizeAndGather(t *testing.T) {
	r := newRand(4)
	for _, dt := range []DType{F32, F16, BF16, Q8_0} {
		m := makeMatrix(t, r, dt, 9, 64)
		rb, _ := dt.RowBytes(64)
		out := make([]float32, 64)
		for row := range m.Rows {
			Dequantize(out, m, row)
			want := refDecode(dt, m.Data[row*rb:], 64)
			for j := range out {
				if float64(out[j]) != want[j] {
					t.Fatalf("%v row %d col %d = %v, want %v", dt, row, j, out[j], want[j])
				}
			}
		}
		ids := []int32{3, 0, 8, 3}
		g := make([]float32, len(ids)*64)
		EmbeddingGather(g, m, ids)
		for i, id := range ids {
			want := refDecode(dt, m.Data[int(id)*rb:], 64)
			for j := range 64 {
				if float64(g[i*64+j]) != want[j] {
					t.Fatalf("%v gather %d col %d = %v, want %v", dt, i, j, g[i*64+j], want[j])
				}
			}
		}
	}
}

// TestF32ToF16Bytes: the bulk converter (F16C where present) gives exactly
// F32ToF16's bits for random bit patterns of every class (normals,
// subnormals, halfway cases, overflow, infinities, NaNs) and for tails.
func TestF32ToF16Bytes(t *testing.T) {
	impls(t, func(t *testing.T) {
		r := newRand(81)
		src := make([]float32, 1<<16+5)
		for i := range src {
			switch i % 4 {
			case 0: // anything, NaNs included
				src[i] = math.Float32frombits(r.Uint32())
			case 1: // around the half range, halfway cases
				src[i] = math.Float32frombits(uint32(r.IntN(0x10000))<<13 | 0x1000 | uint32(r.IntN(2))<<31 + 0x33000000)
			case 2: // subnormal halves
				src[i] = float32(r.Float64()*6.1e-5) * float32(1-2*r.IntN(2))
			default:
				src[i] = float32(r.NormFloat64() * 1e4)
			}
		}
		src[7], src[8], src[9] = float32(math.Inf(1)), 65520, -65519.99
		dst := make([]byte, 2*len(src)+1)
		dst[len(dst)-1] = 0x5a
		F32ToF16Bytes(dst[:2*len(src)], src)
		for i, f := range src {
			want := F32ToF16(f)
			got := uint16(dst[2*i]) | uint16(dst[2*i+1])<<8
			if f != f { // NaN: any quiet NaN of the same sign
				if got&0x7c00 != 0x7c00 || got&0x3ff == 0 || got&0x8000 != want&0x8000 {
					t.Fatalf("%#08x: got %#04x, not a NaN of the same sign", math.Float32bits(f), got)
				}
				continue
			}
			if got != want {
				t.Fatalf("%v (%#08x): got %#04x, want %#04x", f, math.Float32bits(f), got, want)
			}
		}
		if dst[len(dst)-1] != 0x5a {
			t.Fatal("wrote past the destination")
		}
	})
}
