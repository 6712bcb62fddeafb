package gguf

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/bits"
	"sort"
	"strconv"
)

const (
	// MaxArrayDepth bounds nesting of arrays in metadata values.
	MaxArrayDepth = 4
	// MaxDims is the most dims a tensor may have (GGML_MAX_DIMS).
	MaxDims = 4
	// DefaultAlignment is the data alignment when general.alignment is absent.
	DefaultAlignment = 32
	// AlignmentKey is the metadata key that overrides the alignment.
	AlignmentKey = "general.alignment"

	magic = "GGUF"
	// Fewest bytes one KV can occupy: key length, value type, 1-byte value.
	minKVBytes = 8 + 4 + 1
	// Fewest bytes one tensor info can occupy: name length, n_dims, type, offset.
	minTensorInfoBytes = 8 + 4 + 4 + 8
)

// field names a header field for errors. It is built only when an error is
// reported, so decoding large string arrays does not format a name per
// element.
type fieldName struct {
	base   string
	idx    int // array index, or -1
	suffix string
}

func fld(s string) fieldName { return fieldName{base: s, idx: -1} }

func (f fieldName) with(suffix string) fieldName { f.suffix = suffix; return f }

func (f fieldName) String() string {
	s := f.base
	if f.idx >= 0 {
		s = fmt.Sprintf("%s[%d]", s, f.idx)
	}
	return s + f.suffix
}

// decoder walks the header of an untrusted GGUF image. Every read checks
// the remaining length first.
type decoder struct {
	name string
	data []byte
	off  int
}

func (d *decoder) errAt(f fieldName, off int, format string, args ...any) error {
	return &FormatError{File: d.name, Field: f.String(), Offset: int64(off), Problem: fmt.Sprintf(format, args...)}
}

func (d *decoder) remaining() uint64 { return uint64(len(d.data) - d.off) }

// take returns the next n bytes or a truncation error naming field.
func (d *decoder) take(field fieldName, n uint64) ([]byte, error) {
	if n > d.remaining() {
		return nil, d.errAt(field, d.off, "truncated: need %d bytes, %d remain", n, d.remaining())
	}
	b := d.data[d.off : d.off+int(n)]
	d.off += int(n)
	return b, nil
}

func (d *decoder) u32(field fieldName) (uint32, error) {
	b, err := d.take(field, 4)
	if err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint32(b), nil
}

func (d *decoder) u64(field fieldName) (uint64, error) {
	b, err := d.take(field, 8)
	if err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint64(b), nil
}

func (d *decoder) str(field fieldName) (string, error) {
	at := d.off
	n, err := d.u64(field.with(" length"))
	if err != nil {
		return "", err
	}
	if n > d.remaining() {
		return "", d.errAt(field, at, "string length %d exceeds the %d bytes that remain", n, d.remaining())
	}
	b, _ := d.take(field, n)
	return string(b), nil
}

func (d *decoder) valueType(field fieldName) (ValueType, error) {
	at := d.off
	t, err := d.u32(field.with(" type"))
	if err != nil {
		return 0, err
	}
	if !ValueType(t).valid() {
		return 0, d.errAt(field, at, "unknown value type %d", t)
	}
	return ValueType(t), nil
}

// value decodes a value of type t; depth counts enclosing arrays.
func (d *decoder) value(field fieldName, t ValueType, depth int) (Value, error) {
	switch t {
	case TypeString:
		s, err := d.str(field)
		return Value{Type: TypeString, str: s}, err
	case TypeArray:
		return d.array(field, depth+1)
	}
	sz := t.fixedSize()
	b, err := d.take(field, uint64(sz))
	if err != nil {
		return Value{}, err
	}
	return Value{Type: t, num: readBits(b, sz)}, nil
}

func (d *decoder) array(field fieldName, depth int) (Value, error) {
	at := d.off
	if depth > MaxArrayDepth {
		return Value{}, d.errAt(field, at, "arrays nested deeper than %d", MaxArrayDepth)
	}
	elem, err := d.valueType(field.with(" element"))
	if err != nil {
		return Value{}, err
	}
	count, err := d.u64(field.with(" count"))
	if err != nil {
		return Value{}, err
	}
	// Reject before allocating: every element needs at least minEncoded bytes.
	if min := elem.minEncoded(); count > d.remaining()/min {
		return Value{}, d.errAt(field, at, "array of %d %s needs at least %d bytes each but only %d bytes remain", count, elem, min, d.remaining())
	}
	n := int(count)
	v := Value{Type: TypeArray, elem: elem, n: n}
	if n == 0 {
		return v, nil
	}
	switch elem {
	case TypeString:
		v.strs = make([]string, n)
		for i := range v.strs {
			if v.strs[i], err = d.str(fieldName{base: field.base, idx: i}); err != nil {
				return Value{}, err
			}
		}
	case TypeArray:
		v.vals = make([]Value, n)
		for i := range v.vals {
			if v.vals[i], err = d.array(fld(field.String()+fmt.Sprintf("[%d]", i)), depth+1); err != nil {
				return Value{}, err
			}
		}
	default:
		b, _ := d.take(field, count*uint64(elem.fixedSize()))
		v.raw = append([]byte(nil), b...)
	}
	return v, nil
}

// Parse parses a GGUF image. name is used in error messages and becomes
// File.Path. The returned File keeps data for Tensor; the caller must not
// modify it.
func Parse(name string, data []byte) (*File, error) {
	d := &decoder{name: name, data: data}
	f := &File{Path: name, data: data, Alignment: DefaultAlignment}

	m, err := d.take(fld("magic"), 4)
	if err != nil {
		return nil, err
	}
	if string(m) != magic {
		return nil, d.errAt(fld("magic"), 0, "got %q, want %q", m, magic)
	}
	if f.Version, err = d.u32(fld("version")); err != nil {
		return nil, err
	}
	switch v := f.Version; {
	case v == 2 || v == 3:
	case v == 1:
		return nil, d.errAt(fld("version"), 4, "version 1 (32-bit counts) is not supported; convert the file to version 3")
	case bits.ReverseBytes32(v) == 2 || bits.ReverseBytes32(v) == 3:
		return nil, d.errAt(fld("version"), 4, "big-endian GGUF (version %d byte-swapped) is not supported", bits.ReverseBytes32(v))
	default:
		return nil, d.errAt(fld("version"), 4, "unsupported version %d, want 2 or 3", v)
	}
	nTensors, err := d.u64(fld("tensor_count"))
	if err != nil {
		return nil, err
	}
	nKV, err := d.u64(fld("kv_count"))
	if err != nil {
		return nil, err
	}
	// Both counts are checked against the remaining bytes before any entry
	// is read, so absurd counts fail without allocating or looping.
	if nKV > d.remaining()/minKVBytes {
		return nil, d.errAt(fld("kv_count"), 16, "%d KVs need at least %d bytes each but only %d bytes remain", nKV, minKVBytes, d.remaining())
	}
	if nTensors > d.remaining()/minTensorInfoBytes {
		return nil, d.errAt(fld("tensor_count"), 8, "%d tensors need at least %d bytes each but only %d bytes remain", nTensors, minTensorInfoBytes, d.remaining())
	}
	if nKV*minKVBytes+nTensors*minTensorInfoBytes > d.remaining() {
		return nil, d.errAt(fld("kv_count"), 16, "%d KVs and %d tensors cannot fit in the %d bytes that remain", nKV, nTensors, d.remaining())
	}
	if err := f.parseKVs(d, int(nKV)); err != nil {
		return nil, err
	}
	if err := f.parseTensorInfos(d, int(nTensors)); err != nil {
		return nil, err
	}
	// Data section starts at the next aligned offset. With no tensors the
	// padding may be absent, so it is not required to lie inside the file;
	// each tensor's range is checked instead.
	f.DataOffset = int64(alignUp(uint64(d.off), f.Alignment))
	if err := f.checkTensorData(d); err != nil {
		return nil, err
	}
	return f, nil
}

func (f *File) parseKVs(d *decoder, n int) error {
	f.KVs = make([]KV, 0, n)
	f.kvIndex = make(map[string]int, n)
	for i := 0; i < n; i++ {
		at := d.off
		key, err := d.str(fld(fmt.Sprintf("kv[%d].key", i)))
		if err != nil {
			return err
		}
		if _, dup := f.kvIndex[key]; dup {
			return d.errAt(fld(key), at, "duplicate key")
		}
		t, err := d.valueType(fld(key))
		if err != nil {
			return err
		}
		vat := d.off
		v, err := d.value(fld(key), t, 0)
		if err != nil {
			return err
		}
		if key == AlignmentKey {
			a, ok := v.Uint()
			if !ok || v.Type != TypeUint32 {
				return d.errAt(fld(key), vat, "must be a UINT32, got %s", v.Type)
			}
			if a == 0 || a&(a-1) != 0 {
				return d.errAt(fld(key), vat, "alignment %d is not a power of two", a)
			}
			f.Alignment = a
		}
		f.kvIndex[key] = len(f.KVs)
		f.KVs = append(f.KVs, KV{Key: key, Value: v})
	}
	return nil
}

func (f *File) parseTensorInfos(d *decoder, n int) error {
	f.Tensors = make([]TensorInfo, 0, n)
	f.tensorIndex = make(map[string]int, n)
	for i := 0; i < n; i++ {
		at := d.off
		name, err := d.str(fld(fmt.Sprintf("tensor[%d].name", i)))
		if err != nil {
			return err
		}
		field := fmt.Sprintf("tensor[%d] %q", i, name)
		if _, dup := f.tensorIndex[name]; dup {
			return d.errAt(fld(field+" name"), at, "duplicate tensor name")
		}
		nat := d.off
		nDims, err := d.u32(fld(field + " n_dims"))
		if err != nil {
			return err
		}
		if nDims > MaxDims {
			return d.errAt(fld(field+" n_dims"), nat, "%d dims, at most %d allowed", nDims, MaxDims)
		}
		dims := make([]uint64, nDims)
		for j := range dims {
			if dims[j], err = d.u64(fld(fmt.Sprintf("%s dims[%d]", field, j))); err != nil {
				return err
			}
		}
		tat := d.off
		tt, err := d.u32(fld(field + " type"))
		if err != nil {
			return err
		}
		typ := TensorType(tt)
		if !typ.Known() {
			return d.errAt(fld(field+" type"), tat, "unknown GGML tensor type %d", tt)
		}
		if ne, ok := Elements(dims); !ok || ne > math.MaxInt64 {
			return d.errAt(fld(field+" dims"), nat, "element count of dims %v overflows int64", dims)
		}
		size, err := typ.Bytes(dims)
		if err != nil {
			return d.errAt(fld(field+" dims"), nat, "dims %v invalid for %s: %v", dims, typ, err)
		}
		oat := d.off
		off, err := d.u64(fld(field + " offset"))
		if err != nil {
			return err
		}
		f.tensorIndex[name] = len(f.Tensors)
		f.Tensors = append(f.Tensors, TensorInfo{Name: name, Dims: dims, Type: typ, Offset: off, Size: size, infoOffset: int64(oat)})
	}
	return nil
}

// checkTensorData checks alignment, bounds and overlap of every tensor.
func (f *File) checkTensorData(d *decoder) error {
	fileLen := uint64(len(f.data))
	for _, t := range f.Tensors {
		field := fieldName{base: "tensor " + strconv.Quote(t.Name), idx: -1, suffix: " offset"}
		at := int(t.infoOffset)
		if t.Offset%f.Alignment != 0 {
			return d.errAt(field, at, "offset %d is not a multiple of the alignment %d", t.Offset, f.Alignment)
		}
		start, c1 := bits.Add64(uint64(f.DataOffset), t.Offset, 0)
		end, c2 := bits.Add64(start, t.Size, 0)
		if c1 != 0 || c2 != 0 || end > fileLen {
			return d.errAt(field, at, "data [%d, +%d) at file offset %d runs past the end of the %d-byte file", t.Offset, t.Size, uint64(f.DataOffset)+t.Offset, fileLen)
		}
	}
	order := make([]int, len(f.Tensors))
	for i := range order {
		order[i] = i
	}
	sort.Slice(order, func(a, b int) bool { return f.Tensors[order[a]].Offset < f.Tensors[order[b]].Offset })
	var prev *TensorInfo
	for _, i := range order {
		t := &f.Tensors[i]
		if t.Size == 0 {
			continue
		}
		if prev != nil && t.Offset < prev.Offset+prev.Size {
			return d.errAt(fld(fmt.Sprintf("tensor %q offset", t.Name)), int(t.infoOffset),
				"data [%d, %d) overlaps tensor %q at [%d, %d)", t.Offset, t.Offset+t.Size, prev.Name, prev.Offset, prev.Offset+prev.Size)
		}
		prev = t
	}
	return nil
}

func alignUp(x, a uint64) uint64 {
	return (x + a - 1) &^ (a - 1)
}
