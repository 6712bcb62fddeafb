package gguf

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
)

// TensorSpec is one tensor to write. Dims are ne0 first; Data must hold
// exactly Type.Bytes(Dims) bytes.
type TensorSpec struct {
	Name string
	Dims []uint64
	Type TensorType
	Data []byte
}

// Write writes a GGUF version 3 file: header, kvs, tensor infos, zero
// padding to the alignment, then each tensor's data at an aligned offset
// (padded after each tensor, as llama.cpp and the Python gguf writer do).
//
// alignment 0 means DefaultAlignment. When the alignment is not the default
// and kvs lack general.alignment, the key is appended as a UINT32; when kvs
// hold it, it must be a UINT32 equal to alignment.
func Write(w io.Writer, kvs []KV, tensors []TensorSpec, alignment uint64) error {
	if alignment == 0 {
		alignment = DefaultAlignment
	}
	if alignment&(alignment-1) != 0 || alignment > 1<<31 {
		return fmt.Errorf("gguf: write: alignment %d is not a power of two up to 2^31", alignment)
	}
	seen := make(map[string]bool, len(kvs))
	hasAlign := false
	for _, kv := range kvs {
		if seen[kv.Key] {
			return fmt.Errorf("gguf: write: duplicate key %q", kv.Key)
		}
		seen[kv.Key] = true
		if kv.Key == AlignmentKey {
			if a, ok := kv.Value.Uint(); !ok || kv.Value.Type != TypeUint32 || a != alignment {
				return fmt.Errorf("gguf: write: %s must be the UINT32 %d", AlignmentKey, alignment)
			}
			hasAlign = true
		}
		if err := checkValue(kv.Value, 0); err != nil {
			return fmt.Errorf("gguf: write: key %q: %w", kv.Key, err)
		}
	}
	if alignment != DefaultAlignment && !hasAlign {
		kvs = append(kvs[:len(kvs):len(kvs)], KV{Key: AlignmentKey, Value: NewUint32(uint32(alignment))})
	}

	offsets := make([]uint64, len(tensors))
	names := make(map[string]bool, len(tensors))
	var next uint64
	for i, t := range tensors {
		if names[t.Name] {
			return fmt.Errorf("gguf: write: duplicate tensor name %q", t.Name)
		}
		names[t.Name] = true
		if len(t.Dims) > MaxDims {
			return fmt.Errorf("gguf: write: tensor %q has %d dims, at most %d allowed", t.Name, len(t.Dims), MaxDims)
		}
		size, err := t.Type.Bytes(t.Dims)
		if err != nil {
			return fmt.Errorf("gguf: write: tensor %q: %w", t.Name, err)
		}
		if uint64(len(t.Data)) != size {
			return fmt.Errorf("gguf: write: tensor %q: %d data bytes, %s dims %v need %d", t.Name, len(t.Data), t.Type, t.Dims, size)
		}
		offsets[i] = next
		next = alignUp(next+size, alignment)
	}

	bw := bufio.NewWriterSize(w, 1<<16)
	e := &encoder{w: bw}
	e.raw([]byte(magic))
	e.u32(3)
	e.u64(uint64(len(tensors)))
	e.u64(uint64(len(kvs)))
	for _, kv := range kvs {
		e.str(kv.Key)
		e.u32(uint32(kv.Value.Type))
		e.value(kv.Value)
	}
	for i, t := range tensors {
		e.str(t.Name)
		e.u32(uint32(len(t.Dims)))
		for _, d := range t.Dims {
			e.u64(d)
		}
		e.u32(uint32(t.Type))
		e.u64(offsets[i])
	}
	e.pad(alignment)
	start := e.n
	for i, t := range tensors {
		e.pad(alignment) // no-op except after a tensor whose size is not aligned
		if e.err == nil && e.n-start != offsets[i] {
			return fmt.Errorf("gguf: write: internal error: tensor %q at %d, want %d", t.Name, e.n-start, offsets[i])
		}
		e.raw(t.Data)
	}
	e.pad(alignment)
	if e.err != nil {
		return fmt.Errorf("gguf: write: %w", e.err)
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("gguf: write: %w", err)
	}
	return nil
}

// checkValue rejects values that Parse would reject or that were not built
// by this package's constructors.
func checkValue(v Value, depth int) error {
	if !v.Type.valid() {
		return fmt.Errorf("unknown value type %d", uint32(v.Type))
	}
	if v.Type != TypeArray {
		return nil
	}
	if depth >= MaxArrayDepth {
		return fmt.Errorf("arrays nested deeper than %d", MaxArrayDepth)
	}
	if !v.elem.valid() {
		return fmt.Errorf("unknown array element type %d", uint32(v.elem))
	}
	switch v.elem {
	case TypeString:
		if len(v.strs) != v.n {
			return fmt.Errorf("malformed string array")
		}
	case TypeArray:
		if len(v.vals) != v.n {
			return fmt.Errorf("malformed nested array")
		}
		for i, x := range v.vals {
			if x.Type != TypeArray {
				return fmt.Errorf("element %d of an array of arrays is a %s", i, x.Type)
			}
			if err := checkValue(x, depth+1); err != nil {
				return err
			}
		}
	default:
		if len(v.raw) != v.n*v.elem.fixedSize() {
			return fmt.Errorf("malformed %s array", v.elem)
		}
	}
	return nil
}

// encoder writes little-endian fields, remembering the first error and the
// byte count.
type encoder struct {
	w   io.Writer
	n   uint64
	err error
	buf [8]byte
}

func (e *encoder) raw(b []byte) {
	if e.err != nil {
		return
	}
	var n int
	n, e.err = e.w.Write(b)
	e.n += uint64(n)
}

func (e *encoder) u32(x uint32) {
	binary.LittleEndian.PutUint32(e.buf[:4], x)
	e.raw(e.buf[:4])
}

func (e *encoder) u64(x uint64) {
	binary.LittleEndian.PutUint64(e.buf[:8], x)
	e.raw(e.buf[:8])
}

func (e *encoder) str(s string) {
	e.u64(uint64(len(s)))
	e.raw([]byte(s))
}

var zeros [256]byte

func (e *encoder) pad(alignment uint64) {
	for k := alignUp(e.n, alignment) - e.n; k > 0; {
		c := min(k, uint64(len(zeros)))
		e.raw(zeros[:c])
		k -= c
		if e.err != nil {
			return
		}
	}
}

func (e *encoder) value(v Value) {
	switch v.Type {
	case TypeString:
		e.str(v.str)
	case TypeArray:
		e.u32(uint32(v.elem))
		e.u64(uint64(v.n))
		switch v.elem {
		case TypeString:
			for _, s := range v.strs {
				e.str(s)
			}
		case TypeArray:
			for _, x := range v.vals {
				e.value(x)
			}
		default:
			e.raw(v.raw)
		}
	default:
		sz := v.Type.fixedSize()
		putBits(e.buf[:sz], sz, v.num)
		e.raw(e.buf[:sz])
	}
}
