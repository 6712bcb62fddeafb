package ledger

import (
	"encoding/json"
	"net/http/httptest"
	"testing"

	"github.com/kvhost/kvhost/host/alloc"
	"github.com/kvhost/kvhost/host/device"
	"github.com/kvhost/kvhost/host/device/cpu"
)

func TestLedgerOnCPUDevice(t *testing.T) {
	dev, err := cpu.New(device.Options{MemoryBytes: 64 << 20, Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	l := New(dev, nil)
	l.Phase("device init")
	w, src := NewDirect("weights", dev, DevicePage(dev.Info()))
	l.AddSource(src)
	for _, n := range []int64{1, 4096, 4097, 100000} {
		if _, err := w.Alloc(n, alloc.Weights); err != nil {
			t.Fatal(err)
		}
	}
	a := alloc.New("caching", dev)
	l.AddSource(Caching{A: a})
	l.SetRuntime(a)
	p1, _ := a.Alloc(1000, alloc.Activations)
	pool := a.NewPrivatePool("decode")
	if _, err := a.AllocIn(pool, 3<<20, alloc.Graph); err != nil {
		t.Fatal(err)
	}
	ph := l.Phase("weights")
	// Device-level cost of the direct allocations: whole 4 KiB pages.
	wantW := int64(4096 + 4096 + 8192 + 102400)
	if src.M.DeviceBytes() != wantW {
		t.Fatalf("metered %d, want %d", src.M.DeviceBytes(), wantW)
	}
	if ph.Delta != wantW+2<<20+20<<20 {
		t.Fatalf("phase delta %d", ph.Delta)
	}
	_ = a.Free(p1)
	s := l.Snapshot()
	if err := Check(s); err != nil {
		t.Fatal(err)
	}
	if s.Outside() != 0 {
		t.Fatalf("outside %d", s.Outside())
	}
	byName := map[string]Usage{}
	for _, u := range s.Allocators {
		byName[u.Name] = u
	}
	if u := byName["weights"]; u.Rounding != wantW-(1+4096+4097+100000) || u.Categories["weights"] != 1+4096+4097+100000 {
		t.Fatalf("weights usage %+v", u)
	}
	if u := byName["caching"]; u.DeviceBytes != 2<<20 || u.Cached != 2<<20 {
		t.Fatalf("general pool %+v", u)
	}
	if u := byName["caching/decode"]; u.Kind != KindGraphPool || u.Categories["graph"] != 3<<20 || u.Cached != 17<<20 {
		t.Fatalf("graph pool %+v", u)
	}
	if s.Runtime == nil || s.Runtime.PeakAllocatedBytes != 1024+3<<20 {
		t.Fatalf("runtime %+v", s.Runtime)
	}
	// A tampered snapshot must fail each invariant.
	bad := s
	bad.Phases = append([]Phase(nil), s.Phases...)
	bad.Phases[1].FreeAfter--
	if Check(bad) == nil {
		t.Fatal("broken phase chain accepted")
	}
	bad = s
	bad.FreeBytes -= 4096
	if Check(bad) == nil {
		t.Fatal("unexplained device bytes accepted")
	}

	rec := httptest.NewRecorder()
	l.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/v1/memory", nil))
	var back Snapshot
	if err := json.Unmarshal(rec.Body.Bytes(), &back); err != nil || rec.Code != 200 {
		t.Fatalf("GET: %d %v", rec.Code, err)
	}
	if len(back.Phases) != 2 || back.Allocators[len(back.Allocators)-1].Kind != KindOutside {
		t.Fatalf("json %s", rec.Body.String())
	}
	rec = httptest.NewRecorder()
	l.Handler().ServeHTTP(rec, httptest.NewRequest("POST", "/v1/memory", nil))
	if rec.Code != 405 {
		t.Fatalf("POST got %d", rec.Code)
	}
}

func TestDirectCost(t *testing.T) {
	for _, tt := range []struct{ n, page, want int64 }{{1, 4096, 4096}, {4096, 4096, 4096}, {4097, 4096, 8192}, {5, 1, 5}, {3 << 20, 2 << 20, 4 << 20}} {
		if got := DirectCost(tt.n, tt.page); got != tt.want {
			t.Errorf("DirectCost(%d, %d) = %d, want %d", tt.n, tt.page, got, tt.want)
		}
	}
}
