package cpu

import (
	"errors"
	"testing"

	"github.com/kvhost/kvhost/host/device"
)

func open(t *testing.T, capacity int64) *Device {
	t.Helper()
	d, err := New(device.Options{MemoryBytes: capacity, Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	return d
}

func TestMemGetInfoIsExact(t *testing.T) {
	d := open(t, 64<<20)
	free0, total := d.MemGetInfo()
	if free0 != 64<<20 || total != 64<<20 {
		t.Fatalf("fresh device: free %d total %d", free0, total)
	}
	tests := []struct {
		size, cost int64
	}{{1, 4096}, {4096, 4096}, {4097, 8192}, {3 << 20, 3 << 20}}
	var ptrs []device.Ptr
	want := free0
	for _, tt := range tests {
		p, err := d.Malloc(tt.size)
		if err != nil {
			t.Fatal(err)
		}
		ptrs = append(ptrs, p)
		want -= tt.cost
		if free, _ := d.MemGetInfo(); free != want {
			t.Fatalf("after malloc(%d): free %d, want %d", tt.size, free, want)
		}
	}
	for _, p := range ptrs {
		if err := d.Free(p); err != nil {
			t.Fatal(err)
		}
	}
	if free, _ := d.MemGetInfo(); free != free0 {
		t.Fatalf("after freeing all: free %d, want %d", free, free0)
	}
}

func TestOutOfMemoryIsTyped(t *testing.T) {
	d := open(t, 8<<20)
	if _, err := d.Malloc(6 << 20); err != nil {
		t.Fatal(err)
	}
	_, err := d.Malloc(4 << 20)
	var oom *device.OutOfMemoryError
	if !errors.Is(err, device.ErrOutOfMemory) || !errors.As(err, &oom) {
		t.Fatalf("want typed OOM, got %v", err)
	}
	if oom.Requested != 4<<20 || oom.Free != 2<<20 || oom.Total != 8<<20 {
		t.Fatalf("oom fields %+v", oom)
	}
}

func TestBytesBoundsChecked(t *testing.T) {
	d := open(t, 8<<20)
	p, _ := d.Malloc(10000)
	b, err := d.Bytes(p, 10000)
	if err != nil || len(b) != 10000 {
		t.Fatalf("view: %v len %d", err, len(b))
	}
	b[9999] = 7
	if _, err := d.Bytes(p+100, 1<<20); err == nil {
		t.Fatal("view past the allocation accepted")
	}
	if _, err := d.Bytes(12345, 4); err == nil {
		t.Fatal("view of a wild pointer accepted")
	}
	_ = d.Free(p)
	if _, err := d.Bytes(p, 4); err == nil {
		t.Fatal("view of freed memory accepted")
	}
	if err := d.Free(p); err == nil {
		t.Fatal("double free accepted")
	}
}

func TestVirtualMemory(t *testing.T) {
	d := open(t, 16<<20)
	base, err := d.Reserve(64 << 20) // more than capacity: address space only
	if err != nil {
		t.Fatal(err)
	}
	if free, _ := d.MemGetInfo(); free != 16<<20 {
		t.Fatalf("reservation consumed memory: free %d", free)
	}
	if _, err := d.Bytes(base, 16); err == nil {
		t.Fatal("unmapped reservation readable")
	}
	if err := d.Map(base, 0, 4<<20); err != nil {
		t.Fatal(err)
	}
	if err := d.Map(base, 0, 4<<20); err != nil { // idempotent, no double charge
		t.Fatal(err)
	}
	if free, _ := d.MemGetInfo(); free != 12<<20 {
		t.Fatalf("after mapping 4 MiB free %d", free)
	}
	b, err := d.Bytes(base+4<<20-8, 8)
	if err != nil {
		t.Fatal(err)
	}
	b[0] = 1
	if _, err := d.Bytes(base+4<<20-8, 16); err == nil {
		t.Fatal("read across into an unmapped granule accepted")
	}
	if err := d.Map(base, 1<<20, 2<<20); err == nil {
		t.Fatal("unaligned map accepted")
	}
	err = d.Map(base, 4<<20, 14<<20)
	if !errors.Is(err, device.ErrOutOfMemory) {
		t.Fatalf("mapping past capacity: %v", err)
	}
	if err := d.Release(base); err != nil {
		t.Fatal(err)
	}
	if free, _ := d.MemGetInfo(); free != 16<<20 {
		t.Fatalf("after release free %d", free)
	}
}

func TestDefaultMemory(t *testing.T) {
	m := DefaultMemory()
	if m <= 0 || m > 8<<30 {
		t.Fatalf("default memory %d", m)
	}
}

func TestRegistered(t *testing.T) {
	d, err := device.Open(Kind, device.Options{MemoryBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if d.Info().Kind != "cpu" {
		t.Fatal(d.Info())
	}
	if _, err := device.Open("tpu", device.Options{}); err == nil {
		t.Fatal("unknown kind opened")
	}
}
