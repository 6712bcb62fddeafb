package cpu

import (
	"encoding/binary"
	"fmt"
	"math"
)

// Weight quantizers: GGML's reference rules (ggml-quants.c, the
// quantize_row_*_ref functions llama-quantize uses when it has no importance
// matrix), so generated models hold what llama.cpp would write for the same
// values. Arithmetic is float32 throughout, as in C; nearestInt rounds half
// to even like GGML's nearest_int.

// QuantizeBlocks encodes src (whole blocks) into dst in the quantized dtype
// t. len(dst) must be exactly the blocks' bytes.
func QuantizeBlocks(t DType, dst []byte, src []float32) error {
	if !t.Quantized() {
		return fmt.Errorf("cpu: quantize %s: not a block-quantized dtype: %w", t, ErrShape)
	}
	bs, ts := t.BlockSize(), t.BlockBytes()
	if len(src)%bs != 0 {
		return fmt.Errorf("cpu: quantize %s: %d values are not whole blocks of %d: %w", t, len(src), bs, ErrShape)
	}
	if want := len(src) / bs * ts; len(dst) != want {
		return fmt.Errorf("cpu: quantize %s: %d values need %d bytes, dst has %d: %w", t, len(src), want, len(dst), ErrShape)
	}
	for b := 0; b < len(src)/bs; b++ {
		x, blk := src[b*bs:(b+1)*bs], dst[b*ts:(b+1)*ts]
		clear(blk)
		switch t {
		case Q8_0:
			quantQ8_0(x, blk)
		case Q4_0, Q5_0:
			quantQ40Q50(t, x, blk)
		case Q4_1, Q5_1:
			quantQ41Q51(t, x, blk)
		case Q2_K:
			quantQ2K(x, blk)
		case Q3_K:
			quantQ3K(x, blk)
		case Q4_K, Q5_K:
			quantQ45K(t, x, blk)
		case Q6_K:
			quantQ6K(x, blk)
		case IQ4_NL:
			quantIQ4NL(x, blk)
		case IQ4_XS:
			quantIQ4XS(x, blk)
		case MXFP4:
			quantMXFP4(x, blk)
		}
	}
	return nil
}

// QuantizeQ8_0 quantises src into GGML Q8_0 blocks in dst, using GGML's
// reference rule: per 32 values d = max|x|/127 (stored as f16),
// q = round-half-away(x * (1/d)) computed in float32 with the unrounded d.
func QuantizeQ8_0(dst []byte, src []float32) error { return QuantizeBlocks(Q8_0, dst, src) }

func putHalf(b []byte, v float32) { binary.LittleEndian.PutUint16(b, F32ToF16(v)) }

func abs32(v float32) float32 { return math.Float32frombits(math.Float32bits(v) &^ (1 << 31)) }

// nearestInt is GGML's nearest_int: round half to even.
func nearestInt(v float32) int { return int(math.RoundToEven(float64(v))) }

func quantQ8_0(x []float32, blk []byte) {
	var amax float32
	for _, v := range x {
		amax = max(amax, abs32(v))
	}
	d := amax / 127
	var id float32
	if d != 0 {
		id = 1 / d
	}
	putHalf(blk, d)
	for j, v := range x {
		blk[2+j] = byte(int8(math.Round(float64(v * id)))) // roundf: half away from zero
	}
}

// quantQ40Q50: d = m/−8 (Q4_0) or m/−16 (Q5_0) for the value m of largest
// magnitude; q = min(top, trunc(x/d + offset + ½)).
func quantQ40Q50(t DType, x []float32, blk []byte) {
	var amax, m float32
	for _, v := range x {
		if a := abs32(v); amax < a {
			amax, m = a, v
		}
	}
	half, top := float32(8), 15
	if t == Q5_0 {
		half, top = 16, 31
	}
	d := m / -half
	var id float32
	if d != 0 {
		id = 1 / d
	}
	putHalf(blk, d)
	off := half + 0.5 // exact: C adds the constant 8.5f (16.5f) to x·id
	q := func(v float32) uint8 { return uint8(min(top, int(int8(v*id+off)))) }
	if t == Q4_0 {
		for j := range 16 {
			blk[2+j] = q(x[j]) | q(x[j+16])<<4
		}
		return
	}
	var qh uint32
	for j := range 16 {
		a, b := q(x[j]), q(x[j+16])
		blk[6+j] = a&0xf | b&0xf<<4
		qh |= uint32(a>>4&1)<<j | uint32(b>>4&1)<<(j+16)
	}
	binary.LittleEndian.PutUint32(blk[2:], qh)
}

// quantQ41Q51: d = (max − min)/(2^bits − 1), m = min; q = trunc((x−min)/d + ½)
// (capped at 15 for Q4_1).
func quantQ41Q51(t DType, x []float32, blk []byte) {
	lo, hi := float32(math.MaxFloat32), float32(-math.MaxFloat32)
	for _, v := range x {
		lo, hi = min(lo, v), max(hi, v)
	}
	levels := float32(15)
	if t == Q5_1 {
		levels = 31
	}
	d := (hi - lo) / levels
	var id float32
	if d != 0 {
		id = 1 / d
	}
	putHalf(blk, d)
	putHalf(blk[2:], lo)
	if t == Q4_1 {
		q := func(v float32) uint8 { return uint8(min(15, int(int8((v-lo)*id+0.5)))) }
		for j := range 16 {
			blk[4+j] = q(x[j]) | q(x[j+16])<<4
		}
		return
	}
	q := func(v float32) uint8 { return uint8((v-lo)*id + 0.5) }
	var qh uint32
	for j := range 16 {
		a, b := q(x[j]), q(x[j+16])
		blk[8+j] = a&0xf | b&0xf<<4
		qh |= uint32(a>>4&1)<<j | uint32(b>>4&1)<<(j+16)
	}
	binary.LittleEndian.PutUint32(blk[4:], qh)
}

// bestIndexIQ4NL is the code-book entry nearest to x (GGML's best_index_int8
// on the sorted table: ties go to the upper entry).
func bestIndexIQ4NL(x float32) int {
	x2 := x + x
	idx := 0
	for step := 8; step > 0; step >>= 1 {
		j := idx + step
		if x2 >= float32(int(kvaluesIQ4NL[j-1])+int(kvaluesIQ4NL[j])) {
			idx = j
		}
	}
	return idx
}
