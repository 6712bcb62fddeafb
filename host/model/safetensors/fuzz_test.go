package safetensors

import (
	"bytes"
	"reflect"
	"testing"
)

// FuzzParse checks that Parse never panics, returns only *FormatError, and
// that an accepted file's tensors lie in the input and survive a rewrite.
func FuzzParse(f *testing.F) {
	f.Add(writeBytes(f, sampleTensors(), map[string]string{"format": "pt"}))
	f.Add(writeBytes(f, nil, nil))
	f.Add(rawFile(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"U8","shape":[2],"data_offsets":[8,10]}}`, make([]byte, 10)))
	f.Fuzz(func(t *testing.T, data []byte) {
		file, err := Parse("fuzz.safetensors", data)
		if err != nil {
			if _, ok := err.(*FormatError); !ok {
				t.Fatalf("error %v is a %T", err, err)
			}
			return
		}
		ts := make([]Tensor, len(file.Tensors))
		for i, info := range file.Tensors {
			_, b, err := file.Tensor(info.Name)
			if err != nil || uint64(len(b)) != info.End-info.Begin {
				t.Fatalf("tensor %q: %v", info.Name, err)
			}
			ts[i] = Tensor{info.Name, info.DType, info.Shape, b}
		}
		var buf bytes.Buffer
		if err := Write(&buf, ts, file.Metadata); err != nil {
			t.Fatalf("rewrite: %v", err)
		}
		again, err := Parse("rewritten", buf.Bytes())
		if err != nil {
			t.Fatalf("parse rewrite: %v", err)
		}
		if len(again.Tensors) != len(ts) || (len(file.Metadata) > 0 && !reflect.DeepEqual(again.Metadata, file.Metadata)) {
			t.Fatal("rewrite changed the file")
		}
		for _, x := range ts {
			info, b, _ := again.Tensor(x.Name)
			if !bytes.Equal(b, x.Data) || info.DType != x.DType || !reflect.DeepEqual(info.Shape, x.Shape) {
				t.Fatalf("tensor %q changed", x.Name)
			}
		}
	})
}
