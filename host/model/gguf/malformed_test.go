package gguf

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"
)

const badName = "bad.gguf"

func TestParseMalformed(t *testing.T) {
	type build func(r *rawBuf)
	kv := func(r *rawBuf, key string, typ ValueType) *rawBuf { return r.str(key).u32(uint32(typ)) }
	f32x16 := func(r *rawBuf) *rawBuf { return r.zeros(64) }
	cases := []struct {
		name    string
		build   build
		field   string // substring of FormatError.Field
		problem string // substring of FormatError.Problem
	}{
		{"empty", func(r *rawBuf) { r.here() }, "magic", "truncated"},
		{"short magic", func(r *rawBuf) { r.here().bytes('G', 'G') }, "magic", "truncated"},
		{"wrong magic", func(r *rawBuf) { r.here().bytes('G', 'G', 'M', 'L').u32(3).u64(0).u64(0) }, "magic", "want \"GGUF\""},
		{"version 1", func(r *rawBuf) { r.bytes('G', 'G', 'U', 'F').here().u32(1).u64(0).u64(0) }, "version", "version 1"},
		{"version 4", func(r *rawBuf) { r.bytes('G', 'G', 'U', 'F').here().u32(4).u64(0).u64(0) }, "version", "unsupported version 4"},
		{"big endian", func(r *rawBuf) { r.bytes('G', 'G', 'U', 'F').here().u32(3 << 24).u64(0).u64(0) }, "version", "big-endian"},
		{"truncated counts", func(r *rawBuf) { r.bytes('G', 'G', 'U', 'F').u32(3).u64(0).here().u32(0) }, "kv_count", "truncated"},
		{"absurd tensor count", func(r *rawBuf) { r.header(3, 0, 0); r.mark = 8; r.b[15] = 0x10; r.zeros(100) }, "tensor_count", "tensors need"},
		{"absurd kv count", func(r *rawBuf) { r.header(3, 0, 1<<60); r.mark = 16; r.zeros(100) }, "kv_count", "KVs need"},
		{"counts fit alone but not together", func(r *rawBuf) { r.header(3, 2, 2); r.mark = 16; r.zeros(60) }, "kv_count", "cannot fit"},
		{"key length past end", func(r *rawBuf) { r.header(3, 0, 1).here().u64(1 << 60).zeros(13) }, "kv[0].key", "exceeds"},
		{"unknown value type", func(r *rawBuf) { r.header(3, 0, 1).str("k").here().u32(13).zeros(8) }, "k", "unknown value type 13"},
		{"string value past end", func(r *rawBuf) { kv(r.header(3, 0, 1), "k", TypeString).here().u64(100).bytes('x') }, "k", "exceeds"},
		{"scalar truncated", func(r *rawBuf) { kv(r.header(3, 0, 1), "k", TypeUint64).here().u32(0) }, "k", "truncated"},
		{"absurd array count", func(r *rawBuf) {
			kv(r.header(3, 0, 1), "k", TypeArray).here().u32(uint32(TypeUint32)).u64(1 << 60).zeros(16)
		}, "k", "array of 1152921504606846976 UINT32"},
		{"string array count past end", func(r *rawBuf) {
			kv(r.header(3, 0, 1), "k", TypeArray).here().u32(uint32(TypeString)).u64(3).str("a").str("b")
		}, "k", "array of 3 STRING"},
		{"string in array past end", func(r *rawBuf) {
			kv(r.header(3, 0, 1), "k", TypeArray).u32(uint32(TypeString)).u64(2).str("a").here().u64(50).zeros(8)
		}, "k[1]", "exceeds"},
		{"array element type unknown", func(r *rawBuf) {
			kv(r.header(3, 0, 1), "k", TypeArray).here().u32(42).u64(0)
		}, "k element", "unknown value type 42"},
		{"arrays nested too deep", func(r *rawBuf) {
			kv(r.header(3, 0, 1), "k", TypeArray)
			for i := 0; i < MaxArrayDepth; i++ {
				if i == MaxArrayDepth-1 {
					r.u32(uint32(TypeArray)).u64(1).here()
				} else {
					r.u32(uint32(TypeArray)).u64(1)
				}
			}
			r.u32(uint32(TypeUint8)).u64(0)
		}, "k[0][0][0]", "nested deeper than 4"},
		{"duplicate key", func(r *rawBuf) {
			kv(r.header(3, 0, 2), "k", TypeUint8).bytes(1)
			r.here()
			kv(r, "k", TypeUint8).bytes(2)
		}, "k", "duplicate key"},
		{"alignment not power of two", func(r *rawBuf) {
			kv(r.header(3, 0, 1), AlignmentKey, TypeUint32).here().u32(48)
		}, AlignmentKey, "not a power of two"},
		{"alignment zero", func(r *rawBuf) {
			kv(r.header(3, 0, 1), AlignmentKey, TypeUint32).here().u32(0)
		}, AlignmentKey, "not a power of two"},
		{"alignment wrong type", func(r *rawBuf) {
			kv(r.header(3, 0, 1), AlignmentKey, TypeUint64).here().u64(32)
		}, AlignmentKey, "must be a UINT32"},
		{"tensor name past end", func(r *rawBuf) { r.header(3, 1, 0).here().u64(1 << 40).zeros(24) }, "tensor[0].name", "exceeds"},
		{"too many dims", func(r *rawBuf) {
			r.header(3, 1, 0).str("t").here().u32(5).zeros(60)
		}, `tensor[0] "t" n_dims`, "5 dims"},
		{"unknown tensor type", func(r *rawBuf) {
			r.header(3, 1, 0).str("t").u32(1).u64(16).here().u32(4).u64(0).pad(32).zeros(64)
		}, `tensor[0] "t" type`, "unknown GGML tensor type 4"},
		{"huge tensor type", func(r *rawBuf) {
			r.header(3, 1, 0).str("t").u32(1).u64(16).here().u32(1 << 31).u64(0).pad(32).zeros(64)
		}, `tensor[0] "t" type`, "unknown GGML tensor type 2147483648"},
		{"dims product overflow", func(r *rawBuf) {
			r.header(3, 1, 0).str("t").here().u32(3).u64(1 << 32).u64(1 << 32).u64(1 << 32).u32(0).u64(0).pad(32)
		}, `tensor[0] "t" dims`, "overflows"},
		{"byte size overflow", func(r *rawBuf) {
			r.header(3, 1, 0).str("t").here().u32(2).u64(1 << 62).u64(1).u32(uint32(TypeF32)).u64(0).pad(32)
		}, `tensor[0] "t" dims`, "overflows"},
		{"partial quant block", func(r *rawBuf) {
			r.header(3, 1, 0).str("t").here().u32(1).u64(33).u32(uint32(TypeQ8_0)).u64(0).pad(32).zeros(68)
		}, `tensor[0] "t" dims`, "block size 32"},
		{"misaligned offset", func(r *rawBuf) {
			r.header(3, 1, 0).str("t").u32(1).u64(16).u32(0).here().u64(4).pad(32).zeros(128)
		}, `tensor "t" offset`, "not a multiple of the alignment 32"},
		{"data past end", func(r *rawBuf) {
			r.header(3, 1, 0).str("t").u32(1).u64(16).u32(0).here().u64(0).pad(32).zeros(63)
		}, `tensor "t" offset`, "runs past the end"},
		{"offset past end", func(r *rawBuf) {
			r.header(3, 1, 0).str("t").u32(1).u64(16).u32(0).here().u64(1 << 20).pad(32).zeros(64)
		}, `tensor "t" offset`, "runs past the end"},
		{"offset wraps around", func(r *rawBuf) {
			r.header(3, 1, 0).str("t").u32(1).u64(16).u32(0).here().u64(^uint64(31)).pad(32).zeros(64)
		}, `tensor "t" offset`, "runs past the end"},
		{"overlapping tensors", func(r *rawBuf) {
			r.header(3, 2, 0).tensor("a", TypeF32, 0, 16).str("b").u32(1).u64(16).u32(0).here().u64(32).pad(32)
			f32x16(r)
			r.zeros(32)
		}, `tensor "b" offset`, `overlaps tensor "a"`},
		{"duplicate tensor name", func(r *rawBuf) {
			r.header(3, 2, 0).tensor("a", TypeF32, 0, 16).here().tensor("a", TypeF32, 64, 16).pad(32).zeros(128)
		}, `tensor[1] "a" name`, "duplicate tensor name"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var r rawBuf
			c.build(&r)
			_, err := Parse(badName, r.b)
			checkFormatError(t, err, c.field, r.mark, c.problem)
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
	for _, part := range []string{"gguf: ", badName, fe.Field, fmt.Sprint(offset)} {
		if !strings.Contains(msg, part) {
			t.Fatalf("message %q lacks %q", msg, part)
		}
	}
}

// TestTruncatedPrefixes parses every strict prefix of a valid file; each
// must fail with a FormatError and never panic.
func TestTruncatedPrefixes(t *testing.T) {
	data := writeBytes(t, allTypesKVs(), sampleTensors(), 0)
	if _, err := Parse(badName, data); err != nil {
		t.Fatal(err)
	}
	for n := 0; n < len(data); n++ {
		_, err := Parse(badName, data[:n])
		var fe *FormatError
		if !errors.As(err, &fe) || fe.File != badName || fe.Field == "" {
			t.Fatalf("prefix %d of %d: err = %v", n, len(data), err)
		}
		if fe.Offset < 0 || fe.Offset > int64(n) {
			t.Fatalf("prefix %d: offset %d outside the input", n, fe.Offset)
		}
	}
}

// TestLyingCountsDoNotAllocate checks that absurd counts and lengths fail
// fast and allocate almost nothing.
func TestLyingCountsDoNotAllocate(t *testing.T) {
	inputs := map[string][]byte{}
	var r rawBuf
	inputs["tensors"] = r.header(3, 1<<60, 0).zeros(64).b
	r = rawBuf{}
	inputs["kvs"] = r.header(3, 0, 1<<60).zeros(64).b
	r = rawBuf{}
	inputs["array"] = r.header(3, 0, 1).str("k").u32(uint32(TypeArray)).u32(uint32(TypeArray)).u64(1 << 62).zeros(64).b
	r = rawBuf{}
	inputs["string"] = r.header(3, 0, 1).str("k").u32(uint32(TypeString)).u64(1 << 62).zeros(64).b
	for name, in := range inputs {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		start := time.Now()
		_, err := Parse(badName, in)
		elapsed := time.Since(start)
		runtime.ReadMemStats(&after)
		if err == nil {
			t.Fatalf("%s: accepted", name)
		}
		if got := after.TotalAlloc - before.TotalAlloc; got > 64<<10 {
			t.Errorf("%s: allocated %d bytes", name, got)
		}
		if elapsed > time.Second {
			t.Errorf("%s: took %v", name, elapsed)
		}
	}
}

func TestZeroTensorFileWithoutPadding(t *testing.T) {
	var r rawBuf
	r.header(2, 0, 1).str("k").u32(uint32(TypeString)).str("v")
	f, err := Parse("v2.gguf", r.b)
	if err != nil {
		t.Fatal(err)
	}
	if f.Version != 2 || len(f.KVs) != 1 || len(f.Tensors) != 0 {
		t.Fatalf("%+v", f)
	}
}
