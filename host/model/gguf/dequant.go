package gguf

import (
	"encoding/binary"
	"fmt"
	"math"

	kcpu "github.com/kvhost/kvhost/kernels/cpu"
)

// Block-quantized GGML formats that can be decoded to float32: the legacy
// 32-element ones (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0) and the 256-element
// "K-quants" that most published GGUF files use (Q4_K_M and Q5_K_M files mix
// Q4_K/Q5_K with Q6_K). Layouts follow ggml-common.h; every field is read
// little-endian, scales are IEEE binary16.

// Dequantizable reports whether Dequantize decodes t.
func (t TensorType) Dequantizable() bool {
	switch t {
	case TypeQ4_0, TypeQ4_1, TypeQ5_0, TypeQ5_1, TypeQ8_0, TypeQ4_K, TypeQ5_K, TypeQ6_K:
		return true
	}
	return false
}

// Dequantize decodes len(out) elements of type t from raw, which must hold
// exactly the blocks they occupy.
func Dequantize(t TensorType, raw []byte, out []float32) error {
	if !t.Dequantizable() {
		return fmt.Errorf("gguf: cannot dequantize %s", t)
	}
	bs, ts := int(t.BlockSize()), int(t.TypeSize())
	if len(out)%bs != 0 {
		return fmt.Errorf("gguf: %d %s elements are not whole blocks of %d", len(out), t, bs)
	}
	if nb := len(out) / bs; len(raw) != nb*ts {
		return fmt.Errorf("gguf: %d %s elements need %d bytes, have %d", len(out), t, nb*ts, len(raw))
	}
	for b := 0; b < len(out)/bs; b++ {
		blk, y := raw[b*ts:(b+1)*ts], out[b*bs:(b+1)*bs]
		switch t {
		case TypeQ4_0:
			d := half(blk)
			for j, q := range blk[2:18] {
				y[j] = float32(int(q&0xf)-8) * d
				y[j+16] = float32(int(q>>4)-8) * d
			}
		case TypeQ4_1:
			d, m := half(blk), half(blk[2:])
			for j, q := range blk[4:20] {
				y[j] = float32(q&0xf)*d + m
				y[j+16] = float32(q>>4)*d + m
			}
		case TypeQ5_0:
			d, qh := half(blk), binary.LittleEndian.Uint32(blk[2:])
			for j, q := range blk[6:22] {
				y[j] = float32(int(q&0xf|fifth(qh, j))-16) * d
				y[j+16] = float32(int(q>>4|fifth(qh, j+16))-16) * d
			}
		case TypeQ5_1:
			d, m, qh := half(blk), half(blk[2:]), binary.LittleEndian.Uint32(blk[4:])
			for j, q := range blk[8:24] {
				y[j] = float32(q&0xf|fifth(qh, j))*d + m
				y[j+16] = float32(q>>4|fifth(qh, j+16))*d + m
			}
		case TypeQ8_0:
			d := half(blk)
			for j, q := range blk[2:34] {
				y[j] = float32(int8(q)) * d
			}
		case TypeQ4_K, TypeQ5_K:
			dequantQ45K(t, blk, y)
		case TypeQ6_K:
			dequantQ6K(blk, y)
		}
	}
	return nil
}

// fifth is bit i of qh moved to bit 4: the fifth bit of Q5 element i.
func fifth(qh uint32, i int) uint8 { return uint8(qh>>i&1) << 4 }

// dequantQ45K decodes one 256-element Q4_K or Q5_K block: d, dmin, twelve
// bytes packing eight 6-bit (scale, min) pairs, then (Q5_K) 32 bytes of fifth
// bits and 128 bytes of nibbles. Each 64 elements read 32 nibble bytes: low
// nibbles first (sub-block 2j), then high nibbles (sub-block 2j+1).
func dequantQ45K(t TensorType, blk []byte, y []float32) {
	d, dmin := half(blk), half(blk[2:])
	scales := blk[4:16]
	qs, qh := blk[16:144], []byte(nil)
	if t == TypeQ5_K {
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

// scaleMinK4 unpacks the j-th (scale, min) pair of a K-quant block: pairs 0–3
// are the low six bits of bytes j and j+4; pairs 4–7 take their low four
// bits from byte j+4 and their top two from the spare bits of bytes j-4 and j.
func scaleMinK4(j int, q []byte) (sc, m uint8) {
	if j < 4 {
		return q[j] & 63, q[j+4] & 63
	}
	return q[j+4]&0xf | q[j-4]>>6<<4, q[j+4]>>4 | q[j]>>6<<4
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

// half reads an IEEE binary16 value (exactly).
func half(b []byte) float32 { return kcpu.F16ToF32(binary.LittleEndian.Uint16(b)) }

// QuantizeQ4_0 encodes src (whole 32-element blocks) as Q4_0 into dst, the
// way ggml's reference quantizer does: per block, d = m/-8 for the value m of
// largest magnitude, q = clamp(round(x/d + 8), 0, 15). kvhost uses it to write
// test and demo files in a format it then expands on load.
func QuantizeQ4_0(dst []byte, src []float32) error {
	if len(src)%32 != 0 || len(dst) != len(src)/32*18 {
		return fmt.Errorf("gguf: Q4_0 needs whole blocks: %d values into %d bytes", len(src), len(dst))
	}
	for b := 0; b < len(src)/32; b++ {
		x, blk := src[32*b:32*b+32], dst[18*b:18*b+18]
		var amax, m float32
		for _, v := range x {
			if a := float32(math.Abs(float64(v))); a > amax {
				amax, m = a, v
			}
		}
		d := m / -8
		id := float32(0)
		if d != 0 {
			id = 1 / d
		}
		h := kcpu.F32ToF16(d)
		blk[0], blk[1] = byte(h), byte(h>>8)
		q := func(v float32) uint8 { return uint8(min(15, int8(v*id+8.5))) }
		for j := range 16 {
			blk[2+j] = q(x[j]) | q(x[j+16])<<4
		}
	}
	return nil
}
