package alloc

import (
	"encoding/json"
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/kvhost/kvhost/host/device"
)

// fakeDriver hands out addresses from a counter and enforces a capacity, so
// allocator tests run without any real memory.
type fakeDriver struct {
	capacity, used int64
	next           device.Ptr
	live           map[device.Ptr]int64
	mallocs        int
}

func newFake(capacity int64) *fakeDriver {
	return &fakeDriver{capacity: capacity, next: 1 << 32, live: map[device.Ptr]int64{}}
}

func (f *fakeDriver) Malloc(size int64) (device.Ptr, error) {
	if f.used+size > f.capacity {
		return 0, &device.OutOfMemoryError{Device: "fake", Requested: size, Free: f.capacity - f.used, Total: f.capacity}
	}
	p := f.next
	f.next += device.Ptr(size + 4096)
	f.used += size
	f.live[p] = size
	f.mallocs++
	return p, nil
}

func (f *fakeDriver) Free(p device.Ptr) error {
	size, ok := f.live[p]
	if !ok {
		return errors.New("fake: bad free")
	}
	delete(f.live, p)
	f.used -= size
	return nil
}

func mustCheck(t *testing.T, a *Allocator) {
	t.Helper()
	if err := a.check(); err != nil {
		t.Fatal(err)
	}
}

// TestSpecV12 reproduces the allocator rounding vectors of spec §7 V12.
func TestSpecV12(t *testing.T) {
	tests := []struct {
		name               string
		request            int64
		wantBlock, wantSeg int64
		wantCachedRest     int64
	}{
		{"1000 B in a 2 MiB small segment", 1000, 1024, 2 << 20, 2<<20 - 1024},
		{"4 104 192 B split from a 20 MiB segment", 4104192, 4104192, 20 << 20, 16867328},
		{"131 334 144 B: 786 432 B rest is not split", 131334144, 132120576, 132120576, 0},
		{"V3 K buffer", 873799680, 874512384, 874512384, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := New("test", newFake(1<<40))
			if _, err := a.Alloc(tt.request, KVCache); err != nil {
				t.Fatal(err)
			}
			st := a.Stats()
			if st.Allocated != tt.wantBlock || st.Reserved != tt.wantSeg {
				t.Fatalf("allocated %d reserved %d, want %d %d", st.Allocated, st.Reserved, tt.wantBlock, tt.wantSeg)
			}
			if st.Reserved-st.Allocated != tt.wantCachedRest {
				t.Fatalf("cached rest %d, want %d", st.Reserved-st.Allocated, tt.wantCachedRest)
			}
			mustCheck(t, a)
		})
	}
	// 64 such K/V buffers cost 45 613 056 B more than the tensors (V12).
	a := New("kv", newFake(1<<46))
	for range 64 {
		if _, err := a.Alloc(873799680, KVCache); err != nil {
			t.Fatal(err)
		}
	}
	if st := a.Stats(); st.Allocated-st.Requested != 45613056 {
		t.Fatalf("rounding overhead %d, want 45613056", st.Allocated-st.Requested)
	}
}

func TestReuseSplitMerge(t *testing.T) {
	f := newFake(1 << 30)
	a := New("test", f)
	p1, _ := a.Alloc(100_000, Activations)
	p2, _ := a.Alloc(200_000, Activations)
	p3, _ := a.Alloc(300_000, Activations)
	if f.mallocs != 1 {
		t.Fatalf("three small blocks took %d segments, want 1", f.mallocs)
	}
	if p2 != p1+device.Ptr(RoundSize(100_000)) || p3 != p2+device.Ptr(RoundSize(200_000)) {
		t.Fatalf("blocks not carved in order: %#x %#x %#x", p1, p2, p3)
	}
	mustCheck(t, a)
	for _, p := range []device.Ptr{p2, p1, p3} {
		if err := a.Free(p); err != nil {
			t.Fatal(err)
		}
		mustCheck(t, a)
	}
	snap := a.Snapshot()
	if len(snap.Segments) != 1 || len(snap.Segments[0].Blocks) != 1 {
		t.Fatalf("after freeing everything the segment should be one free block: %+v", snap.Segments)
	}
	// The cached segment is reused without a new malloc.
	if _, err := a.Alloc(500_000, Activations); err != nil || f.mallocs != 1 {
		t.Fatalf("reuse: err %v, mallocs %d", err, f.mallocs)
	}
}

func TestDoubleFree(t *testing.T) {
	a := New("test", newFake(1<<30))
	p, _ := a.Alloc(4096, Activations)
	if err := a.Free(p); err != nil {
		t.Fatal(err)
	}
	if err := a.Free(p); err == nil {
		t.Fatal("double free accepted")
	}
	if err := a.Free(p + 512); err == nil {
		t.Fatal("free of an interior address accepted")
	}
}

func TestEmptyCacheAndPeak(t *testing.T) {
	f := newFake(1 << 30)
	a := New("test", f)
	p, _ := a.Alloc(30<<20, Activations)
	q, _ := a.Alloc(1<<10, Metadata)
	if err := a.Free(p); err != nil {
		t.Fatal(err)
	}
	if f.used != 30<<20+2<<20 {
		t.Fatalf("driver holds %d", f.used)
	}
	if err := a.EmptyCache(); err != nil {
		t.Fatal(err)
	}
	if f.used != 2<<20 {
		t.Fatalf("after EmptyCache the driver holds %d, want the live small segment only", f.used)
	}
	st := a.Stats()
	if st.PeakAllocated != 30<<20+1024 || st.Allocated != 1024 || st.ByCategory[Metadata] != 1024 || st.PeakRequest != 30<<20 {
		t.Fatalf("stats %+v", st)
	}
	a.ResetPeak()
	if st := a.Stats(); st.PeakAllocated != 1024 || st.PeakRequest != 0 {
		t.Fatalf("ResetPeak did not reset: %+v", st)
	}
	r, _ := a.Alloc(5000, Activations)
	if got := a.Stats().PeakRequest; got != 5000 {
		t.Fatalf("peak request after ResetPeak and a 5000-byte request: %d", got)
	}
	_ = a.Free(r)
	_ = a.Free(q)
	mustCheck(t, a)
}

func TestOOMRetriesAfterEmptyingCache(t *testing.T) {
	f := newFake(64 << 20)
	a := New("test", f)
	p, err := a.Alloc(40<<20, Activations)
	if err != nil {
		t.Fatal(err)
	}
	_ = a.Free(p) // cached, not returned
	if _, err := a.Alloc(50<<20, Activations); err != nil {
		t.Fatalf("allocation should succeed after the cache is emptied: %v", err)
	}
	_, err = a.Alloc(30<<20, Activations)
	var oom *OutOfMemoryError
	if !errors.As(err, &oom) || !errors.Is(err, device.ErrOutOfMemory) {
		t.Fatalf("want a typed OOM, got %v", err)
	}
	var dev *device.OutOfMemoryError
	if !errors.As(err, &dev) || dev.Requested != 30<<20 || dev.Free != 14<<20 {
		t.Fatalf("device OOM should carry requested/free: %+v", dev)
	}
	if st := a.Stats(); st.NumOOMs != 1 || st.NumAllocRetries != 2 {
		t.Fatalf("counters %+v", st)
	}
	mustCheck(t, a)
}

func TestPrivatePool(t *testing.T) {
	f := newFake(1 << 30)
	a := New("test", f)
	pool := a.NewPrivatePool("graphs")
	// Largest first: the smaller allocations reuse the big one's blocks.
	big, _ := a.AllocIn(pool, 16<<20, Graph)
	_ = a.Free(big)
	small, _ := a.AllocIn(pool, 8<<20, Graph)
	if got := a.PoolReserved(pool); got != 16<<20 {
		t.Fatalf("pool reserved %d, want the largest bucket's 16 MiB segment only", got)
	}
	// General allocations never take private blocks.
	g, _ := a.Alloc(1<<20+512, Activations)
	if a.PoolReserved(0) == 0 {
		t.Fatal("general allocation landed in the private pool")
	}
	_ = a.EmptyCache() // must not touch the private pool
	if a.PoolReserved(pool) != 16<<20 {
		t.Fatal("EmptyCache released private memory")
	}
	if err := a.ReleasePool(pool); err == nil {
		t.Fatal("released a pool with a live block")
	}
	_ = a.Free(small)
	if err := a.ReleasePool(pool); err != nil {
		t.Fatal(err)
	}
	_ = a.Free(g)
	mustCheck(t, a)
}

func TestRandomStress(t *testing.T) {
	f := newFake(512 << 20)
	a := New("stress", f)
	rng := rand.New(rand.NewPCG(1, 2))
	live := map[device.Ptr]bool{}
	for i := range 5000 {
		if len(live) > 0 && rng.IntN(2) == 0 {
			for p := range live {
				if err := a.Free(p); err != nil {
					t.Fatal(err)
				}
				delete(live, p)
				break
			}
		} else {
			size := int64(rng.IntN(3 << 20))
			if rng.IntN(10) == 0 {
				size = int64(rng.IntN(40 << 20))
			}
			p, err := a.Alloc(size+1, Category(rng.IntN(int(numCategories))))
			if err != nil {
				if errors.Is(err, device.ErrOutOfMemory) {
					continue
				}
				t.Fatal(err)
			}
			if live[p] {
				t.Fatalf("address %#x handed out twice", p)
			}
			live[p] = true
		}
		if i%97 == 0 {
			mustCheck(t, a)
		}
	}
	for p := range live {
		_ = a.Free(p)
	}
	_ = a.EmptyCache()
	if st := a.Stats(); st.Allocated != 0 || st.Reserved != 0 || f.used != 0 {
		t.Fatalf("leak: %+v, driver %d", st, f.used)
	}
}

func TestSnapshotJSON(t *testing.T) {
	a := New("test", newFake(1<<30))
	_, _ = a.Alloc(1000, Workspace)
	b, err := json.Marshal(a.Snapshot())
	if err != nil {
		t.Fatal(err)
	}
	var back Snapshot
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if len(back.Segments) != 1 || back.Segments[0].Blocks[0].Category != "workspace" || back.Segments[0].SegmentType != "small" {
		t.Fatalf("snapshot %s", b)
	}
}

// TestSteadyStateDoesNotAllocate: once a pattern of allocations and frees
// has run (a forward's activations), repeating it allocates nothing on the
// Go heap — split reuses the block records merge gave back — and leaves
// the cache as it was.
func TestSteadyStateDoesNotAllocate(t *testing.T) {
	a := New("caching", newFake(1<<30))
	step := func() {
		var ps []device.Ptr
		for _, n := range []int64{3000, 70000, 512, 1 << 20, 5 << 20, 12345} {
			p, err := a.Alloc(n, Activations)
			if err != nil {
				t.Fatal(err)
			}
			ps = append(ps, p)
		}
		for i := len(ps) - 1; i >= 0; i -= 2 {
			if err := a.Free(ps[i]); err != nil {
				t.Fatal(err)
			}
		}
		for i := len(ps) - 2; i >= 0; i -= 2 {
			if err := a.Free(ps[i]); err != nil {
				t.Fatal(err)
			}
		}
	}
	step()
	before := a.Stats()
	if n := testing.AllocsPerRun(20, func() {
		p1, _ := a.Alloc(3000, Activations)
		p2, _ := a.Alloc(70000, Activations)
		p3, _ := a.Alloc(5<<20, Activations)
		_ = a.Free(p2)
		_ = a.Free(p1)
		_ = a.Free(p3)
	}); n != 0 {
		t.Fatalf("%v heap allocations per alloc/free round", n)
	}
	if after := a.Stats(); after.Reserved != before.Reserved || after.Allocated != 0 {
		t.Fatalf("cache changed: before %+v after %+v", before, after)
	}
}
