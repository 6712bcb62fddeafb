package gguf

import (
	"fmt"
	"math/bits"
)

// ValueType is the type tag of a GGUF metadata value.
type ValueType uint32

// GGUF metadata value types, as numbered in the GGUF specification.
const (
	TypeUint8   ValueType = 0
	TypeInt8    ValueType = 1
	TypeUint16  ValueType = 2
	TypeInt16   ValueType = 3
	TypeUint32  ValueType = 4
	TypeInt32   ValueType = 5
	TypeFloat32 ValueType = 6
	TypeBool    ValueType = 7
	TypeString  ValueType = 8
	TypeArray   ValueType = 9
	TypeUint64  ValueType = 10
	TypeInt64   ValueType = 11
	TypeFloat64 ValueType = 12
)

var valueTypeNames = [...]string{
	"UINT8", "INT8", "UINT16", "INT16", "UINT32", "INT32", "FLOAT32",
	"BOOL", "STRING", "ARRAY", "UINT64", "INT64", "FLOAT64",
}

func (t ValueType) String() string {
	if int(t) < len(valueTypeNames) {
		return valueTypeNames[t]
	}
	return fmt.Sprintf("ValueType(%d)", uint32(t))
}

// valid reports whether t is a known value type.
func (t ValueType) valid() bool { return t <= TypeFloat64 }

// fixedSize is the encoded size of a scalar of type t, or 0 for strings,
// arrays and unknown types.
func (t ValueType) fixedSize() int {
	switch t {
	case TypeUint8, TypeInt8, TypeBool:
		return 1
	case TypeUint16, TypeInt16:
		return 2
	case TypeUint32, TypeInt32, TypeFloat32:
		return 4
	case TypeUint64, TypeInt64, TypeFloat64:
		return 8
	}
	return 0
}

// minEncoded is the fewest bytes one value of type t can occupy; it bounds
// array counts before allocation.
func (t ValueType) minEncoded() uint64 {
	switch t {
	case TypeString:
		return 8 // uint64 length
	case TypeArray:
		return 12 // uint32 elem type + uint64 count
	}
	return uint64(t.fixedSize())
}

func (t ValueType) isInt() bool {
	switch t {
	case TypeUint8, TypeInt8, TypeUint16, TypeInt16, TypeUint32, TypeInt32, TypeUint64, TypeInt64:
		return true
	}
	return false
}

func (t ValueType) isSigned() bool {
	return t == TypeInt8 || t == TypeInt16 || t == TypeInt32 || t == TypeInt64
}

// TensorType is a GGML tensor element type.
type TensorType uint32

// GGML tensor types. Numbers 4, 5 and 31–33, 36–38 were removed from GGML
// and are rejected.
const (
	TypeF32     TensorType = 0
	TypeF16     TensorType = 1
	TypeQ4_0    TensorType = 2
	TypeQ4_1    TensorType = 3
	TypeQ5_0    TensorType = 6
	TypeQ5_1    TensorType = 7
	TypeQ8_0    TensorType = 8
	TypeQ8_1    TensorType = 9
	TypeQ2_K    TensorType = 10
	TypeQ3_K    TensorType = 11
	TypeQ4_K    TensorType = 12
	TypeQ5_K    TensorType = 13
	TypeQ6_K    TensorType = 14
	TypeQ8_K    TensorType = 15
	TypeIQ2_XXS TensorType = 16
	TypeIQ2_XS  TensorType = 17
	TypeIQ3_XXS TensorType = 18
	TypeIQ1_S   TensorType = 19
	TypeIQ4_NL  TensorType = 20
	TypeIQ3_S   TensorType = 21
	TypeIQ2_S   TensorType = 22
	TypeIQ4_XS  TensorType = 23
	TypeI8      TensorType = 24
	TypeI16     TensorType = 25
	TypeI32     TensorType = 26
	TypeI64     TensorType = 27
	TypeF64     TensorType = 28
	TypeIQ1_M   TensorType = 29
	TypeBF16    TensorType = 30
	TypeTQ1_0   TensorType = 34
	TypeTQ2_0   TensorType = 35
	TypeMXFP4   TensorType = 39
)

type typeTraits struct {
	name      string
	blockSize uint64 // elements per block
	typeSize  uint64 // bytes per block
}

// tensorTypes holds block layouts as defined by ggml-common.h.
var tensorTypes = map[TensorType]typeTraits{
	TypeF32:     {"F32", 1, 4},
	TypeF16:     {"F16", 1, 2},
	TypeQ4_0:    {"Q4_0", 32, 18},
	TypeQ4_1:    {"Q4_1", 32, 20},
	TypeQ5_0:    {"Q5_0", 32, 22},
	TypeQ5_1:    {"Q5_1", 32, 24},
	TypeQ8_0:    {"Q8_0", 32, 34},
	TypeQ8_1:    {"Q8_1", 32, 36},
	TypeQ2_K:    {"Q2_K", 256, 84},
	TypeQ3_K:    {"Q3_K", 256, 110},
	TypeQ4_K:    {"Q4_K", 256, 144},
	TypeQ5_K:    {"Q5_K", 256, 176},
	TypeQ6_K:    {"Q6_K", 256, 210},
	TypeQ8_K:    {"Q8_K", 256, 292},
	TypeIQ2_XXS: {"IQ2_XXS", 256, 66},
	TypeIQ2_XS:  {"IQ2_XS", 256, 74},
	TypeIQ3_XXS: {"IQ3_XXS", 256, 98},
	TypeIQ1_S:   {"IQ1_S", 256, 50},
	TypeIQ4_NL:  {"IQ4_NL", 32, 18},
	TypeIQ3_S:   {"IQ3_S", 256, 110},
	TypeIQ2_S:   {"IQ2_S", 256, 82},
	TypeIQ4_XS:  {"IQ4_XS", 256, 136},
	TypeI8:      {"I8", 1, 1},
	TypeI16:     {"I16", 1, 2},
	TypeI32:     {"I32", 1, 4},
	TypeI64:     {"I64", 1, 8},
	TypeF64:     {"F64", 1, 8},
	TypeIQ1_M:   {"IQ1_M", 256, 56},
	TypeBF16:    {"BF16", 1, 2},
	TypeTQ1_0:   {"TQ1_0", 256, 54},
	TypeTQ2_0:   {"TQ2_0", 256, 66},
	TypeMXFP4:   {"MXFP4", 32, 17},
}

func (t TensorType) String() string {
	if tr, ok := tensorTypes[t]; ok {
		return tr.name
	}
	return fmt.Sprintf("TensorType(%d)", uint32(t))
}

// Known reports whether t is a GGML type this package knows the layout of.
func (t TensorType) Known() bool {
	_, ok := tensorTypes[t]
	return ok
}

// BlockSize is the number of elements per quantization block (1 for plain
// types), or 0 for an unknown type.
func (t TensorType) BlockSize() uint64 { return tensorTypes[t].blockSize }

// TypeSize is the number of bytes per block, or 0 for an unknown type.
func (t TensorType) TypeSize() uint64 { return tensorTypes[t].typeSize }

// RowBytes is the byte size of a row of ne0 elements. It fails for unknown
// types and for ne0 that is not a multiple of the block size.
func (t TensorType) RowBytes(ne0 uint64) (uint64, error) {
	tr, ok := tensorTypes[t]
	if !ok {
		return 0, fmt.Errorf("gguf: unknown tensor type %d", uint32(t))
	}
	if ne0%tr.blockSize != 0 {
		return 0, fmt.Errorf("gguf: row of %d elements is not a multiple of the %s block size %d", ne0, tr.name, tr.blockSize)
	}
	hi, lo := bits.Mul64(ne0/tr.blockSize, tr.typeSize)
	if hi != 0 {
		return 0, fmt.Errorf("gguf: row of %d %s elements overflows uint64 bytes", ne0, tr.name)
	}
	return lo, nil
}

// Bytes is the byte size of a tensor of type t with the given dims (ne0
// first). It fails on unknown types, a partial block in ne0 and overflow.
// A tensor with no dims is a scalar.
func (t TensorType) Bytes(dims []uint64) (uint64, error) {
	if len(dims) == 0 {
		return t.RowBytes(1)
	}
	row, err := t.RowBytes(dims[0])
	if err != nil {
		return 0, err
	}
	total := row
	for _, d := range dims[1:] {
		hi, lo := bits.Mul64(total, d)
		if hi != 0 {
			return 0, fmt.Errorf("gguf: %s tensor with dims %v overflows uint64 bytes", t, dims)
		}
		total = lo
	}
	return total, nil
}

// Elements is the product of dims, or false on overflow.
func Elements(dims []uint64) (uint64, bool) {
	n := uint64(1)
	for _, d := range dims {
		hi, lo := bits.Mul64(n, d)
		if hi != 0 {
			return 0, false
		}
		n = lo
	}
	return n, true
}
