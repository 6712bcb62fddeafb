package gguf

import (
	"errors"
	"fmt"
	"math"
	"os"

	"github.com/edsrzf/mmap-go"
)

// TensorInfo describes one tensor. Dims are in GGUF order, ne0 (the
// contiguous, fastest-varying dimension) first. Offset is relative to the
// data section; Size is the byte size implied by Type and Dims.
type TensorInfo struct {
	Name   string
	Dims   []uint64
	Type   TensorType
	Offset uint64
	Size   uint64

	infoOffset int64 // file offset of the info's offset field, for errors
}

// File is a parsed GGUF file.
type File struct {
	Path       string
	Version    uint32
	KVs        []KV         // in file order
	Tensors    []TensorInfo // in file order
	Alignment  uint64
	DataOffset int64 // file offset of the data section

	data        []byte
	mm          mmap.MMap
	kvIndex     map[string]int
	tensorIndex map[string]int
}

// ErrClosed is returned by Tensor after Close.
var ErrClosed = errors.New("gguf: file is closed")

// Open memory-maps path read-only and parses it. Close unmaps it.
func Open(path string) (*File, error) {
	fd, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("gguf: %w", err)
	}
	defer fd.Close()
	return Map(fd)
}

// Map memory-maps the open file fd read-only and parses it; fd stays the
// caller's (the mapping outlives it). Loaders that serve tensors in place
// keep fd to map tensor ranges from the same file they parsed.
func Map(fd *os.File) (*File, error) {
	path := fd.Name()
	st, err := fd.Stat()
	if err != nil {
		return nil, fmt.Errorf("gguf: %w", err)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("gguf: %s: not a regular file", path)
	}
	if st.Size() == 0 {
		return nil, &FormatError{File: path, Field: "magic", Problem: "empty file"}
	}
	if st.Size() > math.MaxInt {
		return nil, fmt.Errorf("gguf: %s: %d bytes is too large to map", path, st.Size())
	}
	mm, err := mmap.Map(fd, mmap.RDONLY, 0)
	if err != nil {
		return nil, fmt.Errorf("gguf: map %s: %w", path, err)
	}
	f, err := Parse(path, mm)
	if err != nil {
		_ = mm.Unmap()
		return nil, err
	}
	f.mm = mm
	return f, nil
}

// Close releases the mapping made by Open. Tensor bytes returned earlier
// must not be used afterwards. Close is idempotent.
func (f *File) Close() error {
	f.data = nil
	if f.mm == nil {
		return nil
	}
	mm := f.mm
	f.mm = nil
	if err := mm.Unmap(); err != nil {
		return fmt.Errorf("gguf: unmap %s: %w", f.Path, err)
	}
	return nil
}

// Get returns the value of key.
func (f *File) Get(key string) (Value, bool) {
	i, ok := f.kvIndex[key]
	if !ok {
		return Value{}, false
	}
	return f.KVs[i].Value, true
}

// Tensor returns the info and the bytes of the named tensor. The bytes are a
// view of the file (capacity clipped to the tensor), valid until Close; do
// not modify them.
func (f *File) Tensor(name string) (TensorInfo, []byte, error) {
	i, ok := f.tensorIndex[name]
	if !ok {
		return TensorInfo{}, nil, fmt.Errorf("gguf: %s: no tensor %q", f.Path, name)
	}
	t := f.Tensors[i]
	if f.data == nil {
		return t, nil, ErrClosed
	}
	start := uint64(f.DataOffset) + t.Offset
	end := start + t.Size // checked by Parse to lie within data
	return t, f.data[start:end:end], nil
}
