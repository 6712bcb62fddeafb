package ledger

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/kvhost/kvhost/host/alloc"
	"github.com/kvhost/kvhost/host/device"
	"github.com/kvhost/kvhost/host/device/cpu"
)

// TestFileBackedWeightsBalance: weights mapped from a file in place are
// metered, tallied and phased like allocations of their size, so both
// invariants hold to the byte; freeing them gives the bytes back.
func TestFileBackedWeightsBalance(t *testing.T) {
	dev, err := cpu.New(device.Options{MemoryBytes: 64 << 20, Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	path := filepath.Join(t.TempDir(), "weights.bin")
	if err := os.WriteFile(path, make([]byte, 64<<10), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	l := New(dev, nil)
	l.Phase("device init")
	w, src := NewDirect("weights", dev, DevicePage(dev.Info()))
	l.AddSource(src)
	if !w.CanMapFiles() {
		t.Fatal("a metered CPU device cannot map files")
	}
	p1, err := w.MapFile(f, 96, 5000, alloc.Weights) // 5000 bytes at an unaligned offset
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Alloc(100, alloc.Weights); err != nil {
		t.Fatal(err)
	}
	ph := l.Phase("weights")
	if want := int64(8192 + 4096); ph.Delta != want || src.M.DeviceBytes() != want {
		t.Fatalf("phase delta %d, metered %d; want %d", ph.Delta, src.M.DeviceBytes(), want)
	}
	s := l.Snapshot()
	if err := Check(s); err != nil {
		t.Fatal(err)
	}
	for _, u := range s.Allocators {
		if u.Name == "weights" && (u.Categories["weights"] != 5100 || u.Rounding != 8192+4096-5100) {
			t.Fatalf("weights usage %+v", u)
		}
	}
	if err := w.Free(p1); err != nil {
		t.Fatal(err)
	}
	if src.M.DeviceBytes() != 4096 {
		t.Fatalf("metered %d after unmapping", src.M.DeviceBytes())
	}
	// A device without the capability: the allocator says so.
	plain := alloc.NewDirect("plain", mallocOnly{dev})
	if plain.CanMapFiles() {
		t.Fatal("a Malloc-only driver claims to map files")
	}
	if _, err := plain.MapFile(f, 0, 10, alloc.Weights); err == nil {
		t.Fatal("mapping through a Malloc-only driver succeeded")
	}
}

// mallocOnly hides the device's other capabilities.
type mallocOnly struct{ d device.Device }

func (m mallocOnly) Malloc(n int64) (device.Ptr, error) { return m.d.Malloc(n) }
func (m mallocOnly) Free(p device.Ptr) error            { return m.d.Free(p) }
