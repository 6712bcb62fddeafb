package gguf

import (
	"encoding/binary"
	"math"
)

// Value is one GGUF metadata value: a scalar, a string or an array. The zero
// Value is the UINT8 0. Values are immutable; accessors that return slices
// return fresh copies.
type Value struct {
	Type ValueType

	num  uint64    // scalars: the encoded bits, zero-extended (bool: 0 or 1)
	str  string    // TypeString
	elem ValueType // arrays: element type
	n    int       // arrays: element count
	raw  []byte    // arrays of fixed-size elements: the encoded elements; nil when empty
	strs []string  // arrays of strings; nil when empty
	vals []Value   // arrays of arrays; nil when empty
}

// KV is one metadata pair.
type KV struct {
	Key   string
	Value Value
}

// Uint returns an integer value of any integer type as uint64; it fails for
// negative values and non-integer types.
func (v Value) Uint() (uint64, bool) {
	if !v.Type.isInt() {
		return 0, false
	}
	if v.Type.isSigned() {
		i, _ := v.Int()
		if i < 0 {
			return 0, false
		}
		return uint64(i), true
	}
	return v.num, true
}

// Int returns an integer value of any integer type as int64; it fails for
// UINT64 values above math.MaxInt64 and non-integer types.
func (v Value) Int() (int64, bool) {
	switch v.Type {
	case TypeInt8:
		return int64(int8(v.num)), true
	case TypeInt16:
		return int64(int16(v.num)), true
	case TypeInt32:
		return int64(int32(v.num)), true
	case TypeInt64:
		return int64(v.num), true
	case TypeUint8, TypeUint16, TypeUint32:
		return int64(v.num), true
	case TypeUint64:
		if v.num > math.MaxInt64 {
			return 0, false
		}
		return int64(v.num), true
	}
	return 0, false
}

// Float returns a float or integer value as float64.
func (v Value) Float() (float64, bool) {
	switch v.Type {
	case TypeFloat32:
		return float64(math.Float32frombits(uint32(v.num))), true
	case TypeFloat64:
		return math.Float64frombits(v.num), true
	case TypeUint64:
		return float64(v.num), true
	}
	if i, ok := v.Int(); ok {
		return float64(i), true
	}
	return 0, false
}

// String returns a STRING value. (It is not a fmt.Stringer.)
func (v Value) String() (string, bool) {
	if v.Type != TypeString {
		return "", false
	}
	return v.str, true
}

// Bool returns a BOOL value; any non-zero byte is true.
func (v Value) Bool() (bool, bool) {
	if v.Type != TypeBool {
		return false, false
	}
	return v.num != 0, true
}

// Len is the element count of an array, 0 for other values.
func (v Value) Len() int {
	if v.Type != TypeArray {
		return 0
	}
	return v.n
}

// Elem is the element type of an array.
func (v Value) Elem() (ValueType, bool) {
	if v.Type != TypeArray {
		return 0, false
	}
	return v.elem, true
}

// Index returns element i of an array.
func (v Value) Index(i int) (Value, bool) {
	if v.Type != TypeArray || i < 0 || i >= v.n {
		return Value{}, false
	}
	switch v.elem {
	case TypeString:
		return Value{Type: TypeString, str: v.strs[i]}, true
	case TypeArray:
		return v.vals[i], true
	}
	sz := v.elem.fixedSize()
	return Value{Type: v.elem, num: readBits(v.raw[i*sz:], sz)}, true
}

// Strings returns an array of strings.
func (v Value) Strings() ([]string, bool) {
	if v.Type != TypeArray || v.elem != TypeString {
		return nil, false
	}
	return append([]string(nil), v.strs...), true
}

// Floats returns an array of FLOAT32.
func (v Value) Floats() ([]float32, bool) {
	if v.Type != TypeArray || v.elem != TypeFloat32 {
		return nil, false
	}
	out := make([]float32, v.n)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(v.raw[4*i:]))
	}
	return out, true
}

// Ints returns an array of any integer type as int64; it fails if an
// element does not fit.
func (v Value) Ints() ([]int64, bool) {
	if v.Type != TypeArray || !v.elem.isInt() {
		return nil, false
	}
	out := make([]int64, v.n)
	for i := range out {
		e, _ := v.Index(i)
		x, ok := e.Int()
		if !ok {
			return nil, false
		}
		out[i] = x
	}
	return out, true
}

func readBits(b []byte, size int) uint64 {
	switch size {
	case 1:
		return uint64(b[0])
	case 2:
		return uint64(binary.LittleEndian.Uint16(b))
	case 4:
		return uint64(binary.LittleEndian.Uint32(b))
	default:
		return binary.LittleEndian.Uint64(b)
	}
}

func putBits(b []byte, size int, x uint64) {
	switch size {
	case 1:
		b[0] = byte(x)
	case 2:
		binary.LittleEndian.PutUint16(b, uint16(x))
	case 4:
		binary.LittleEndian.PutUint32(b, uint32(x))
	default:
		binary.LittleEndian.PutUint64(b, x)
	}
}

// Constructors for writing.

func NewUint8(x uint8) Value     { return Value{Type: TypeUint8, num: uint64(x)} }
func NewInt8(x int8) Value       { return Value{Type: TypeInt8, num: uint64(uint8(x))} }
func NewUint16(x uint16) Value   { return Value{Type: TypeUint16, num: uint64(x)} }
func NewInt16(x int16) Value     { return Value{Type: TypeInt16, num: uint64(uint16(x))} }
func NewUint32(x uint32) Value   { return Value{Type: TypeUint32, num: uint64(x)} }
func NewInt32(x int32) Value     { return Value{Type: TypeInt32, num: uint64(uint32(x))} }
func NewUint64(x uint64) Value   { return Value{Type: TypeUint64, num: x} }
func NewInt64(x int64) Value     { return Value{Type: TypeInt64, num: uint64(x)} }
func NewFloat32(x float32) Value { return Value{Type: TypeFloat32, num: uint64(math.Float32bits(x))} }
func NewFloat64(x float64) Value { return Value{Type: TypeFloat64, num: math.Float64bits(x)} }
func NewString(s string) Value   { return Value{Type: TypeString, str: s} }

// NewBool makes a BOOL value.
func NewBool(b bool) Value {
	v := Value{Type: TypeBool}
	if b {
		v.num = 1
	}
	return v
}

// NewStringArray makes an array of strings.
func NewStringArray(s []string) Value {
	v := Value{Type: TypeArray, elem: TypeString, n: len(s)}
	if len(s) > 0 {
		v.strs = append([]string(nil), s...)
	}
	return v
}

// NewFloat32Array makes an array of FLOAT32.
func NewFloat32Array(xs []float32) Value {
	return newFixedArray(TypeFloat32, len(xs), func(i int) uint64 { return uint64(math.Float32bits(xs[i])) })
}

// NewInt32Array makes an array of INT32.
func NewInt32Array(xs []int32) Value {
	return newFixedArray(TypeInt32, len(xs), func(i int) uint64 { return uint64(uint32(xs[i])) })
}

// NewUint32Array makes an array of UINT32.
func NewUint32Array(xs []uint32) Value {
	return newFixedArray(TypeUint32, len(xs), func(i int) uint64 { return uint64(xs[i]) })
}

// NewInt64Array makes an array of INT64.
func NewInt64Array(xs []int64) Value {
	return newFixedArray(TypeInt64, len(xs), func(i int) uint64 { return uint64(xs[i]) })
}

// NewArray makes an array from scalar or array values that all have the
// same type; it returns false when they do not or when vals holds a string
// mixed with others. An empty vals makes an empty array of elem.
func NewArray(elem ValueType, vals []Value) (Value, bool) {
	if !elem.valid() {
		return Value{}, false
	}
	for _, x := range vals {
		if x.Type != elem {
			return Value{}, false
		}
	}
	switch elem {
	case TypeString:
		s := make([]string, len(vals))
		for i, x := range vals {
			s[i] = x.str
		}
		return NewStringArray(s), true
	case TypeArray:
		v := Value{Type: TypeArray, elem: TypeArray, n: len(vals)}
		if len(vals) > 0 {
			v.vals = append([]Value(nil), vals...)
		}
		return v, true
	}
	return newFixedArray(elem, len(vals), func(i int) uint64 { return vals[i].num }), true
}

func newFixedArray(elem ValueType, n int, at func(int) uint64) Value {
	v := Value{Type: TypeArray, elem: elem, n: n}
	if n == 0 {
		return v
	}
	sz := elem.fixedSize()
	v.raw = make([]byte, n*sz)
	for i := 0; i < n; i++ {
		putBits(v.raw[i*sz:], sz, at(i))
	}
	return v
}
