package gguf

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"
)

// rawBuf assembles GGUF bytes by hand, independently of Write, so tests can
// state the layout and lie in any field. mark records the offset of the
// field a test expects an error at.
type rawBuf struct {
	b    []byte
	mark int64
}

func (r *rawBuf) here() *rawBuf           { r.mark = int64(len(r.b)); return r }
func (r *rawBuf) bytes(b ...byte) *rawBuf { r.b = append(r.b, b...); return r }
func (r *rawBuf) u32(x uint32) *rawBuf    { r.b = binary.LittleEndian.AppendUint32(r.b, x); return r }
func (r *rawBuf) u64(x uint64) *rawBuf    { r.b = binary.LittleEndian.AppendUint64(r.b, x); return r }
func (r *rawBuf) str(s string) *rawBuf    { return r.u64(uint64(len(s))).bytes([]byte(s)...) }
func (r *rawBuf) header(version uint32, nTensors, nKV uint64) *rawBuf {
	return r.bytes('G', 'G', 'U', 'F').u32(version).u64(nTensors).u64(nKV)
}
func (r *rawBuf) tensor(name string, typ TensorType, off uint64, dims ...uint64) *rawBuf {
	r.str(name).u32(uint32(len(dims)))
	for _, d := range dims {
		r.u64(d)
	}
	return r.u32(uint32(typ)).u64(off)
}
func (r *rawBuf) pad(a int) *rawBuf {
	for len(r.b)%a != 0 {
		r.b = append(r.b, 0)
	}
	return r
}
func (r *rawBuf) zeros(n int) *rawBuf { r.b = append(r.b, make([]byte, n)...); return r }

// repoShared finds ../shared relative to the directory holding go.mod.
func repoShared(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return filepath.Join(dir, "..", "shared")
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the test directory")
		}
		dir = parent
	}
}
