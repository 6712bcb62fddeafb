package cpu

import (
	"math"
)

// KV cache encodings, element by element. The definitions are the OCP 8-bit
// floating point specification (E4M3, E5M2), the OCP Microscaling Formats
// (MX) v1.0 specification (E8M0 shared scales, MXFP8 = E4M3 elements with
// one E8M0 scale per 32) and NVIDIA's NVFP4 (E2M1 elements with one E4M3
// scale per 16). Conversions into a format round to nearest, ties to even;
// the encoders that write a cache saturate instead of producing infinities
// (a cache entry of ±Inf would turn a softmax into NaN): see each function.

// fp8 describes an 8-bit minifloat: mbits mantissa bits, exponent bias,
// the largest finite code (magnitude bits) and its value.
type fp8 struct {
	mbits  uint
	bias   int
	maxMag uint8
	nan    uint8 // the code the encoder writes for NaN
}

var (
	fmtE4M3 = fp8{mbits: 3, bias: 7, maxMag: 0x7e, nan: 0x7f}  // max 448; S.1111.111 is NaN, no Inf
	fmtE5M2 = fp8{mbits: 2, bias: 15, maxMag: 0x7b, nan: 0x7f} // max 57344; S.11111.00 is Inf, S.11111.xx NaN
)

// encode rounds f to the format, to nearest with ties to even, saturating:
// a magnitude at or beyond the largest finite value — infinities included —
// becomes that value with f's sign (the "satfinite" conversion CUDA's
// __nv_cvt_float_to_fp8 performs with __NV_SATFINITE). NaN becomes the
// positive quiet NaN code 0x7f.
func (t fp8) encode(f float32) uint8 {
	b := math.Float32bits(f)
	sign := uint8(b>>24) & 0x80
	abs := b & 0x7fffffff
	if abs > 0x7f800000 {
		return t.nan
	}
	e := int(abs>>23) - 127 // unbiased exponent (f32 subnormals: far below every fp8 value)
	m := abs&0x7fffff | 1<<23
	if abs < 0x00800000 {
		return sign
	}
	// code magnitude = (e+bias)<<mbits | top mantissa bits for normals;
	// below the smallest normal the value is m·2^(e-23) in units of the
	// smallest subnormal 2^(1-bias-mbits).
	shift := 23 - int(t.mbits)
	if ef := e + t.bias; ef < 1 {
		shift += 1 - ef
	}
	if shift > 25 {
		return sign // below half the smallest subnormal
	}
	q := m >> uint(shift)
	rem := m & (1<<uint(shift) - 1)
	half := uint32(1) << uint(shift-1)
	if rem > half || (rem == half && q&1 == 1) {
		q++
	}
	var mag uint32
	if ef := e + t.bias; ef < 1 {
		mag = q // subnormal, or the smallest normal after a carry
	} else {
		mag = uint32(ef)<<t.mbits + (q - 1<<t.mbits) // carries into the exponent
	}
	if mag > uint32(t.maxMag) {
		mag = uint32(t.maxMag)
	}
	return sign | uint8(mag)
}

// decode is the exact value of a code.
func (t fp8) decode(c uint8) float32 {
	sign := float32(1)
	if c&0x80 != 0 {
		sign = -1
	}
	ebits := 7 - t.mbits
	e := int(c>>t.mbits) & (1<<ebits - 1)
	m := int(c) & (1<<t.mbits - 1)
	if e == 1<<ebits-1 && (t.mbits == 2 || m == 1<<t.mbits-1) {
		if t.mbits == 2 && m == 0 {
			return sign * float32(math.Inf(1))
		}
		return float32(math.NaN())
	}
	if e == 0 {
		return sign * float32(math.Ldexp(float64(m), 1-t.bias-int(t.mbits)))
	}
	return sign * float32(math.Ldexp(float64(m|1<<t.mbits), e-t.bias-int(t.mbits)))
}

// F32ToE4M3 converts to OCP FP8 E4M3 (bias 7, largest finite 448, no
// infinities), rounding to nearest even and saturating to ±448; NaN gives
// 0x7f.
func F32ToE4M3(f float32) uint8 { return fmtE4M3.encode(f) }

// F32ToE5M2 converts to OCP FP8 E5M2 (bias 15, largest finite 57344),
// rounding to nearest even and saturating to ±57344 (infinities too, as a
// cache entry must stay finite); NaN gives 0x7f.
func F32ToE5M2(f float32) uint8 { return fmtE5M2.encode(f) }

// E4M3ToF32 and E5M2ToF32 decode exactly (subnormals, E5M2's infinities,
// NaN).
func E4M3ToF32(c uint8) float32 { return e4m3LUT[c] }
func E5M2ToF32(c uint8) float32 { return e5m2LUT[c] }

// e4m3LUT and e5m2LUT hold every code's value; the portable decoders index
// them.
var e4m3LUT, e5m2LUT = fp8LUT(fmtE4M3), fp8LUT(fmtE5M2)

func fp8LUT(t fp8) (lut [256]float32) {
	for c := range lut {
		lut[c] = t.decode(uint8(c))
	}
	return
}

// E8M0ToF32 decodes an MX shared scale: 2^(c-127), NaN for 0xff. Scales
// from 2^-127 up are exact in float32 (2^-127 is subnormal).
func E8M0ToF32(c uint8) float32 {
	if c == 0xff {
		return float32(math.NaN())
	}
	return float32(math.Ldexp(1, int(c)-127))
}

// e2m1Values are the E2M1 (FP4) magnitudes of codes 0..7; bit 3 is the sign.
var e2m1Values = [8]float32{0, 0.5, 1, 1.5, 2, 3, 4, 6}

// E2M1ToF32 decodes the low four bits of c.
func E2M1ToF32(c uint8) float32 {
	v := e2m1Values[c&7]
	if c&8 != 0 {
		return -v
	}
	return v
}

// mxScale chooses an MXFP8 block's shared exponent X (stored as X+127) as
// the OCP MX specification does: floor(log2(amax)) minus E4M3's largest
// exponent (8), so the block maximum scales into [256, 512) and rounds to at
// most E4M3's 448 (saturating). X is kept within [-127, 119]: 448·2^119 is
// still finite in float32, so no decoded element overflows. A zero block
// gets X = -127.
func mxScale(amax float32) uint8 {
	if amax == 0 {
		return 0
	}
	amax = min(amax, math.MaxFloat32)
	_, e := math.Frexp(float64(amax)) // amax = f·2^e, f in [0.5, 1)
	x := e - 1 - 8
	return uint8(max(-127, min(119, x)) + 127)
}

// nvfp4Scale chooses an NVFP4 block's E4M3 scale: amax/6 rounded up to the
// next E4M3 value, so the block maximum lands at or inside E2M1's ±6 and
// never clips, within E4M3's [2^-9, 448]. There is no per-tensor FP32
// global scale (the configurators declare none; configurators/layout/fp4.go)
// — equivalently the global scale is 1: block maxima up to 6·448 = 2688 are
// kept, larger ones saturate there, and blocks below 6·2^-6 ≈ 0.094 get a
// subnormal scale with a coarser step. A zero block gets scale 0.
func nvfp4Scale(amax float32) uint8 {
	if amax == 0 {
		return 0
	}
	want := float64(amax) / 6
	c := min(F32ToE4M3(float32(want)), 0x7e)
	// float32(want) may round either way: step to the smallest code whose
	// value·6 reaches amax (exact in float64).
	for c < 0x7e && float64(E4M3ToF32(c))*6 < float64(amax) {
		c++
	}
	for c > 1 && float64(E4M3ToF32(c-1))*6 >= float64(amax) {
		c--
	}
	return max(c, 1)
}

// e2m1Encode rounds v/s to E2M1, to nearest with ties to the even code,
// saturating at ±6. The comparisons are against the midpoints times s,
// exact in float64, so no division rounds a tie away.
func e2m1Encode(v, s float32) uint8 {
	var sign uint8
	if math.Signbit(float64(v)) {
		sign = 8
	}
	a := math.Abs(float64(v))
	sd := float64(s)
	// Midpoints between consecutive magnitudes; a tie goes to the even code
	// (codes 0, 2, 4, 6 have a zero mantissa bit).
	mids := [7]float64{0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5}
	c := uint8(0)
	for i, mp := range mids {
		t := mp * sd
		if a > t || (a == t && (i+1)&1 == 0) {
			c = uint8(i + 1)
		}
	}
	return sign | c
}
