package cpu

import (
	"encoding/binary"
	"fmt"
)

// Decoders of the block-quantized GGML formats, one place for every layout
// (ggml-common.h): the kernels' tests, the GEMM's panel packing, the
// embedding gather and the GGUF package all decode through here. Every field
// is little-endian; scales are IEEE binary16.

// kvaluesIQ4NL is IQ4_NL's (and IQ4_XS's) non-linear 4-bit code book.
var kvaluesIQ4NL = [16]int8{-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113}

// DequantizeBlocks decodes len(out) values of the quantized dtype t from
// raw, which must hold exactly the blocks they occupy.
func DequantizeBlocks(t DType, raw []byte, out []float32) error {
	if !t.Quantized() {
		return fmt.Errorf("cpu: dequantize %s: not a block-quantized dtype: %w", t, ErrShape)
	}
	bs, ts := t.BlockSize(), t.BlockBytes()
	if len(out)%bs != 0 {
		return fmt.Errorf("cpu: dequantize %s: %d values are not whole blocks of %d: %w", t, len(out), bs, ErrShape)
	}
	if nb := len(out) / bs; len(raw) != nb*ts {
		return fmt.Errorf("cpu: dequantize %s: %d values need %d bytes, have %d: %w", t, len(out), nb*ts, len(raw), ErrShape)
	}
	dequantQuant(t, raw, out)
	return nil
}

// dequantQuant decodes whole blocks of a quantized t; lengths are trusted.
func dequantQuant(t DType, raw []byte, out []float32) {
	bs, ts := t.BlockSize(), t.BlockBytes()
	for b := 0; b < len(out)/bs; b++ {
		dequantBlock(t, raw[b*ts:(b+1)*ts], out[b*bs:(b+1)*bs])
	}
}

// dequantBlock decodes one block of t into y (BlockSize values).
func dequantBlock(t DType, blk []byte, y []float32) {
	switch t {
	case Q8_0:
		d := half(blk)
		for j, q := range blk[2:34] {
			y[j] = float32(int8(q)) * d
		}
	case Q4_0:
		d := half(blk)
		for j, q := range blk[2:18] {
			y[j] = float32(int(q&0xf)-8) * d
			y[j+16] = float32(int(q>>4)-8) * d
		}
	case Q4_1:
		d, m := half(blk), half(blk[2:])
		for j, q := range blk[4:20] {
			y[j] = float32(q&0xf)*d + m
			y[j+16] = float32(q>>4)*d + m
		}
	case Q5_0:
		d, qh := half(blk), binary.LittleEndian.Uint32(blk[2:])
		for j, q := range blk[6:22] {
			y[j] = float32(int(q&0xf|fifth(qh, j))-16) * d
			y[j+16] = float32(int(q>>4|fifth(qh, j+16))-16) * d
		}
	case Q5_1:
		d, m, qh := half(blk), half(blk[2:]), binary.LittleEndian.Uint32(blk[4:])
		for j, q := range blk[8:24] {
			y[j] = float32(q&0xf|fifth(qh, j))*d + m
			y[j+16] = float32(q>>4|fifth(qh, j+16))*d + m
		}
	case IQ4_NL:
		d := half(blk)
		for j, q := range blk[2:18] {
			y[j] = d * float32(kvaluesIQ4NL[q&0xf])
			y[j+16] = d * float32(kvaluesIQ4NL[q>>4])
		}
	case Q2_K:
		dequantQ2K(blk, y)
	case Q3_K:
		dequantQ3K(blk, y)
	case Q4_K, Q5_K:
		dequantQ45K(t, blk, y)
	case Q6_K:
		dequantQ6K(blk, y)
	case IQ4_XS:
		dequantIQ4XS(blk, y)
	case MXFP4:
		dequantMXFP4(blk, y)
	default:
		panic(fmt.Sprintf("cpu: dequantize %s: not a block-quantized dtype", t))
	}
}

// half reads an IEEE binary16 value (exactly).
func half(b []byte) float32 { return F16ToF32(binary.LittleEndian.Uint16(b)) }

// fifth is bit i of qh moved to bit 4: the fifth bit of Q5 element i.
func fifth(qh uint32, i int) uint8 { return uint8(qh>>i&1) << 4 }

// dequantQ2K decodes one Q2_K block: scales[16] (low nibble a scale, high
// nibble a min, per 16 values), qs[64] (four 2-bit values per byte), d,
// dmin. Each 128 values read 32 bytes of qs, shifted by 0, 2, 4, 6 for
// values 0–31, 32–63, 64–95, 96–127.
func dequantQ2K(blk []byte, y []float32) {
	sc, qs := blk[0:16], blk[16:80]
	d, dmin := half(blk[80:]), half(blk[82:])
	for n := range 2 {
		q := qs[32*n:]
		for j := range 4 {
			for h := range 2 { // two sub-blocks of 16 per shift
				s := sc[8*n+2*j+h]
				dl, ml := d*float32(s&0xf), dmin*float32(s>>4)
				for l := range 16 {
					y[128*n+32*j+16*h+l] = dl*float32(q[16*h+l]>>(2*j)&3) - ml
				}
			}
		}
	}
}

// q3kScales unpacks Q3_K's sixteen 6-bit scales (stored +32): the low four
// bits of scale j are nibble j%8 of bytes 0–7 (low nibbles for j < 8), the
// top two bits are bits 2(j/4)..2(j/4)+1 of byte 8 + j%4.
func q3kScales(sc []byte, out *[16]int8) {
	for j := range 16 {
		lo := sc[j%8] >> (4 * (j / 8)) & 0xf
		hi := sc[8+j%4] >> (2 * (j / 4)) & 3
		out[j] = int8(lo|hi<<4) - 32
	}
}

// dequantQ3K decodes one Q3_K block: hmask[32], qs[64], scales[12], d. A
// value is d·scale·(q2 − 4) where q2 is its two low bits (laid out as in
// Q2_K) and the 4 is cancelled when its hmask bit (bit 4n+j of byte l for
// value 128n+32j+l) is set.
func dequantQ3K(blk []byte, y []float32) {
	hm, qs := blk[0:32], blk[32:96]
	var sc [16]int8
	q3kScales(blk[96:108], &sc)
	d := half(blk[108:])
	for n := range 2 {
		q := qs[32*n:]
		for j := range 4 {
			m := byte(1) << (4*n + j)
			for h := range 2 {
				dl := d * float32(sc[8*n+2*j+h])
				for l := range 16 {
					v := int(q[16*h+l] >> (2 * j) & 3)
					if hm[16*h+l]&m == 0 {
						v -= 4
					}
					y[128*n+32*j+16*h+l] = dl * float32(v)
				}
			}
		}
	}
}

// scaleMinK4 unpacks the j-th (scale, min) pair of a Q4_K/Q5_K block: pairs
// 0–3 are the low six bits of bytes j and j+4; pairs 4–7 take their low four
// bits from byte j+4 and their top two from the spare bits of bytes j-4 and j.
func scaleMinK4(j int, q []byte) (sc, m uint8) {
	if j < 4 {
		return q[j] & 63, q[j+4] & 63
	}
	return q[j+4]&0xf | q[j-4]>>6<<4, q[j+4]>>4 | q[j]>>6<<4
}

// dequantQ45K decodes one 256-element Q4_K or Q5_K block: d, dmin, twelve
// bytes packing eight 6-bit (scale, min) pairs, then (Q5_K) 32 bytes of fifth
// bits and 128 bytes of nibbles. Each 64 elements read 32 nibble bytes: low
// nibbles first (sub-block 2j), then high nibbles (sub-block 2j+1).
func dequantQ45K(t DType, blk []byte, y []float32) {
	d, dmin := half(blk), half(blk[2:])
	scales := blk[4:16]
	qs, qh := blk[16:144], []byte(nil)
	if t == Q5_K {
		qh, qs = blk[16:48], blk[48:176]
	}
	for j := range 4 {
		sc1, m1 := scaleMinK4(2*j, scales)
		sc2, m2 := scaleMinK4(2*j+1, scales)
		d1, n1 := d*float32(sc1), dmin*float32(m1)
		d2, n2 := d*float32(sc2), dmin*float32(m2)
		q := qs[32*j : 32*j+32]
		for l, b := range q {
			lo, hi := b&0xf, b>>4
			if qh != nil {
				lo |= (qh[l] >> (2 * j) & 1) << 4
				hi |= (qh[l] >> (2*j + 1) & 1) << 4
			}
			y[64*j+l] = d1*float32(lo) - n1
			y[64*j+32+l] = d2*float32(hi) - n2
		}
	}
}

// dequantQ6K decodes one 256-element Q6_K block: 128 bytes of low nibbles,
// 64 bytes of high bit pairs, sixteen int8 scales (one per 16 elements), d.
func dequantQ6K(blk []byte, y []float32) {
	ql, qh, sc := blk[0:128], blk[128:192], blk[192:208]
	d := half(blk[208:])
	for n := range 2 { // two halves of 128 elements
		l4, h4, s8, y4 := ql[64*n:], qh[32*n:], sc[8*n:], y[128*n:]
		for l := range 32 {
			is := l / 16
			q1 := int(l4[l]&0xf|(h4[l]>>0&3)<<4) - 32
			q2 := int(l4[l+32]&0xf|(h4[l]>>2&3)<<4) - 32
			q3 := int(l4[l]>>4|(h4[l]>>4&3)<<4) - 32
			q4 := int(l4[l+32]>>4|(h4[l]>>6&3)<<4) - 32
			y4[l] = d * float32(int8(s8[is])) * float32(q1)
			y4[l+32] = d * float32(int8(s8[is+2])) * float32(q2)
			y4[l+64] = d * float32(int8(s8[is+4])) * float32(q3)
			y4[l+96] = d * float32(int8(s8[is+6])) * float32(q4)
		}
	}
}

// iq4xsScale is IQ4_XS sub-block ib's 6-bit scale (stored +32): four low bits
// from nibble ib%2 of scales_l[ib/2], two high bits from scales_h.
func iq4xsScale(blk []byte, ib int) int {
	sh := binary.LittleEndian.Uint16(blk[2:])
	lo := int(blk[4+ib/2]>>(4*(ib%2))) & 0xf
	return lo | int(sh>>(2*ib)&3)<<4 - 32
}

// dequantIQ4XS decodes one IQ4_XS block: d, scales_h (u16), scales_l[4],
// qs[128]; sub-block ib of 32 values reads 16 bytes of qs, low nibbles for
// its first 16 values and high nibbles for the next 16.
func dequantIQ4XS(blk []byte, y []float32) {
	d := half(blk)
	qs := blk[8:136]
	for ib := range 8 {
		dl := d * float32(iq4xsScale(blk, ib))
		q := qs[16*ib:]
		for j := range 16 {
			y[32*ib+j] = dl * float32(kvaluesIQ4NL[q[j]&0xf])
			y[32*ib+j+16] = dl * float32(kvaluesIQ4NL[q[j]>>4])
		}
	}
}
