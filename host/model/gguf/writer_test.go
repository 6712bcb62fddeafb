package gguf

import (
	"bytes"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

func allTypesKVs() []KV {
	inner1, _ := NewArray(TypeUint8, []Value{NewUint8(1), NewUint8(2)})
	inner2, _ := NewArray(TypeUint8, nil)
	nested, _ := NewArray(TypeArray, []Value{inner1, inner2})
	bools, _ := NewArray(TypeBool, []Value{NewBool(true), NewBool(false)})
	f64s, _ := NewArray(TypeFloat64, []Value{NewFloat64(math.Pi), NewFloat64(-0.5)})
	return []KV{
		{"general.architecture", NewString("llama")},
		{"u8", NewUint8(200)},
		{"i8", NewInt8(-100)},
		{"u16", NewUint16(60000)},
		{"i16", NewInt16(-30000)},
		{"u32", NewUint32(4000000000)},
		{"i32", NewInt32(-2000000000)},
		{"f32", NewFloat32(1e-5)},
		{"bool", NewBool(true)},
		{"empty string", NewString("")},
		{"u64", NewUint64(math.MaxUint64)},
		{"i64", NewInt64(math.MinInt64)},
		{"f64", NewFloat64(-math.E)},
		{"tokens", NewStringArray([]string{"<unk>", "<s>", "\u2581hello", ""})},
		{"scores", NewFloat32Array([]float32{0, -1.5, 3.25})},
		{"types", NewInt32Array([]int32{2, 3, -1})},
		{"u32s", NewUint32Array([]uint32{7, math.MaxUint32})},
		{"i64s", NewInt64Array([]int64{math.MinInt64, 5})},
		{"empty floats", NewFloat32Array(nil)},
		{"empty strings", NewStringArray(nil)},
		{"nested", nested},
		{"bools", bools},
		{"f64s", f64s},
	}
}

func randBytes(r *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// sampleTensors has one tensor of each commonly used type; sizes are chosen
// so that some need padding and the last ends aligned.
func sampleTensors() []TensorSpec {
	r := rand.New(rand.NewPCG(1, 2))
	return []TensorSpec{
		{"f32", []uint64{3, 2}, TypeF32, randBytes(r, 24)},
		{"f16", []uint64{5}, TypeF16, randBytes(r, 10)},
		{"q8_0", []uint64{64, 2}, TypeQ8_0, randBytes(r, 4*34)},
		{"bf16", []uint64{16, 1, 1, 2}, TypeBF16, randBytes(r, 64)},
	}
}

func writeBytes(t testing.TB, kvs []KV, ts []TensorSpec, align uint64) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := Write(&buf, kvs, ts, align); err != nil {
		t.Fatalf("Write: %v", err)
	}
	return buf.Bytes()
}

func TestRoundTrip(t *testing.T) {
	for _, align := range []uint64{0, 1, 8, 32, 64, 4096} {
		kvs := allTypesKVs()
		ts := sampleTensors()
		data := writeBytes(t, kvs, ts, align)
		f, err := Parse("rt.gguf", data)
		if err != nil {
			t.Fatalf("align %d: Parse: %v", align, err)
		}
		want := kvs
		wantAlign := align
		if align == 0 {
			wantAlign = DefaultAlignment
		}
		if wantAlign != DefaultAlignment {
			want = append(want, KV{AlignmentKey, NewUint32(uint32(wantAlign))})
		}
		if !reflect.DeepEqual(f.KVs, want) {
			t.Fatalf("align %d: KVs differ:\n got %#v\nwant %#v", align, f.KVs, want)
		}
		if f.Version != 3 || f.Alignment != wantAlign || f.DataOffset%int64(wantAlign) != 0 {
			t.Fatalf("align %d: version %d alignment %d data offset %d", align, f.Version, f.Alignment, f.DataOffset)
		}
		if len(f.Tensors) != len(ts) {
			t.Fatalf("align %d: %d tensors, want %d", align, len(f.Tensors), len(ts))
		}
		for i, spec := range ts {
			info, b, err := f.Tensor(spec.Name)
			if err != nil {
				t.Fatal(err)
			}
			if f.Tensors[i].Name != spec.Name || !reflect.DeepEqual(info.Dims, spec.Dims) || info.Type != spec.Type {
				t.Fatalf("align %d: tensor %d = %+v, want %+v", align, i, info, spec)
			}
			if info.Offset%wantAlign != 0 || !bytes.Equal(b, spec.Data) || cap(b) != len(b) {
				t.Fatalf("align %d: tensor %q offset %d bytes differ or capacity not clipped", align, spec.Name, info.Offset)
			}
		}
		// Writing the parsed contents again reproduces the file exactly.
		again := writeBytes(t, f.KVs, specsOf(t, f), wantAlign)
		if !bytes.Equal(again, data) {
			t.Fatalf("align %d: rewrite differs", align)
		}
	}
}

func specsOf(t testing.TB, f *File) []TensorSpec {
	specs := make([]TensorSpec, len(f.Tensors))
	for i, ti := range f.Tensors {
		_, b, err := f.Tensor(ti.Name)
		if err != nil {
			t.Fatal(err)
		}
		specs[i] = TensorSpec{ti.Name, ti.Dims, ti.Type, b}
	}
	return specs
}

// TestWriteLayout checks Write's bytes against a layout assembled by hand
// from the GGUF specification.
func TestWriteLayout(t *testing.T) {
	data := []byte{1, 2, 3, 4, 5, 6, 7, 8}
	got := writeBytes(t,
		[]KV{{"a", NewUint32(7)}, {"s", NewStringArray([]string{"x"})}},
		[]TensorSpec{{"w", []uint64{2}, TypeF32, data}, {"v", []uint64{2}, TypeF16, data[:4]}}, 0)
	var r rawBuf
	r.header(3, 2, 2)
	r.str("a").u32(uint32(TypeUint32)).u32(7)
	r.str("s").u32(uint32(TypeArray)).u32(uint32(TypeString)).u64(1).str("x")
	r.tensor("w", TypeF32, 0, 2).tensor("v", TypeF16, 32, 2).pad(32)
	r.bytes(data...).pad(32).bytes(data[:4]...).pad(32)
	if !bytes.Equal(got, r.b) {
		t.Fatalf("layout differs:\n got % x\nwant % x", got, r.b)
	}
}

func TestWriteRejects(t *testing.T) {
	good := sampleTensors()
	cases := []struct {
		name  string
		kvs   []KV
		ts    []TensorSpec
		align uint64
	}{
		{"alignment not power of two", nil, nil, 48},
		{"duplicate key", []KV{{"k", NewUint8(1)}, {"k", NewUint8(2)}}, nil, 0},
		{"alignment key mismatch", []KV{{AlignmentKey, NewUint32(64)}}, nil, 32},
		{"alignment key wrong type", []KV{{AlignmentKey, NewUint64(32)}}, nil, 32},
		{"unknown value type", []KV{{"k", Value{Type: 99}}}, nil, 0},
		{"duplicate tensor", nil, []TensorSpec{good[0], good[0]}, 0},
		{"data size mismatch", nil, []TensorSpec{{"t", []uint64{4}, TypeF32, make([]byte, 15)}}, 0},
		{"partial block", nil, []TensorSpec{{"t", []uint64{33}, TypeQ8_0, make([]byte, 34)}}, 0},
		{"unknown type", nil, []TensorSpec{{"t", []uint64{1}, TensorType(4), nil}}, 0},
		{"too many dims", nil, []TensorSpec{{"t", []uint64{1, 1, 1, 1, 1}, TypeF32, make([]byte, 4)}}, 0},
	}
	for _, c := range cases {
		if err := Write(&bytes.Buffer{}, c.kvs, c.ts, c.align); err == nil {
			t.Errorf("%s: Write succeeded", c.name)
		}
	}
}

func TestOpenClose(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "m.gguf")
	ts := sampleTensors()
	if err := os.WriteFile(path, writeBytes(t, allTypesKVs(), ts, 0), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := f.Get("general.architecture"); !ok {
		t.Fatal("missing general.architecture")
	} else if s, _ := v.String(); s != "llama" {
		t.Fatalf("architecture %q", s)
	}
	_, b, err := f.Tensor("q8_0")
	if err != nil || !bytes.Equal(b, ts[2].Data) {
		t.Fatalf("Tensor: %v", err)
	}
	if _, _, err := f.Tensor("nope"); err == nil {
		t.Fatal("missing tensor found")
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, _, err := f.Tensor("q8_0"); err != ErrClosed {
		t.Fatalf("Tensor after Close: %v", err)
	}
	// Metadata outlives the mapping.
	if v, _ := f.Get("tokens"); v.Len() != 4 {
		t.Fatal("metadata lost after Close")
	}

	empty := filepath.Join(dir, "empty.gguf")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(empty); err == nil {
		t.Fatal("empty file opened")
	}
	if _, err := Open(filepath.Join(dir, "absent.gguf")); err == nil {
		t.Fatal("absent file opened")
	}
}
