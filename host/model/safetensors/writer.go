package safetensors

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"sort"
)

// Tensor is one tensor to write.
type Tensor struct {
	Name  string
	DType DType
	Shape []uint64
	Data  []byte
}

// Write writes a safetensors file holding tensors in the given order,
// packed without gaps, with metadata (may be nil) as "__metadata__". The
// header is padded with spaces to a multiple of 8 bytes, as the reference
// writer does.
func Write(w io.Writer, tensors []Tensor, metadata map[string]string) error {
	var h bytes.Buffer
	h.WriteByte('{')
	first := true
	sep := func() {
		if !first {
			h.WriteByte(',')
		}
		first = false
	}
	if len(metadata) > 0 {
		keys := make([]string, 0, len(metadata))
		for k := range metadata {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		sep()
		h.WriteString(`"` + MetadataKey + `":{`)
		for i, k := range keys {
			if i > 0 {
				h.WriteByte(',')
			}
			writeJSONString(&h, k)
			h.WriteByte(':')
			writeJSONString(&h, metadata[k])
		}
		h.WriteByte('}')
	}
	seen := make(map[string]bool, len(tensors))
	var off uint64
	for _, t := range tensors {
		if t.Name == MetadataKey || seen[t.Name] {
			return fmt.Errorf("safetensors: write: duplicate or reserved tensor name %q", t.Name)
		}
		seen[t.Name] = true
		size, ok := byteSize(t.DType, t.Shape)
		if !ok {
			return fmt.Errorf("safetensors: write: tensor %q: unknown dtype %q or overflowing shape %v", t.Name, t.DType, t.Shape)
		}
		if uint64(len(t.Data)) != size {
			return fmt.Errorf("safetensors: write: tensor %q: %d data bytes, shape %v of %s needs %d", t.Name, len(t.Data), t.Shape, t.DType, size)
		}
		shape := t.Shape
		if shape == nil {
			shape = []uint64{}
		}
		sj, _ := json.Marshal(shape) // []uint64 always marshals
		sep()
		writeJSONString(&h, t.Name)
		fmt.Fprintf(&h, `:{"dtype":%q,"shape":%s,"data_offsets":[%d,%d]}`, string(t.DType), sj, off, off+size)
		off += size
	}
	h.WriteByte('}')
	for h.Len()%8 != 0 {
		h.WriteByte(' ')
	}
	bw := bufio.NewWriterSize(w, 1<<16)
	var n [8]byte
	binary.LittleEndian.PutUint64(n[:], uint64(h.Len()))
	bw.Write(n[:])
	bw.Write(h.Bytes())
	for _, t := range tensors {
		bw.Write(t.Data)
	}
	if err := bw.Flush(); err != nil { // bufio keeps the first write error
		return fmt.Errorf("safetensors: write: %w", err)
	}
	return nil
}

func writeJSONString(b *bytes.Buffer, s string) {
	j, _ := json.Marshal(s) // strings always marshal
	b.Write(j)
}
