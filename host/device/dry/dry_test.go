package dry

import (
	"strings"
	"testing"

	"github.com/kvhost/kvhost/host/device"
	devcpu "github.com/kvhost/kvhost/host/device/cpu"
)

// TestAddressesDescendAndNeverRepeat: each Malloc lies below the last, a
// gap apart, as the CPU device's top-down mappings do.
func TestAddressesDescendAndNeverRepeat(t *testing.T) {
	d := New(devcpu.Sizer{Threads: 2})
	prev := top
	for _, n := range []int64{1, 4096, 4097, 3 << 20} {
		p, err := d.Malloc(n)
		if err != nil {
			t.Fatal(err)
		}
		if want := prev - device.Ptr((n+4095)/4096*4096) - 1<<20; p != want {
			t.Fatalf("malloc(%d) at %#x, want %#x", n, p, want)
		}
		_ = d.Free(p)
		prev = p
	}
	if _, err := d.Malloc(0); err == nil {
		t.Fatal("malloc of 0 bytes accepted")
	}
	if _, err := d.Bytes(prev, 1); err == nil {
		t.Fatal("a dry device handed out bytes")
	}
}

// TestKernelsCheckShapes: every launch that a real kernel would refuse for
// its shapes is refused, naming the buffer; well-shaped launches pass.
func TestKernelsCheckShapes(t *testing.T) {
	d := New(devcpu.Sizer{Threads: 3})
	k := d.Kernels()
	buf := func(n int) device.Buf { return device.Buf{Ptr: 1 << 20, N: n} }
	w := device.Weight{Ptr: 1 << 30, Rows: 8, Cols: 4}
	kvl := device.KVLayer{KVHeads: 2, HeadDim: 4, VHeadDim: 4}
	shape := device.AttnShape{Heads: 4, KVHeads: 2, HeadDim: 4, VHeadDim: 4}
	scratch := buf(k.AttentionScratch(shape))
	if want := (devcpu.Sizer{Threads: 3}).AttentionScratch(shape); scratch.N != want || want == 0 {
		t.Fatalf("attention scratch %d floats, the CPU sizer says %d", scratch.N, want)
	}
	rope, _ := k.NewRope(device.RopeSpec{HeadDim: 4, RotDim: 4, Theta: 1e4})
	dk := k.(device.DecodeKernels)
	for _, c := range []struct {
		name string
		err  error
		want string // "" for success
	}{
		{"matmul ok", k.MatMul(buf(16), buf(8), 2, w), ""},
		{"matmul short output", k.MatMul(buf(15), buf(8), 2, w), "matmul output holds 15 floats, needs 16"},
		{"matmul short input", k.MatMul(buf(16), buf(7), 2, w), "matmul input"},
		{"add mismatch", k.Add(buf(4), buf(4), buf(3)), "add of 4, 3 into 4"},
		{"rmsnorm weight", k.RMSNorm(buf(8), buf(8), device.Weight{Rows: 1, Cols: 3}, 2, 4, 1e-5), "rmsnorm weight has 3 values for dim 4"},
		{"silu mismatch", k.SiLUMul(buf(4), buf(5), buf(4)), "silu-mul"},
		{"rope positions", k.ApplyRope(rope, buf(16), 2, 2, []int32{0}), "2 rows with 1 positions"},
		{"embedding", k.Embedding(buf(7), w, []int32{1, 2}), "embedding output"},
		{"write kv", k.WriteKV(kvl, buf(8), buf(7), 1, nil, 0), "kv value rows"},
		{"attention ok", k.Attention(buf(32), buf(32), 2, 4, kvl, nil, 0, device.AttnOpts{Scale: 1}, scratch), ""},
		{"attention scratch", k.Attention(buf(32), buf(32), 2, 4, kvl, nil, 0, device.AttnOpts{Scale: 1}, buf(scratch.N-1)), "attention scratch"},
		{"decode tables", dk.DecodeAttention(buf(32), buf(32), 4, kvl, []int32{1, 2}, [][]int32{{0}}, device.AttnOpts{Scale: 1}, scratch, 8), "2 positions, 1 page tables"},
		{"copy to host", k.CopyToHost(make([]float32, 3), buf(4)), "copy of 4 floats"},
		{"copy to nil host slice", k.CopyToHost(nil, buf(4)), ""},
		{"soft cap", k.(device.Elementwise).SoftCap(buf(4), 0), "soft cap 0"},
	} {
		switch {
		case c.want == "" && c.err != nil:
			t.Errorf("%s: %v", c.name, c.err)
		case c.want != "" && (c.err == nil || !strings.Contains(c.err.Error(), c.want)):
			t.Errorf("%s: got %v, want an error containing %q", c.name, c.err, c.want)
		}
	}
}

// TestCaptureOpensAndCloses: a capture brackets launches and yields a
// graph that launches nothing.
func TestCaptureOpensAndCloses(t *testing.T) {
	d := New(devcpu.Sizer{Threads: 1})
	if _, err := d.EndCapture(); err == nil {
		t.Fatal("EndCapture without a capture")
	}
	if err := d.BeginCapture(); err != nil {
		t.Fatal(err)
	}
	if err := d.BeginCapture(); err == nil {
		t.Fatal("nested capture accepted")
	}
	g, err := d.EndCapture()
	if err != nil || g.Launch() != nil || g.Launches() != 0 || g.Close() != nil {
		t.Fatalf("graph %v, %v", g, err)
	}
}
