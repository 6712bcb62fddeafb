package safetensors

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"sort"

	"github.com/edsrzf/mmap-go"
)

const (
	// MaxHeaderSize bounds the JSON header, as the reference implementation does.
	MaxHeaderSize = 100_000_000
	// MetadataKey is the reserved header key holding string metadata.
	MetadataKey = "__metadata__"
)

// TensorInfo describes one tensor. Begin and End are byte offsets relative
// to the data region (File.DataOffset).
type TensorInfo struct {
	Name  string
	DType DType
	Shape []uint64
	Begin uint64
	End   uint64
}

// Elements is the product of the shape.
func (t TensorInfo) Elements() uint64 {
	n, _ := Elements(t.Shape) // checked by Parse
	return n
}

// File is a parsed safetensors file.
type File struct {
	Path       string
	HeaderSize uint64 // length of the JSON header
	DataOffset int64  // file offset of the data region: 8 + HeaderSize
	Metadata   map[string]string
	Tensors    []TensorInfo // in header order

	data  []byte
	mm    mmap.MMap
	index map[string]int
}

// ErrClosed is returned by Tensor after Close.
var ErrClosed = errors.New("safetensors: file is closed")

type headerEntry struct {
	DType       *string   `json:"dtype"`
	Shape       *[]uint64 `json:"shape"`
	DataOffsets *[]uint64 `json:"data_offsets"`
}

// Parse parses a safetensors image. name is used in errors and becomes
// File.Path. The File keeps data for Tensor; the caller must not modify it.
func Parse(name string, data []byte) (*File, error) {
	fail := func(field string, off int64, format string, args ...any) error {
		return &FormatError{File: name, Field: field, Offset: off, Problem: fmt.Sprintf(format, args...)}
	}
	if len(data) < 8 {
		return nil, fail("header length", 0, "truncated: file has %d bytes, need 8", len(data))
	}
	n := binary.LittleEndian.Uint64(data)
	if n > MaxHeaderSize {
		return nil, fail("header length", 0, "header length %d exceeds the limit %d", n, MaxHeaderSize)
	}
	if n > uint64(len(data)-8) {
		return nil, fail("header length", 0, "header length %d exceeds the %d bytes after it", n, len(data)-8)
	}
	header := data[8 : 8+n]
	if len(header) == 0 || header[0] != '{' {
		return nil, fail("header", 8, "header must be a JSON object starting with '{'")
	}
	f := &File{Path: name, HeaderSize: n, DataOffset: int64(8 + n), data: data, index: map[string]int{}}
	dec := json.NewDecoder(bytes.NewReader(header))
	jsonErr := func(field string, err error) error {
		return fail(field, 8+dec.InputOffset(), "invalid JSON: %v", err)
	}
	if _, err := dec.Token(); err != nil { // '{', checked above
		return nil, jsonErr("header", err)
	}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, jsonErr("header", err)
		}
		key, _ := tok.(string) // object keys are always strings
		at := 8 + dec.InputOffset()
		field := fmt.Sprintf("tensor %q", key)
		if key == MetadataKey {
			field = MetadataKey
		}
		if seen[key] {
			return nil, fail(field, at, "duplicate key")
		}
		seen[key] = true
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, jsonErr(field, err)
		}
		if key == MetadataKey {
			if err := json.Unmarshal(raw, &f.Metadata); err != nil {
				return nil, fail(field, at, "must be an object of strings: %v", err)
			}
			continue
		}
		t, err := parseEntry(key, raw)
		if err != nil {
			return nil, fail(field, at, "%v", err)
		}
		f.index[key] = len(f.Tensors)
		f.Tensors = append(f.Tensors, t)
	}
	if _, err := dec.Token(); err != nil { // '}'
		return nil, jsonErr("header", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fail("header", 8+dec.InputOffset(), "trailing data after the header object")
	}
	if err := f.checkRanges(fail); err != nil {
		return nil, err
	}
	return f, nil
}

func parseEntry(name string, raw json.RawMessage) (TensorInfo, error) {
	var e headerEntry
	if err := json.Unmarshal(raw, &e); err != nil {
		return TensorInfo{}, fmt.Errorf("bad entry: %v", err)
	}
	switch {
	case e.DType == nil:
		return TensorInfo{}, errors.New("missing dtype")
	case e.Shape == nil:
		return TensorInfo{}, errors.New("missing shape")
	case e.DataOffsets == nil || len(*e.DataOffsets) != 2:
		return TensorInfo{}, errors.New("data_offsets must be [begin, end]")
	}
	t := TensorInfo{Name: name, DType: DType(*e.DType), Shape: *e.Shape, Begin: (*e.DataOffsets)[0], End: (*e.DataOffsets)[1]}
	if t.Shape == nil {
		t.Shape = []uint64{}
	}
	if !t.DType.Known() {
		return TensorInfo{}, fmt.Errorf("unknown dtype %q", t.DType)
	}
	size, ok := byteSize(t.DType, t.Shape)
	if !ok {
		return TensorInfo{}, fmt.Errorf("shape %v of %s overflows", t.Shape, t.DType)
	}
	if t.Begin > t.End {
		return TensorInfo{}, fmt.Errorf("data_offsets [%d, %d] end before begin", t.Begin, t.End)
	}
	if t.End-t.Begin != size {
		return TensorInfo{}, fmt.Errorf("data_offsets [%d, %d] span %d bytes, shape %v of %s needs %d", t.Begin, t.End, t.End-t.Begin, t.Shape, t.DType, size)
	}
	return t, nil
}

// checkRanges checks that tensors lie in the data region and do not overlap.
func (f *File) checkRanges(fail func(string, int64, string, ...any) error) error {
	region := uint64(len(f.data)) - uint64(f.DataOffset)
	for _, t := range f.Tensors {
		if t.End > region {
			return fail(fmt.Sprintf("tensor %q data_offsets", t.Name), f.DataOffset+int64(min(t.Begin, region)),
				"[%d, %d] runs past the %d-byte data region", t.Begin, t.End, region)
		}
	}
	order := make([]int, len(f.Tensors))
	for i := range order {
		order[i] = i
	}
	sort.Slice(order, func(a, b int) bool { return f.Tensors[order[a]].Begin < f.Tensors[order[b]].Begin })
	var prev *TensorInfo
	for _, i := range order {
		t := &f.Tensors[i]
		if t.Begin == t.End {
			continue
		}
		if prev != nil && t.Begin < prev.End {
			return fail(fmt.Sprintf("tensor %q data_offsets", t.Name), f.DataOffset+int64(t.Begin),
				"[%d, %d] overlaps tensor %q at [%d, %d]", t.Begin, t.End, prev.Name, prev.Begin, prev.End)
		}
		prev = t
	}
	return nil
}

// Open memory-maps path read-only and parses it. Close unmaps it.
func Open(path string) (*File, error) {
	fd, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("safetensors: %w", err)
	}
	defer fd.Close()
	st, err := fd.Stat()
	if err != nil {
		return nil, fmt.Errorf("safetensors: %w", err)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("safetensors: %s: not a regular file", path)
	}
	if st.Size() < 8 {
		return nil, &FormatError{File: path, Field: "header length", Problem: fmt.Sprintf("truncated: file has %d bytes, need 8", st.Size())}
	}
	if st.Size() > math.MaxInt {
		return nil, fmt.Errorf("safetensors: %s: %d bytes is too large to map", path, st.Size())
	}
	mm, err := mmap.Map(fd, mmap.RDONLY, 0)
	if err != nil {
		return nil, fmt.Errorf("safetensors: map %s: %w", path, err)
	}
	f, err := Parse(path, mm)
	if err != nil {
		_ = mm.Unmap()
		return nil, err
	}
	f.mm = mm
	return f, nil
}

// Close releases the mapping made by Open; it is idempotent.
func (f *File) Close() error {
	f.data = nil
	if f.mm == nil {
		return nil
	}
	mm := f.mm
	f.mm = nil
	if err := mm.Unmap(); err != nil {
		return fmt.Errorf("safetensors: unmap %s: %w", f.Path, err)
	}
	return nil
}

// Info returns the named tensor's description.
func (f *File) Info(name string) (TensorInfo, bool) {
	i, ok := f.index[name]
	if !ok {
		return TensorInfo{}, false
	}
	return f.Tensors[i], true
}

// Tensor returns the info and bytes of the named tensor: a view of the file
// with capacity clipped, valid until Close; do not modify it.
func (f *File) Tensor(name string) (TensorInfo, []byte, error) {
	t, ok := f.Info(name)
	if !ok {
		return TensorInfo{}, nil, fmt.Errorf("safetensors: %s: no tensor %q", f.Path, name)
	}
	if f.data == nil {
		return t, nil, ErrClosed
	}
	start := uint64(f.DataOffset) + t.Begin
	end := uint64(f.DataOffset) + t.End
	return t, f.data[start:end:end], nil
}
