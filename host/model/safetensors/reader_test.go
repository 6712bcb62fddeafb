package safetensors

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

const badName = "bad.safetensors"

// rawFile assembles a file from a literal JSON header and data, the way the
// reference writer lays it out, independently of Write.
func rawFile(header string, data []byte) []byte {
	b := binary.LittleEndian.AppendUint64(nil, uint64(len(header)))
	b = append(b, header...)
	return append(b, data...)
}

func f32bytes(xs ...float32) []byte {
	var b []byte
	for _, x := range xs {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(x))
	}
	return b
}

func sampleTensors() []Tensor {
	return []Tensor{
		{"model.embed_tokens.weight", F32, []uint64{2, 3}, f32bytes(1, 2, 3, 4, 5, 6)},
		{"model.norm.weight", BF16, []uint64{3}, []byte{1, 2, 3, 4, 5, 6}},
		{"scalar", I64, nil, make([]byte, 8)},
		{"empty", F16, []uint64{0, 4}, nil},
		{"mask", BOOL, []uint64{3}, []byte{1, 0, 1}},
	}
}

func writeBytes(t testing.TB, ts []Tensor, md map[string]string) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := Write(&buf, ts, md); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestParseReferenceLayout(t *testing.T) {
	data := rawFile(`{"__metadata__":{"format":"pt"},"b":{"dtype":"F16","shape":[1],"data_offsets":[8,10]},`+
		`"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}  `, append(f32bytes(1.5, -2), 0x00, 0x3c))
	f, err := Parse("ref.safetensors", data)
	if err != nil {
		t.Fatal(err)
	}
	if f.Metadata["format"] != "pt" || len(f.Tensors) != 2 || f.Tensors[0].Name != "b" {
		t.Fatalf("%+v", f)
	}
	info, b, err := f.Tensor("a")
	if err != nil || info.DType != F32 || !reflect.DeepEqual(info.Shape, []uint64{2}) || !bytes.Equal(b, f32bytes(1.5, -2)) || cap(b) != 8 {
		t.Fatalf("a: %+v % x %v", info, b, err)
	}
	if _, b, _ := f.Tensor("b"); !bytes.Equal(b, []byte{0x00, 0x3c}) {
		t.Fatalf("b: % x", b)
	}
	if _, _, err := f.Tensor("c"); err == nil {
		t.Fatal("missing tensor found")
	}
}

func TestRoundTrip(t *testing.T) {
	ts := sampleTensors()
	md := map[string]string{"format": "pt", "quote\"d": "v\n"}
	data := writeBytes(t, ts, md)
	if hl := binary.LittleEndian.Uint64(data); hl%8 != 0 {
		t.Fatalf("header length %d not padded to 8", hl)
	}
	f, err := Parse("rt.safetensors", data)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(f.Metadata, md) {
		t.Fatalf("metadata %v", f.Metadata)
	}
	for i, want := range ts {
		info, b, err := f.Tensor(want.Name)
		if err != nil {
			t.Fatal(err)
		}
		shape := want.Shape
		if shape == nil {
			shape = []uint64{}
		}
		if f.Tensors[i].Name != want.Name || info.DType != want.DType || !reflect.DeepEqual(info.Shape, shape) || !bytes.Equal(b, want.Data) {
			t.Fatalf("tensor %d: %+v % x", i, info, b)
		}
	}
	if err := Write(&bytes.Buffer{}, []Tensor{ts[0], ts[0]}, nil); err == nil {
		t.Fatal("duplicate tensor written")
	}
	if err := Write(&bytes.Buffer{}, []Tensor{{"x", F32, []uint64{2}, make([]byte, 7)}}, nil); err == nil {
		t.Fatal("short data written")
	}
	if err := Write(&bytes.Buffer{}, []Tensor{{"x", "F4", []uint64{2}, make([]byte, 1)}}, nil); err == nil {
		t.Fatal("unknown dtype written")
	}
	if err := Write(&bytes.Buffer{}, []Tensor{{MetadataKey, U8, []uint64{1}, make([]byte, 1)}}, nil); err == nil {
		t.Fatal("reserved name written")
	}
}

func TestParseMalformed(t *testing.T) {
	ok8 := make([]byte, 8)
	entry := func(body string) string { return `{"t":` + body + `}` }
	// Expected offsets: just after a key (where the decoder stands), or a
	// position in the data region.
	afterLastKey := func(h, key string) int64 { return int64(8 + strings.LastIndex(h, `"`+key+`"`) + len(key) + 2) }
	dataAt := func(h string, n int) int64 { return int64(8 + len(h) + n) }
	dupHeader := `{"t":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"t":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}`
	pastEnd := entry(`{"dtype":"F32","shape":[2],"data_offsets":[4,12]}`)
	farPastEnd := entry(`{"dtype":"U8","shape":[1],"data_offsets":[18446744073709551614,18446744073709551615]}`)
	overlap := `{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"U8","shape":[2],"data_offsets":[6,8]}}`
	cases := []struct {
		name    string
		data    []byte
		field   string
		offset  int64
		problem string
	}{
		{"empty", nil, "header length", 0, "truncated"},
		{"seven bytes", make([]byte, 7), "header length", 0, "truncated"},
		{"header over limit", binary.LittleEndian.AppendUint64(nil, MaxHeaderSize+1), "header length", 0, "exceeds the limit"},
		{"absurd header length", binary.LittleEndian.AppendUint64(nil, 1<<60), "header length", 0, "exceeds the limit"},
		{"header past end", append(binary.LittleEndian.AppendUint64(nil, 100), "{}"...), "header length", 0, "exceeds the 2 bytes"},
		{"not an object", rawFile(`[1]`, nil), "header", 8, "JSON object"},
		{"empty header", rawFile(``, nil), "header", 8, "JSON object"},
		{"invalid JSON", rawFile(`{"t":{`, nil), `tensor "t"`, 8 + 5, "invalid JSON"},
		{"trailing data", rawFile(`{}{}`, nil), "header", 8 + 3, "trailing data"},
		{"duplicate name", rawFile(dupHeader, []byte{1, 2}), `tensor "t"`, afterLastKey(dupHeader, "t"), "duplicate key"},
		{"unknown dtype", rawFile(entry(`{"dtype":"F4","shape":[1],"data_offsets":[0,1]}`), ok8), `tensor "t"`, 8 + 4, `unknown dtype "F4"`},
		{"missing dtype", rawFile(entry(`{"shape":[1],"data_offsets":[0,1]}`), ok8), `tensor "t"`, 12, "missing dtype"},
		{"missing shape", rawFile(entry(`{"dtype":"U8","data_offsets":[0,1]}`), ok8), `tensor "t"`, 12, "missing shape"},
		{"one offset", rawFile(entry(`{"dtype":"U8","shape":[1],"data_offsets":[0]}`), ok8), `tensor "t"`, 12, "[begin, end]"},
		{"negative dim", rawFile(entry(`{"dtype":"U8","shape":[-1],"data_offsets":[0,1]}`), ok8), `tensor "t"`, 12, "bad entry"},
		{"fractional dim", rawFile(entry(`{"dtype":"U8","shape":[1.5],"data_offsets":[0,1]}`), ok8), `tensor "t"`, 12, "bad entry"},
		{"entry not object", rawFile(entry(`7`), ok8), `tensor "t"`, 12, "bad entry"},
		{"shape overflow", rawFile(entry(`{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,0]}`), ok8), `tensor "t"`, 12, "overflows"},
		{"size mismatch", rawFile(entry(`{"dtype":"F32","shape":[2],"data_offsets":[0,4]}`), ok8), `tensor "t"`, 12, "needs 8"},
		{"end before begin", rawFile(entry(`{"dtype":"U8","shape":[0],"data_offsets":[4,0]}`), ok8), `tensor "t"`, 12, "end before begin"},
		{"past end", rawFile(pastEnd, ok8), `tensor "t" data_offsets`, dataAt(pastEnd, 4), "runs past the 8-byte data region"},
		{"offset far past end", rawFile(farPastEnd, ok8), `tensor "t" data_offsets`, dataAt(farPastEnd, 8), "runs past"},
		{"overlap", rawFile(overlap, ok8), `tensor "b" data_offsets`, dataAt(overlap, 6), `overlaps tensor "a"`},
		{"metadata not strings", rawFile(`{"__metadata__":{"n":1}}`, nil), MetadataKey, 8 + 15, "object of strings"},
		{"duplicate metadata", rawFile(`{"__metadata__":{},"__metadata__":{}}`, nil), MetadataKey, afterLastKey(`{"__metadata__":{},"__metadata__":{}}`, MetadataKey), "duplicate key"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse(badName, c.data)
			checkFormatError(t, err, c.field, c.offset, c.problem)
		})
	}
}

func checkFormatError(t *testing.T, err error, field string, offset int64, problem string) {
	t.Helper()
	var fe *FormatError
	if !errors.As(err, &fe) {
		t.Fatalf("err = %v, want *FormatError", err)
	}
	if fe.File != badName || !strings.Contains(fe.Field, field) || fe.Offset != offset || !strings.Contains(fe.Problem, problem) {
		t.Fatalf("got %+v\nwant field ~%q offset %d problem ~%q", *fe, field, offset, problem)
	}
	msg := err.Error()
	for _, part := range []string{"safetensors: ", badName, fe.Field, fmt.Sprint(offset)} {
		if !strings.Contains(msg, part) {
			t.Fatalf("message %q lacks %q", msg, part)
		}
	}
}

func TestTruncatedPrefixes(t *testing.T) {
	data := writeBytes(t, sampleTensors(), map[string]string{"format": "pt"})
	for n := 0; n < len(data); n++ {
		_, err := Parse(badName, data[:n])
		var fe *FormatError
		if !errors.As(err, &fe) || fe.File != badName || fe.Field == "" {
			t.Fatalf("prefix %d of %d: err = %v", n, len(data), err)
		}
	}
}

func TestOpenClose(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "model.safetensors")
	ts := sampleTensors()
	if err := os.WriteFile(path, writeBytes(t, ts, nil), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, b, err := f.Tensor(ts[0].Name); err != nil || !bytes.Equal(b, ts[0].Data) {
		t.Fatalf("Tensor: %v", err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := f.Tensor(ts[0].Name); err != ErrClosed {
		t.Fatalf("after Close: %v", err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	short := filepath.Join(dir, "short.safetensors")
	if err := os.WriteFile(short, []byte{1, 2}, 0o600); err != nil {
		t.Fatal(err)
	}
	var fe *FormatError
	if _, err := Open(short); !errors.As(err, &fe) {
		t.Fatalf("short file: %v", err)
	}
}
