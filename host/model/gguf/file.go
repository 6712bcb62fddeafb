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
// data section; Size is the byte size implied by Type and Dims. Shard is
// the index in File.Shards of the file holding the tensor (0 for a single
// file; see OpenModel).
type TensorInfo struct {
	Name   string
	Dims   []uint64
	Type   TensorType
	Offset uint64
	Size   uint64
	Shard  int

	infoOffset int64 // file offset of the info's offset field, for errors
}

// File is a parsed GGUF file, or the merged view of a split model's shards
// (OpenModel): then KVs, Alignment, Version and DataOffset are the first
// shard's, Tensors lists every shard's tensors in shard order, and a
// tensor's Offset is relative to the data section of Shards[Shard].
type File struct {
	Path       string
	Version    uint32
	KVs        []KV         // in file order
	Tensors    []TensorInfo // in file order
	Alignment  uint64
	DataOffset int64 // file offset of the data section
	// Shards are a split model's files in split.no order, each parsed on
	// its own; nil for a single file.
	Shards []*File

	data        []byte
	mm          mmap.MMap
	kvIndex     map[string]int
	tensorIndex map[string]int
	// fd is the open file the header was parsed from, when known (Map,
	// OpenModel); ownFD says Close closes it.
	fd    *os.File
	ownFD bool
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
	f, err := Map(fd)
	if f != nil {
		f.fd = nil // closed on return
	}
	return f, err
}

// Map memory-maps the open file fd read-only and parses it; fd stays the
// caller's (the mapping outlives it). Loaders that serve tensors in place
// keep fd to map tensor ranges from the same file they parsed; TensorFile
// returns it, valid while the caller keeps it open. OpenModel opens and
// owns its files instead.
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
	f.fd = fd
	return f, nil
}

// Close releases the mapping made by Open. Tensor bytes returned earlier
// must not be used afterwards. Close is idempotent.
func (f *File) Close() error {
	f.data = nil
	var errs []error
	for _, s := range f.Shards {
		if s != f {
			errs = append(errs, s.Close())
		}
	}
	if f.ownFD && f.fd != nil {
		errs = append(errs, f.fd.Close())
		f.fd, f.ownFD = nil, false
	}
	if f.mm != nil {
		mm := f.mm
		f.mm = nil
		if err := mm.Unmap(); err != nil {
			errs = append(errs, fmt.Errorf("gguf: unmap %s: %w", f.Path, err))
		}
	}
	return errors.Join(errs...)
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
	src := f.shard(t)
	if src.data == nil {
		return t, nil, ErrClosed
	}
	start := uint64(src.DataOffset) + t.Offset
	end := start + t.Size // checked by Parse to lie within data
	return t, src.data[start:end:end], nil
}

// PathOf is the path of the file holding t's bytes: its shard's for a
// split model, for errors that name where a tensor lies.
func (f *File) PathOf(t TensorInfo) string { return f.shard(t).Path }

// shard is the file holding t's bytes.
func (f *File) shard(t TensorInfo) *File {
	if f.Shards == nil {
		return f
	}
	return f.Shards[t.Shard]
}

// TensorFile returns the open file holding the named tensor and the file
// offset of its data, for a caller that maps the range itself; the file
// stays open until Close. ok is false for an absent tensor or a File whose
// file is not open (Parse, Open).
func (f *File) TensorFile(name string) (fd *os.File, off int64, ok bool) {
	i, found := f.tensorIndex[name]
	if !found {
		return nil, 0, false
	}
	t := f.Tensors[i]
	src := f.shard(t)
	if src.fd == nil || src.data == nil {
		return nil, 0, false
	}
	return src.fd, src.DataOffset + int64(t.Offset), true
}
