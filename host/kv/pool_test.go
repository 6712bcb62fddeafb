package kv_test

import (
	"errors"
	"testing"

	"github.com/kvhost/kvhost/host/alloc"
	"github.com/kvhost/kvhost/host/device"
	"github.com/kvhost/kvhost/host/device/cpu"
	"github.com/kvhost/kvhost/host/kv"
	"github.com/kvhost/kvhost/host/kv/kvtest"
	"github.com/kvhost/kvhost/sdk"
)

func newDevice(t *testing.T, mem int64) *cpu.Device {
	t.Helper()
	dev, err := cpu.New(device.Options{MemoryBytes: mem, Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dev.Close() })
	return dev
}

func TestPoolPages(t *testing.T) {
	dev := newDevice(t, 64<<20)
	d := alloc.NewDirect("kv", dev)
	needs := kvtest.Uniform(2, 2, 8)
	s := kvtest.MHA(t, d, needs, sdk.KVFP32, 4, 10)
	// The arena is exactly the declared cells: 40 tokens × 2 layers × (K+V)
	// × 2 heads × 8 × 4 bytes, in one allocation per buffer.
	if _, total := d.Bytes(); total != s.Bytes() || s.Bytes() != 40*s.Layout().Pools[0].UnitBytes {
		t.Fatalf("arena bytes %d, set %d", total, s.Bytes())
	}
	p := s.TokenPools()[0]
	a, err := p.Grow(nil, 9) // 3 pages
	if err != nil || len(a) != 3 {
		t.Fatalf("grow: %v %v", a, err)
	}
	a, _ = p.Grow(a, 12) // still 3 pages
	if len(a) != 3 {
		t.Fatalf("grow within a page took a page: %v", a)
	}
	b, err := p.Grow(nil, 40)
	if !errors.Is(err, kv.ErrNoPages) || len(b) != 0 || p.FreePages() != 7 {
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
	s.Close()
	if _, total := d.Bytes(); total != 0 {
		t.Fatal("arena leaked")
	}
}

func TestShareRefcounts(t *testing.T) {
	dev := newDevice(t, 16<<20)
	s := kvtest.MHA(t, alloc.NewDirect("kv", dev), kvtest.Uniform(1, 1, 4), sdk.KVFP32, 2, 4)
	p := s.TokenPools()[0]
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

// TestUnshareCopiesEveryBuffer writes a known pattern into a shared page of
// every buffer (values and block scales of an mxfp8 pool) and checks that
// copy-on-write gives the writer a private page with the same bytes.
func TestUnshareCopiesEveryBuffer(t *testing.T) {
	dev := newDevice(t, 16<<20)
	needs := kvtest.Uniform(2, 1, 32)
	s := kvtest.MHA(t, alloc.NewDirect("kv", dev), needs, sdk.KVMXFP8, 4, 6)
	p := s.TokenPools()[0]
	a, _ := p.Grow(nil, 6) // 2 pages
	for l := range needs {
		kl := s.Layer(l)
		for _, sp := range []device.Span{kl.K, kl.V, kl.KScale, kl.VScale} {
			buf, err := dev.Bytes(sp.Ptr, sp.Bytes)
			if err != nil {
				t.Fatal(err)
			}
			for i := range buf {
				buf[i] = byte(i*7 + l)
			}
		}
	}
	b := p.Share(a)
	if err := p.Unshare(b, 1, dev.Kernels()); err != nil {
		t.Fatal(err)
	}
	if b[1] == a[1] || b[0] != a[0] || p.Shared(a[1]) || !p.Shared(a[0]) {
		t.Fatalf("unshare: a %v b %v", a, b)
	}
	for l := range needs {
		kl := s.Layer(l)
		for _, sp := range []device.Span{kl.K, kl.V, kl.KScale, kl.VScale} {
			row := sp.Bytes / int64(kl.Slots)
			buf, _ := dev.Bytes(sp.Ptr, sp.Bytes)
			page := 4 * row
			src, dst := buf[int64(a[1])*page:int64(a[1]+1)*page], buf[int64(b[1])*page:int64(b[1]+1)*page]
			if string(src) != string(dst) {
				t.Fatalf("layer %d: page %d not copied to %d (row %d bytes)", l, a[1], b[1], row)
			}
		}
	}
	p.Release(a)
	p.Release(b)
	if p.FreePages() != 6 {
		t.Fatalf("%d free pages after release, want 6", p.FreePages())
	}
}

// TestWindowTrim: a sliding-window pool gives back the pages that fall out
// of the window, holds at most MaxPages, and Release/Share skip what it
// gave back.
func TestWindowTrim(t *testing.T) {
	dev := newDevice(t, 16<<20)
	needs := kvtest.Uniform(2, 1, 4)
	for i := range needs {
		needs[i].Window = 8
	}
	decl, err := kvtest.DeclareMHA(needs, sdk.KVFP32, 4)
	if err != nil {
		t.Fatal(err)
	}
	decl[0].Kind, decl[0].Window = sdk.SlidingWindow, 8
	s := kvtest.Set(t, alloc.NewDirect("kv", dev), decl, needs, 16)
	p := s.TokenPools()[0]
	var table []int32
	const chunk = 4
	for pos := 0; pos < 40; pos += chunk {
		// The engine's order: trim to what the next forward reads, then
		// grow to cover the chunk it writes.
		p.Trim(table, pos-p.Window()+1)
		if table, err = p.Grow(table, pos+chunk); err != nil {
			t.Fatal(err)
		}
		held := 0
		for _, pg := range table {
			if pg != kv.Released {
				held++
			}
		}
		if held > p.MaxPages(pos+chunk, chunk) || 16-p.FreePages() != held {
			t.Fatalf("at %d: %d pages held (%d out of the free list), MaxPages %d", pos, held, 16-p.FreePages(), p.MaxPages(pos+chunk, chunk))
		}
	}
	if p.MaxPages(40, chunk) != (8-1+chunk)/4+2 {
		t.Fatalf("MaxPages %d", p.MaxPages(40, chunk))
	}
	fork := p.Share(table)
	p.Release(table)
	p.Release(fork)
	if p.FreePages() != 16 {
		t.Fatalf("%d free after releasing a trimmed table and its fork", p.FreePages())
	}
	// A full pool never trims.
	full := kvtest.MHA(t, alloc.NewDirect("kv2", dev), kvtest.Uniform(1, 1, 4), sdk.KVFP32, 4, 4).TokenPools()[0]
	tb, _ := full.Grow(nil, 16)
	if full.Trim(tb, 12) != 0 || full.MaxPages(16, 4) != 4 {
		t.Fatal("a full pool trimmed")
	}
	full.Release(tb)
}

func TestSlotPool(t *testing.T) {
	dev := newDevice(t, 16<<20)
	needs := []kv.LayerNeed{{KVHeads: 1, HeadDim: 4, VHeadDim: 4}, {State: true}}
	decl, err := kvtest.DeclareMHA(needs[:1], sdk.KVFP32, 1)
	if err != nil {
		t.Fatal(err)
	}
	decl = append(decl, sdk.Pool{Name: "state", Kind: sdk.RecurrentState, PageSize: 1, BytesPerUnit: 48, Buffers: []sdk.Buffer{
		{Pool: "state", Name: "conv", Role: sdk.RoleConv, Layer: 1, Shape: []int64{4, 2}, DType: "bf16"},
		{Pool: "state", Name: "ssm", Role: sdk.RoleSSM, Layer: 1, Shape: []int64{8}, DType: "fp32"},
	}})
	s := kvtest.Set(t, alloc.NewDirect("kv", dev), decl, needs, 3)
	if len(s.SlotPools()) != 1 || s.Table(0) != 0 || s.Table(1) != -1 {
		t.Fatalf("pools %d, tables %d %d", len(s.SlotPools()), s.Table(0), s.Table(1))
	}
	st, ok := s.State(1)
	if !ok || st.ConvBytes != 16 || st.SSMBytes != 32 || st.Conv.Bytes != 48 || st.SSM.Bytes != 96 {
		t.Fatalf("state %+v %v", st, ok)
	}
	if _, ok := s.State(0); ok {
		t.Fatal("attention layer has state")
	}
	sp := s.SlotPools()[0]
	a, _ := sp.Acquire()
	b, _ := sp.Acquire()
	c, _ := sp.Acquire()
	if _, err := sp.Acquire(); !errors.Is(err, kv.ErrNoSlots) || a == b || b == c {
		t.Fatalf("slots %d %d %d, fourth: %v", a, b, c, err)
	}
	buf, _ := dev.Bytes(st.SSM.Ptr, st.SSM.Bytes)
	for i := range buf {
		buf[i] = byte(i)
	}
	if err := sp.Copy(dev.Kernels(), a, c); err != nil {
		t.Fatal(err)
	}
	if string(buf[int64(c)*32:int64(c+1)*32]) != string(buf[int64(a)*32:int64(a+1)*32]) {
		t.Fatal("state not copied")
	}
	sp.Release(b)
	if sp.FreeSlots() != 1 {
		t.Fatal("release did not free")
	}
	stats := s.Stats()
	if stats[1].Unit != "request" || stats[1].Slots != 3 || stats[1].UsedSlots != 2 || stats[1].Bytes != 3*48 {
		t.Fatalf("state stat %+v", stats[1])
	}
	defer func() {
		if recover() == nil {
			t.Fatal("double release not detected")
		}
	}()
	sp.Release(b)
}

// TestSplitPools: two pools holding alternate layers give each layer its
// own pool's table and the same device view as one pool would.
func TestSplitPools(t *testing.T) {
	dev := newDevice(t, 32<<20)
	needs := kvtest.Uniform(4, 2, 8)
	decl, err := kvtest.DeclareMHA(needs, sdk.KVBF16, 16)
	if err != nil {
		t.Fatal(err)
	}
	s := kvtest.Set(t, alloc.NewDirect("kv", dev), kvtest.Split(decl, func(l int) bool { return l%2 == 1 }), needs, 8)
	if len(s.TokenPools()) != 2 {
		t.Fatalf("%d token pools", len(s.TokenPools()))
	}
	for l := range needs {
		if s.Table(l) != l%2 {
			t.Errorf("layer %d in pool %d", l, s.Table(l))
		}
		if kl := s.Layer(l); kl.DType != device.KVBF16 || kl.Slots != 128 || kl.K.Bytes != 128*2*8*2 {
			t.Errorf("layer %d: %+v", l, kl)
		}
	}
	st := s.Stats()
	if st[0].Name != "kv" || st[1].Name != "hi" || st[0].CellBytes != 2*2*2*8*2 || st[1].CapacityTokens != 128 || st[0].DType != "bf16" {
		t.Fatalf("stats %+v", st)
	}
}
