package kv

import (
	"errors"
	"testing"

	"github.com/kvhost/kvhost/host/alloc"
	"github.com/kvhost/kvhost/host/device"
	"github.com/kvhost/kvhost/host/device/cpu"
)

func TestPoolPages(t *testing.T) {
	dev, err := cpu.New(device.Options{MemoryBytes: 64 << 20, Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	d := alloc.NewDirect("kv", dev)
	spec := Spec{Layers: 2, KVHeads: 2, HeadDim: 8, PageSize: 4, NumPages: 10}
	p, err := New(spec, d)
	if err != nil {
		t.Fatal(err)
	}
	if _, total := d.Bytes(); total != spec.Bytes() {
		t.Fatalf("arena bytes %d, want %d", total, spec.Bytes())
	}
	a, err := p.Grow(nil, 9) // 3 pages
	if err != nil || len(a) != 3 {
		t.Fatalf("grow: %v %v", a, err)
	}
	a, _ = p.Grow(a, 12) // still 3 pages
	if len(a) != 3 {
		t.Fatalf("grow within a page took a page: %v", a)
	}
	b, err := p.Grow(nil, 40)
	if !errors.Is(err, ErrNoPages) || len(b) != 0 || p.FreePages() != 7 {
		t.Fatalf("over-ask must take nothing: %v %v free %d", b, err, p.FreePages())
	}
	seen := map[int32]bool{}
	for _, pg := range a {
		if seen[pg] {
			t.Fatal("page handed out twice")
		}
		seen[pg] = true
	}
	p.Release(a)
	if p.FreePages() != 10 {
		t.Fatalf("free %d after release", p.FreePages())
	}
	p.Close()
	if _, total := d.Bytes(); total != 0 {
		t.Fatal("arena leaked")
	}
	if err := (Spec{Layers: 1, KVHeads: 1, HeadDim: 1, PageSize: 1}).Validate(); err == nil {
		t.Fatal("zero pages accepted")
	}
}

func TestShareRefcounts(t *testing.T) {
	dev, err := cpu.New(device.Options{MemoryBytes: 16 << 20, Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	p, err := New(Spec{Layers: 1, KVHeads: 1, HeadDim: 4, PageSize: 2, NumPages: 4}, alloc.NewDirect("kv", dev))
	if err != nil {
		t.Fatal(err)
	}
	a, _ := p.Grow(nil, 4)
	b := p.Share(a)
	if !p.Shared(a[0]) || p.FreePages() != 2 {
		t.Fatal("share did not count")
	}
	p.Release(a)
	if p.FreePages() != 2 || p.Shared(b[0]) {
		t.Fatal("pages freed while still shared")
	}
	p.Release(b)
	if p.FreePages() != 4 {
		t.Fatal("pages not freed by the last holder")
	}
	defer func() {
		if recover() == nil {
			t.Fatal("double release not detected")
		}
	}()
	p.Release(b)
}
