package cpu

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/kvhost/kvhost/host/device"
)

// TestMapFile: a file range served in place reads the file's bytes from the
// returned pointer (at an offset inside a page), costs what a Malloc of its
// size costs, refuses writes and views outside the range, frees back to
// the exact free figure, and is refused with a typed OOM past the capacity.
func TestMapFile(t *testing.T) {
	data := make([]byte, 4*4096+100)
	for i := range data {
		data[i] = byte(i*7 + i>>8)
	}
	path := filepath.Join(t.TempDir(), "w.bin")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	d := open(t, 64<<20)
	free0, _ := d.MemGetInfo()
	const off, size = 4096 + 1000, 2*4096 + 50 // spans three pages
	p, err := d.MapFile(f, off, size)
	if err != nil {
		t.Fatal(err)
	}
	if free, _ := d.MemGetInfo(); free != free0-3*4096 {
		t.Fatalf("free %d after mapping %d bytes, want %d (a malloc of that size)", free, size, free0-3*4096)
	}
	got, err := d.Bytes(p, size)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, data[off:off+size]) {
		t.Fatal("mapped bytes differ from the file's")
	}
	if err := d.Kernels().Upload(p, []byte{1}); err == nil {
		t.Fatal("upload into a read-only file mapping accepted")
	}
	if _, err := d.Bytes(p-1, 1); err == nil {
		t.Fatal("a view before the mapped range accepted")
	}
	if _, err := d.Bytes(p, size+4096); err == nil {
		t.Fatal("a view past the mapping accepted")
	}
	if err := d.Free(p + 1); err == nil {
		t.Fatal("free of an interior pointer accepted")
	}
	if err := d.Free(p); err != nil {
		t.Fatal(err)
	}
	if free, _ := d.MemGetInfo(); free != free0 {
		t.Fatalf("free %d after unmapping, want %d", free, free0)
	}
	small := open(t, 8192)
	_, err = small.MapFile(f, 0, 3*4096)
	var oom *device.OutOfMemoryError
	if !errors.Is(err, device.ErrOutOfMemory) || !errors.As(err, &oom) || oom.Requested != 3*4096 {
		t.Fatalf("mapping past the capacity: %v", err)
	}
	if _, err := d.MapFile(f, -1, 10); err == nil {
		t.Fatal("negative offset accepted")
	}
}
