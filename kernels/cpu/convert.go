package cpu

import (
	"encoding/binary"
	"fmt"
	"math"
	"unsafe"
)

// F16ToF32 converts an IEEE binary16 value exactly (subnormals, infinities and
// NaN payloads included).
func F16ToF32(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	exp := uint32(h>>10) & 0x1f
	mant := uint32(h & 0x3ff)
	switch {
	case exp == 0x1f:
		return math.Float32frombits(sign | 0x7f800000 | mant<<13)
	case exp != 0:
		return math.Float32frombits(sign | (exp+112)<<23 | mant<<13)
	case mant == 0:
		return math.Float32frombits(sign)
	}
	// Subnormal: normalise the mantissa.
	e := uint32(113)
	for mant&0x400 == 0 {
		mant <<= 1
		e--
	}
	return math.Float32frombits(sign | e<<23 | (mant&0x3ff)<<13)
}

// F32ToF16Bytes writes src as little-endian IEEE binary16 into dst
// (2·len(src) bytes), rounding as F32ToF16 does; F16C does the bulk where the
// CPU has it (loading quantized models expands billions of values).
func F32ToF16Bytes(dst []byte, src []float32) {
	_ = dst[:2*len(src)]
	for i := f32ToF16Vec(dst, src); i < len(src); i++ {
		h := F32ToF16(src[i])
		dst[2*i], dst[2*i+1] = byte(h), byte(h>>8)
	}
}

// F32ToF16 converts to IEEE binary16 with round-to-nearest-even; overflow gives
// infinity, NaN stays a (quiet) NaN with the top payload bits kept.
func F32ToF16(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int(b>>23) & 0xff
	mant := b & 0x7fffff
	if exp == 0xff {
		if mant != 0 {
			return sign | 0x7e00 | uint16(mant>>13)
		}
		return sign | 0x7c00
	}
	e := exp - 112
	if e >= 0x1f {
		return sign | 0x7c00
	}
	if e <= 0 {
		if e < -10 {
			return sign
		}
		m := mant | 0x800000
		shift := uint(14 - e)
		hm := m >> shift
		rem := m & (1<<shift - 1)
		half := uint32(1) << (shift - 1)
		if rem > half || (rem == half && hm&1 == 1) {
			hm++
		}
		return sign | uint16(hm)
	}
	out := uint32(e)<<10 | mant>>13
	rem := mant & 0x1fff
	if rem > 0x1000 || (rem == 0x1000 && out&1 == 1) {
		out++ // a carry into the exponent is the correct rounding, up to infinity
	}
	return sign | uint16(out)
}

// BF16ToF32 converts a bfloat16 value exactly.
func BF16ToF32(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

// F32ToBF16 converts to bfloat16 with round-to-nearest-even; NaN stays a quiet NaN.
func F32ToBF16(f float32) uint16 {
	b := math.Float32bits(f)
	if b&0x7fffffff > 0x7f800000 {
		return uint16(b>>16) | 0x40
	}
	b += 0x7fff + (b>>16)&1
	return uint16(b >> 16)
}

// Dequantize writes row `row` of w, converted to float32, into out[:w.Cols].
func Dequantize(out []float32, w Matrix, row int) {
	w.mustValid()
	if row < 0 || row >= w.Rows {
		panic(fmt.Sprintf("cpu: dequantize row %d of %d", row, w.Rows))
	}
	rb := w.rowBytes()
	dequantRow(out[:w.Cols], w.Type, w.Data[row*rb:(row+1)*rb])
}

// EmbeddingGather writes the dequantised rows ids[i] of table to
// out[i*Cols:(i+1)*Cols]. An id outside [0, Rows) panics.
func EmbeddingGather(out []float32, table Matrix, ids []int32) {
	table.mustValid()
	c := table.Cols
	if len(out) < len(ids)*c {
		panic(fmt.Sprintf("cpu: embedding gather: out has %d floats, need %d", len(out), len(ids)*c))
	}
	rb := table.rowBytes()
	for i, id := range ids {
		if id < 0 || int(id) >= table.Rows {
			panic(fmt.Sprintf("cpu: embedding gather: token id %d outside [0,%d)", id, table.Rows))
		}
		dequantRow(out[i*c:(i+1)*c], table.Type, table.Data[int(id)*rb:(int(id)+1)*rb])
	}
}

func dequantRow(out []float32, t DType, data []byte) {
	switch t {
	case F32:
		copy(out, bytesF32(data))
	case F16:
		for j := range out {
			out[j] = F16ToF32(binary.LittleEndian.Uint16(data[2*j:]))
		}
	case BF16:
		for j := range out {
			out[j] = BF16ToF32(binary.LittleEndian.Uint16(data[2*j:]))
		}
	default:
		dequantQuant(t, data, out)
	}
}

// bytesF32 reinterprets little-endian f32 weight bytes in place (the package
// supports little-endian hosts only, as GGUF files are little-endian).
func bytesF32(b []byte) []float32 {
	if len(b) < 4 {
		return nil
	}
	return unsafe.Slice((*float32)(unsafe.Pointer(&b[0])), len(b)/4)
}
