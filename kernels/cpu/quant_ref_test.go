package cpu

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
)

// refParts decodes value i of one block straight from the format's
// description, locating each field from the index alone (no shared loop
// structure with the package's decoders or dot kernels), in float64. The
// value is a − b: a is the scaled code, b the offset or minimum it is
// shifted by (0 for formats without one); the dot-product tolerances are
// derived from |a| + |b|.
func refParts(t DType, blk []byte, i int) (a, b float64) {
	h := func(off int) float64 { return refHalf(binary.LittleEndian.Uint16(blk[off:])) }
	nib := func(qs []byte, i int) int { // 32-blocks: value i<16 low nibble of byte i, else high of i-16
		if i < 16 {
			return int(qs[i] & 15)
		}
		return int(qs[i-16] >> 4)
	}
	bit := func(bits []byte, i int) int { return int(bits[i/8]>>(i%8)) & 1 }
	switch t {
	case Q8_0:
		return float64(int8(blk[2+i])) * h(0), 0
	case Q4_0:
		return float64(nib(blk[2:], i)) * h(0), 8 * h(0)
	case Q4_1:
		return float64(nib(blk[4:], i)) * h(0), -h(2)
	case Q5_0:
		return float64(nib(blk[6:], i)+16*bit(blk[2:6], i)) * h(0), 16 * h(0)
	case Q5_1:
		return float64(nib(blk[8:], i)+16*bit(blk[4:8], i)) * h(0), -h(2)
	case IQ4_NL:
		return h(0) * float64(kvaluesIQ4NL[nib(blk[2:], i)]), 0
	case Q2_K:
		// 16 scale bytes (one per 16 values), then 64 bytes holding four
		// 2-bit values each: value 128n + 32j + l sits in byte 32n + l at
		// bit 2j.
		n, j, l := i/128, i%128/32, i%32
		q := int(blk[16+32*n+l]>>(2*j)) & 3
		s := blk[i/16]
		return h(80) * float64(s&15) * float64(q), h(82) * float64(s>>4)
	case Q3_K:
		n, j, l := i/128, i%128/32, i%32
		q := int(blk[32+32*n+l]>>(2*j)) & 3
		hbit := int(blk[l]>>(4*n+j)) & 1
		g := i / 16 // 16 six-bit scales: low nibble in bytes 0–7, high pair in bytes 8–11
		lo := int(blk[96+g%8]>>(4*(g/8))) & 15
		hi := int(blk[104+g%4]>>(2*(g/4))) & 3
		sc := float64(lo|hi<<4) - 32
		return h(108) * sc * float64(q), h(108) * sc * float64(4*(1-hbit))
	case Q4_K, Q5_K:
		sub := i / 32 // eight sub-blocks of 32, each with a 6-bit scale and min
		sc6 := func(k int) int {
			if k < 4 {
				return int(blk[4+k] & 63)
			}
			return int(blk[4+k+4]&15) | int(blk[4+k-4]>>6)<<4
		}
		mn6 := func(k int) int {
			if k < 4 {
				return int(blk[4+k+4] & 63)
			}
			return int(blk[4+k+4]>>4) | int(blk[4+k]>>6)<<4
		}
		qs := blk[16:]
		if t == Q5_K {
			qs = blk[48:]
		}
		b := qs[32*(sub/2)+i%32]
		q := int(b & 15)
		if sub%2 == 1 {
			q = int(b >> 4)
		}
		if t == Q5_K {
			q += 16 * (int(blk[16+i%32]>>sub) & 1)
		}
		return h(0) * float64(sc6(sub)) * float64(q), h(2) * float64(mn6(sub))
	case Q6_K:
		half, r := i/128, i%128
		quarter, l := r/32, r%32
		lowByte := blk[64*half+l+32*(quarter%2)]
		low := int(lowByte>>(4*(quarter/2))) & 15
		high := int(blk[128+32*half+l]>>(2*quarter)) & 3
		scale := float64(int8(blk[192+8*half+l/16+2*quarter]))
		return h(208) * scale * float64(low|high<<4), h(208) * scale * 32
	case MXFP4:
		// E2M1 code: sign, two exponent bits, one mantissa bit (subnormal
		// at exponent 0); the E8M0 byte at 0 scales by 2^(e−127).
		c := nib(blk[1:], i)
		e, m := c>>1&3, float64(c&1)
		v := m / 2
		if e > 0 {
			v = (1 + m/2) * math.Ldexp(1, e-1)
		}
		if c&8 != 0 {
			v = -v
		}
		if blk[0] == 255 {
			return math.NaN(), 0
		}
		return v * math.Ldexp(1, int(blk[0])-127), 0
	case IQ4_XS:
		ib := i / 32
		lo := int(blk[4+ib/2]>>(4*(ib%2))) & 15
		hi := int(binary.LittleEndian.Uint16(blk[2:])>>(2*ib)) & 3
		return h(0) * float64(lo|hi<<4-32) * float64(kvaluesIQ4NL[nib(blk[8+16*ib:], i%32)]), 0
	}
	panic("no reference for " + t.String())
}

func refElem(t DType, blk []byte, i int) float64 {
	a, b := refParts(t, blk, i)
	return a - b
}

// quantTypes are the block-quantized dtypes.
var quantTypes = []DType{Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS, MXFP4}

// scaleFields is where each quantized format keeps its f16 scales.
var scaleFields = map[DType][]int{
	Q8_0: {0}, Q4_0: {0}, Q4_1: {0, 2}, Q5_0: {0}, Q5_1: {0, 2}, IQ4_NL: {0},
	Q2_K: {80, 82}, Q3_K: {108}, Q4_K: {0, 2}, Q5_K: {0, 2}, Q6_K: {208}, IQ4_XS: {0},
}

// randomBlocks fills n blocks of t with random bytes (every code, scale and
// bit pattern the format can hold), then gives every f16 scale field a
// modest random value so the decoded numbers are finite and varied.
func randomBlocks(r *rand.Rand, t DType, n int) []byte {
	ts := t.BlockBytes()
	raw := make([]byte, n*ts)
	for i := range raw {
		raw[i] = byte(r.Uint32())
	}
	for b := range n {
		for _, off := range scaleFields[t] {
			binary.LittleEndian.PutUint16(raw[b*ts+off:], F32ToF16(float32(r.NormFloat64()*0.01)))
		}
		if t == MXFP4 { // an E8M0 scale byte: 2^-10 .. 2^-4, values up to 0.375
			raw[b*ts] = byte(117 + r.IntN(7))
		}
	}
	return raw
}

// refQuantDot is the float64 dot product of weight row w (whole blocks of t)
// with the dequantized activation row x, and the magnitude Σ(|a|+|b|)·|x|
// the kernels' rounding is bounded by.
func refQuantDot(t DType, w []byte, x []float64) (dot, mag float64) {
	bs, bb := t.BlockSize(), t.BlockBytes()
	for i, xv := range x {
		a, b := refParts(t, w[i/bs*bb:], i%bs)
		dot += (a - b) * xv
		mag += (math.Abs(a) + math.Abs(b)) * math.Abs(xv)
	}
	return dot, mag
}

// dequantAct decodes a quantized activation row (qact.go) in float64.
func dequantAct(t DType, xq []byte, cols int) []float64 {
	out := make([]float64, cols)
	if actK(t) {
		for b, blk := range asQ8K(xq) {
			for j, q := range blk.q {
				out[QKK*b+j] = float64(blk.d) * float64(q)
			}
		}
		return out
	}
	for b, blk := range asQ8(xq) {
		for j, q := range blk.q {
			out[32*b+j] = float64(blk.d) * float64(q)
		}
	}
	return out
}

// quantTol is the bound on a quantized dot product's float32 rounding: the
// integer sums are exact, so only the per-block scale products (three
// roundings: d_w·d_x, the int32→float32 conversion, the product), the
// minimum/offset term and the accumulation over nb blocks across the SIMD
// lanes round, each by at most 2^-24 of the magnitude it touches:
// (nb + 8)·2^-24·Σ(|a|+|b|)·|x|, doubled for safety, plus 1e-30 for an
// exactly-zero row.
func quantTol(nb int, mag float64) float64 {
	return 2*float64(nb+8)*math.Ldexp(mag, -24) + 1e-30
}
