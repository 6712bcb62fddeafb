package cpu

import (
	"encoding/binary"
	"math"
	"testing"
)

// Float64 references written from the format definitions (OCP 8-bit FP,
// OCP MX v1.0, NVFP4), independent of the package's bit manipulation.

// refMini decodes a minifloat with ebits exponent and mbits mantissa bits;
// special reports what the all-ones exponent means (E4M3: only S.1111.111
// is NaN; E5M2: IEEE-like Inf and NaN).
func refMini(c uint8, ebits, mbits, bias int, ieee bool) float64 {
	sign := 1.0
	if c&0x80 != 0 {
		sign = -1
	}
	e := int(c>>mbits) & (1<<ebits - 1)
	m := float64(int(c) & (1<<mbits - 1))
	top := 1<<ebits - 1
	switch {
	case ieee && e == top && m == 0:
		return sign * math.Inf(1)
	case ieee && e == top, !ieee && e == top && int(m) == 1<<mbits-1:
		return math.NaN()
	case e == 0:
		return sign * m / float64(int(1)<<mbits) * math.Ldexp(1, 1-bias)
	}
	return sign * (1 + m/float64(int(1)<<mbits)) * math.Ldexp(1, e-bias)
}

func refE4M3(c uint8) float64 { return refMini(c, 4, 3, 7, false) }
func refE5M2(c uint8) float64 { return refMini(c, 5, 2, 15, true) }

func refE8M0(c uint8) float64 {
	if c == 0xff {
		return math.NaN()
	}
	return math.Ldexp(1, int(c)-127)
}

func refE2M1(c uint8) float64 {
	v := []float64{0, 0.5, 1, 1.5, 2, 3, 4, 6}[c&7]
	if c&8 != 0 {
		return -v
	}
	return v
}

// refDecodeKV decodes n elements of a stored row in float64.
func refDecodeKV(t KVType, data, scales []byte, n int) []float64 {
	out := make([]float64, n)
	for i := range out {
		switch t {
		case KVF32:
			out[i] = float64(math.Float32frombits(binary.LittleEndian.Uint32(data[4*i:])))
		case KVF16:
			out[i] = refHalf(binary.LittleEndian.Uint16(data[2*i:]))
		case KVBF16:
			out[i] = refBF16(binary.LittleEndian.Uint16(data[2*i:]))
		case KVE4M3:
			out[i] = refE4M3(data[i])
		case KVE5M2:
			out[i] = refE5M2(data[i])
		case KVMXFP8:
			out[i] = refE4M3(data[i]) * refE8M0(scales[i/32])
		case KVNVFP4:
			out[i] = refE2M1(data[i/2]>>(4*(i%2))) * refE4M3(scales[i/16])
		}
	}
	return out
}

// sameValue: equal as numbers (so +0 == -0), or both NaN.
func sameValue(a, b float64) bool { return a == b || (a != a && b != b) }

func TestFP8DecodeExhaustive(t *testing.T) {
	for c := range 256 {
		for _, f := range []struct {
			name string
			got  float32
			want float64
		}{{"e4m3", E4M3ToF32(uint8(c)), refE4M3(uint8(c))}, {"e5m2", E5M2ToF32(uint8(c)), refE5M2(uint8(c))}} {
			if !sameValue(float64(f.got), f.want) || (f.want == 0 && math.Signbit(float64(f.got)) != math.Signbit(f.want)) {
				t.Fatalf("%s %#02x = %v, want %v", f.name, c, f.got, f.want)
			}
		}
	}
}

// checkFP8Nearest verifies enc(f) against every finite code of the format:
// the nearest value, ties to the even code, magnitudes past the largest
// finite value (infinities too) saturate to it, NaN gives 0x7f.
func checkFP8Nearest(t *testing.T, name string, f float32, got uint8, dec func(uint8) float64, maxFinite float64) {
	t.Helper()
	x := float64(f)
	if x != x {
		if got != 0x7f {
			t.Fatalf("%s(NaN) = %#02x, want 0x7f", name, got)
		}
		return
	}
	if math.Abs(x) >= maxFinite {
		if dec(got) != math.Copysign(maxFinite, x) {
			t.Fatalf("%s(%v) = %#02x (%v), want saturation to %v", name, f, got, dec(got), math.Copysign(maxFinite, x))
		}
		return
	}
	best, bestErr := -1, math.Inf(1)
	for c := range 256 {
		v := dec(uint8(c))
		if v != v || math.IsInf(v, 0) || (v == 0 && math.Signbit(v) != math.Signbit(x)) {
			continue
		}
		e := math.Abs(v - x)
		if e < bestErr || (e == bestErr && c&1 == 0) {
			best, bestErr = c, e
		}
	}
	if dec(got) != dec(uint8(best)) {
		t.Fatalf("%s(%v) = %#02x (%v), nearest-even is %#02x (%v)", name, f, got, dec(got), best, dec(uint8(best)))
	}
}

func TestFP8EncodeNearestEven(t *testing.T) {
	r := newRand(81)
	cases := []float32{0, float32(math.Copysign(0, -1)), 1, -1, 448, 449, 463.99, 464, 500, 57344, 61439, 61440, 1e30,
		float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()), 1e-40}
	for range 100000 {
		cases = append(cases, float32(math.Ldexp(r.Float64()*2-1, r.IntN(40)-24)))
	}
	for _, f := range cases {
		checkFP8Nearest(t, "F32ToE4M3", f, F32ToE4M3(f), refE4M3, 448)
		checkFP8Nearest(t, "F32ToE5M2", f, F32ToE5M2(f), refE5M2, 57344)
	}
	// Hand-worked: subnormals, ties to even, saturation, NaN.
	for _, c := range []struct {
		name string
		enc  func(float32) uint8
		f    float64
		want uint8
	}{
		{"e4m3 smallest subnormal", F32ToE4M3, math.Ldexp(1, -9), 0x01},
		{"e4m3 half the smallest subnormal ties to 0", F32ToE4M3, math.Ldexp(1, -10), 0x00},
		{"e4m3 1.5 subnormals ties to even 2", F32ToE4M3, math.Ldexp(1.5, -9), 0x02},
		{"e4m3 2.5 subnormals ties to even 2", F32ToE4M3, math.Ldexp(2.5, -9), 0x02},
		{"e4m3 largest subnormal", F32ToE4M3, math.Ldexp(7, -9), 0x07},
		{"e4m3 7.5 subnormals rounds to the smallest normal", F32ToE4M3, math.Ldexp(7.5, -9), 0x08},
		{"e4m3 1+1/16 ties to 1", F32ToE4M3, 1 + 1.0/16, 0x38},
		{"e4m3 1+3/16 ties to 1.25", F32ToE4M3, 1 + 3.0/16, 0x3a},
		{"e4m3 -2", F32ToE4M3, -2, 0xc0},
		{"e4m3 448", F32ToE4M3, 448, 0x7e},
		{"e4m3 464 saturates (no 480)", F32ToE4M3, 464, 0x7e},
		{"e4m3 -1e9 saturates", F32ToE4M3, -1e9, 0xfe},
		{"e4m3 -Inf saturates", F32ToE4M3, math.Inf(-1), 0xfe},
		{"e4m3 NaN", F32ToE4M3, math.NaN(), 0x7f},
		{"e5m2 smallest subnormal", F32ToE5M2, math.Ldexp(1, -16), 0x01},
		{"e5m2 half the smallest subnormal ties to 0", F32ToE5M2, math.Ldexp(1, -17), 0x00},
		{"e5m2 1.5 subnormals ties to even 2", F32ToE5M2, math.Ldexp(1.5, -16), 0x02},
		{"e5m2 1+1/8 ties to 1", F32ToE5M2, 1 + 1.0/8, 0x3c},
		{"e5m2 57344", F32ToE5M2, 57344, 0x7b},
		{"e5m2 61440 saturates (no Inf)", F32ToE5M2, 61440, 0x7b},
		{"e5m2 +Inf saturates", F32ToE5M2, math.Inf(1), 0x7b},
		{"e5m2 NaN", F32ToE5M2, math.NaN(), 0x7f},
	} {
		if got := c.enc(float32(c.f)); got != c.want {
			t.Errorf("%s: %v encodes to %#02x, want %#02x", c.name, c.f, got, c.want)
		}
	}
}

// TestBlockScaledHandWorked checks MXFP8 and NVFP4 blocks worked out by
// hand from the specifications.
func TestBlockScaledHandWorked(t *testing.T) {
	fill := func(n int, v float32, extra map[int]float32) []float32 {
		x := make([]float32, n)
		for i := range x {
			x[i] = v
		}
		for i, e := range extra {
			x[i] = e
		}
		return x
	}
	for _, c := range []struct {
		name      string
		t         KVType
		src       []float32
		scale     uint8           // the block's scale byte
		elems     map[int]uint8   // element codes to check (NVFP4: nibbles)
		decoded   map[int]float64 // decoded values to check
		decodeNaN bool            // every decoded element NaN
	}{
		// amax 1: X = floor(log2 1) - 8 = -8 → byte 119; 1·2^8 = 256 is E4M3 0x78.
		{name: "mxfp8 ones", t: KVMXFP8, src: fill(32, 1, map[int]float32{3: -0.5}), scale: 119,
			elems: map[int]uint8{0: 0x78, 3: 0xf0}, decoded: map[int]float64{0: 1, 3: -0.5}},
		// amax 500: X = 8 - 8 = 0 → byte 127; 500 saturates to 448.
		{name: "mxfp8 saturating max", t: KVMXFP8, src: fill(32, 1, map[int]float32{7: 500}), scale: 127,
			elems: map[int]uint8{7: 0x7e, 0: 0x38}, decoded: map[int]float64{7: 448, 0: 1}},
		// 2^-9 in a block of amax 1 is 2^-1 after scaling: exact.
		{name: "mxfp8 small element", t: KVMXFP8, src: fill(32, 1, map[int]float32{1: float32(math.Ldexp(1, -9))}), scale: 119,
			decoded: map[int]float64{1: math.Ldexp(1, -9)}},
		{name: "mxfp8 zero block", t: KVMXFP8, src: fill(32, 0, nil), scale: 0, elems: map[int]uint8{0: 0}, decoded: map[int]float64{0: 0}},
		{name: "mxfp8 NaN block", t: KVMXFP8, src: fill(32, 1, map[int]float32{5: float32(math.NaN())}), scale: 0xff, decodeNaN: true},
		// amax 6: 6/6 = 1 is E4M3 0x38; 0.25 ties to 0, 0.75 to 1, 5 to 4, 3.5 to 4.
		{name: "nvfp4 unit scale ties", t: KVNVFP4, src: fill(16, 6, map[int]float32{0: 0.25, 1: 0.75, 2: 5, 3: 3.5, 4: -1.25, 5: -6}), scale: 0x38,
			elems: map[int]uint8{0: 0, 1: 2, 2: 6, 3: 6, 4: 0xa, 5: 0xf}, decoded: map[int]float64{0: 0, 1: 1, 2: 4, 3: 4, 4: -1, 5: -6, 6: 6}},
		// amax 1: 1/6 rounds up to E4M3 0.171875 (0x23: 2^-3·1.375); 1/0.171875 = 5.8 → 6.
		{name: "nvfp4 scale rounds up", t: KVNVFP4, src: fill(16, 1, nil), scale: 0x23,
			elems: map[int]uint8{0: 7}, decoded: map[int]float64{0: 1.03125}},
		// amax 1e4: the scale saturates at 448, elements clip at 6·448.
		{name: "nvfp4 saturating", t: KVNVFP4, src: fill(16, 1, map[int]float32{9: -1e4}), scale: 0x7e,
			decoded: map[int]float64{9: -2688, 0: 0}},
		// amax 1e-4: the smallest scale 2^-9; 1e-4/2^-9 = 0.05 → 0.
		{name: "nvfp4 tiny", t: KVNVFP4, src: fill(16, 1e-4, nil), scale: 0x01, decoded: map[int]float64{0: 0}},
		{name: "nvfp4 zero block", t: KVNVFP4, src: fill(16, 0, nil), scale: 0, decoded: map[int]float64{0: 0}},
		{name: "nvfp4 NaN block", t: KVNVFP4, src: fill(16, 1, map[int]float32{2: float32(math.NaN())}), scale: 0x7f, decodeNaN: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			n := len(c.src)
			data := make([]byte, c.t.RowBytes(n))
			scales := make([]byte, c.t.ScaleBytes(n))
			EncodeKV(c.t, data, scales, c.src)
			if scales[0] != c.scale {
				t.Fatalf("scale byte %#02x, want %#02x", scales[0], c.scale)
			}
			for i, want := range c.elems {
				got := data[i]
				if c.t == KVNVFP4 {
					got = data[i/2] >> (4 * (i % 2)) & 0xf
				}
				if got != want {
					t.Errorf("element %d code %#x, want %#x", i, got, want)
				}
			}
			ref := refDecodeKV(c.t, data, scales, n)
			impls(t, func(t *testing.T) {
				dst := make([]float32, n)
				DecodeKV(c.t, dst, data, scales)
				for i := range dst {
					if !sameValue(float64(dst[i]), ref[i]) {
						t.Fatalf("decoded[%d] = %v, reference %v", i, dst[i], ref[i])
					}
					if c.decodeNaN && dst[i] == dst[i] {
						t.Fatalf("decoded[%d] = %v, want NaN", i, dst[i])
					}
				}
				for i, want := range c.decoded {
					if float64(dst[i]) != want {
						t.Errorf("decoded[%d] = %v, want %v", i, dst[i], want)
					}
				}
			})
		})
	}
}

// TestDecodeKVAllCodes decodes rows of arbitrary bytes — every code and
// scale byte, NaN codes and E8M0 scales beyond what the encoders write
// included — on the portable and SIMD paths, against the reference.
func TestDecodeKVAllCodes(t *testing.T) {
	r := newRand(82)
	for _, kt := range []KVType{KVF16, KVBF16, KVE4M3, KVE5M2, KVMXFP8, KVNVFP4, KVF32} {
		for _, n := range []int{32, 96, 160, 4096} {
			data := make([]byte, kt.RowBytes(n))
			scales := make([]byte, kt.ScaleBytes(n))
			for i := range data {
				data[i] = byte(r.IntN(256))
				if kt.RowBytes(1) == 1 && i < 256 {
					data[i] = byte(i) // every code once
				}
			}
			for i := range scales {
				scales[i] = byte(r.IntN(256))
				if kt == KVMXFP8 && n < 4096 {
					scales[i] = byte(100 + r.IntN(60)) // a row the SIMD path takes
				}
			}
			want := refDecodeKV(kt, data, scales, n)
			impls(t, func(t *testing.T) {
				got := make([]float32, n)
				DecodeKV(kt, got, data, scales)
				for i := range got {
					// The reference is exact in float64; float32 holds it
					// unless it overflows (E8M0 scales above 2^119).
					if w := float64(float32(want[i])); !sameValue(float64(got[i]), w) {
						t.Fatalf("%v n=%d: element %d = %v, want %v", kt, n, i, got[i], w)
					}
				}
			})
		}
	}
}

// TestEncodeKVPaths: the SIMD encoders equal the scalar ones element for
// element (f16, bf16), on random values and specials.
func TestEncodeKVPaths(t *testing.T) {
	r := newRand(83)
	src := randVec(r, 1000, 100)
	src = append(src, 0, float32(math.Copysign(0, -1)), float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()), 1e-40, 65520, 3.4e38)
	for len(src)%8 != 0 {
		src = append(src, 1)
	}
	for _, kt := range []KVType{KVF16, KVBF16} {
		var want []byte
		impls(t, func(t *testing.T) {
			got := make([]byte, kt.RowBytes(len(src)))
			EncodeKV(kt, got, nil, src)
			if want == nil {
				want = got
				for i, f := range src {
					h := F32ToF16(f)
					if kt == KVBF16 {
						h = F32ToBF16(f)
					}
					if binary.LittleEndian.Uint16(want[2*i:]) != h {
						t.Fatalf("%v element %d (%v): %#04x, want %#04x", kt, i, f, binary.LittleEndian.Uint16(want[2*i:]), h)
					}
				}
				return
			}
			for i := range got {
				if got[i] != want[i] {
					t.Fatalf("%v byte %d differs between paths: %#02x vs %#02x", kt, i, got[i], want[i])
				}
			}
		})
	}
}

// TestBlockEncodersAreNearest checks every MXFP8 and NVFP4 element is the
// nearest representable value (ties to even, saturating) given the block's
// scale, and the scale choice rule, on random blocks of varied magnitude.
func TestBlockEncodersAreNearest(t *testing.T) {
	r := newRand(84)
	for range 300 {
		mag := math.Ldexp(1, r.IntN(40)-20)
		src := randVec(r, 96, mag)
		for _, kt := range []KVType{KVMXFP8, KVNVFP4} {
			data := make([]byte, kt.RowBytes(len(src)))
			scales := make([]byte, kt.ScaleBytes(len(src)))
			EncodeKV(kt, data, scales, src)
			blk := kt.ScaleBlock()
			for b := range scales {
				amax, _ := blockMax(src[b*blk : (b+1)*blk])
				if kt == KVMXFP8 {
					// 2^X ≤ amax/2^8 < 2^(X+1)
					s := refE8M0(scales[b])
					if q := float64(amax) / s; q < 256 || q >= 512 {
						t.Fatalf("mxfp8 block %d: amax %v over scale %v = %v, want [256, 512)", b, amax, s, q)
					}
				} else {
					// the smallest E4M3 value with value·6 ≥ amax, 448 past 6·448
					s := refE4M3(scales[b])
					if float64(amax) > 6*448 {
						if s != 448 {
							t.Fatalf("nvfp4 block %d: scale %v for amax %v, want 448", b, s, amax)
						}
					} else if s*6 < float64(amax) || (scales[b] > 1 && refE4M3(scales[b]-1)*6 >= float64(amax)) {
						t.Fatalf("nvfp4 block %d: scale %v for amax %v", b, s, amax)
					}
				}
				for j := range blk {
					i := b*blk + j
					x := float64(src[i])
					var got, best float64
					var bestErr = math.Inf(1)
					if kt == KVMXFP8 {
						s := refE8M0(scales[b])
						got = refE4M3(data[i]) * s
						for c := range 256 {
							v := refE4M3(uint8(c)) * s
							if e := math.Abs(v - x); v == v && (e < bestErr || (e == bestErr && c&1 == 0)) {
								best, bestErr = v, e
							}
						}
						if math.Abs(x) >= 448*s {
							best = math.Copysign(448*s, x)
						}
					} else {
						s := refE4M3(scales[b])
						got = refE2M1(data[i/2]>>(4*(i%2))) * s
						for c := range 16 {
							v := refE2M1(uint8(c)) * s
							if e := math.Abs(v - x); e < bestErr || (e == bestErr && c&1 == 0) {
								best, bestErr = v, e
							}
						}
					}
					if got != best {
						t.Fatalf("%v element %d: %v encodes to %v, nearest-even is %v", kt, i, x, got, best)
					}
				}
			}
		}
	}
}
