package gguf

import (
	"bytes"
	"reflect"
	"testing"
)

// FuzzParse checks that Parse never panics, that accepted files have every
// tensor inside the input, and that writing an accepted file's contents
// and parsing them again preserves them.
func FuzzParse(f *testing.F) {
	f.Add(writeBytes(f, allTypesKVs(), sampleTensors(), 0))
	f.Add(writeBytes(f, allTypesKVs()[:3], sampleTensors()[:1], 64))
	f.Add(writeBytes(f, nil, nil, 0))
	var r rawBuf
	f.Add(r.header(2, 1, 1).str("k").u32(uint32(TypeArray)).u32(uint32(TypeArray)).u64(1).u32(uint32(TypeInt8)).u64(1).bytes(0xff).
		tensor("t", TypeQ8_0, 0, 32).pad(32).zeros(34).b)
	f.Fuzz(func(t *testing.T, data []byte) {
		file, err := Parse("fuzz.gguf", data)
		if err != nil {
			if _, ok := err.(*FormatError); !ok {
				t.Fatalf("error %v is a %T, not *FormatError", err, err)
			}
			return
		}
		for _, ti := range file.Tensors {
			_, b, err := file.Tensor(ti.Name)
			if err != nil || uint64(len(b)) != ti.Size {
				t.Fatalf("tensor %q: %d bytes, %v", ti.Name, len(b), err)
			}
		}
		var buf bytes.Buffer
		if err := Write(&buf, file.KVs, specsOf(t, file), file.Alignment); err != nil {
			t.Fatalf("rewrite: %v", err)
		}
		again, err := Parse("rewritten.gguf", buf.Bytes())
		if err != nil {
			t.Fatalf("parse rewritten: %v", err)
		}
		if !reflect.DeepEqual(again.KVs, file.KVs) {
			t.Fatal("KVs changed in rewrite")
		}
		for _, ti := range file.Tensors {
			got, b2, _ := again.Tensor(ti.Name)
			_, b1, _ := file.Tensor(ti.Name)
			if !bytes.Equal(b1, b2) || !reflect.DeepEqual(got.Dims, ti.Dims) || got.Type != ti.Type {
				t.Fatalf("tensor %q changed in rewrite", ti.Name)
			}
		}
	})
}
