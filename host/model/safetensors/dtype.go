package safetensors

import "math/bits"

// DType is a safetensors element type name as it appears in the header.
type DType string

// Element types of the safetensors format.
const (
	BOOL    DType = "BOOL"
	U8      DType = "U8"
	I8      DType = "I8"
	F8_E5M2 DType = "F8_E5M2"
	F8_E4M3 DType = "F8_E4M3"
	I16     DType = "I16"
	U16     DType = "U16"
	F16     DType = "F16"
	BF16    DType = "BF16"
	I32     DType = "I32"
	U32     DType = "U32"
	F32     DType = "F32"
	F64     DType = "F64"
	I64     DType = "I64"
	U64     DType = "U64"
)

var dtypeSizes = map[DType]uint64{
	BOOL: 1, U8: 1, I8: 1, F8_E5M2: 1, F8_E4M3: 1,
	I16: 2, U16: 2, F16: 2, BF16: 2,
	I32: 4, U32: 4, F32: 4,
	F64: 8, I64: 8, U64: 8,
}

// Size is the byte size of one element, or 0 for an unknown dtype.
func (d DType) Size() uint64 { return dtypeSizes[d] }

// Known reports whether d is a dtype this package understands.
func (d DType) Known() bool { return dtypeSizes[d] != 0 }

// Elements is the product of shape (1 for a scalar), or false on overflow.
func Elements(shape []uint64) (uint64, bool) {
	n := uint64(1)
	for _, d := range shape {
		hi, lo := bits.Mul64(n, d)
		if hi != 0 {
			return 0, false
		}
		n = lo
	}
	return n, true
}

// byteSize is the byte size of a tensor, or false on overflow or unknown dtype.
func byteSize(d DType, shape []uint64) (uint64, bool) {
	n, ok := Elements(shape)
	if !ok || !d.Known() {
		return 0, false
	}
	hi, lo := bits.Mul64(n, d.Size())
	return lo, hi == 0
}
