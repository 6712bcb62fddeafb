package cpu

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/kvhost/kvhost/host/device"
	kcpu "github.com/kvhost/kvhost/kernels/cpu"
)

// newKVLayer allocates a KV layer of any encoding over the device's memory:
// K, V and their scale spans sized for slots rows as device.KVDType says.
func newKVLayer(t *testing.T, d *Device, dt device.KVDType, slots, ps, kvHeads, hd, vhd int, vInK bool) device.KVLayer {
	t.Helper()
	kv := device.KVLayer{DType: dt, Slots: slots, PageSize: ps, KVHeads: kvHeads, HeadDim: hd, VHeadDim: vhd, VInK: vInK}
	span := func(bytes int64) device.Span {
		if bytes == 0 {
			return device.Span{}
		}
		p, err := d.Malloc(bytes)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = d.Free(p) })
		return device.Span{Ptr: p, Bytes: bytes}
	}
	n := int64(slots)
	kv.K = span(n * dt.RowBytes(kv.KRowElems()))
	kv.KScale = span(n * dt.ScaleBytes(kv.KRowElems()))
	if !vInK {
		kv.V = span(n * dt.RowBytes(kv.VRowElems()))
		kv.VScale = span(n * dt.ScaleBytes(kv.VRowElems()))
	}
	if err := kv.Validate(); err != nil {
		t.Fatal(err)
	}
	return kv
}

// upload copies floats into a fresh device buffer.
func upload(t *testing.T, d *Device, v []float32) device.Buf {
	t.Helper()
	p, err := d.Malloc(int64(max(1, len(v))) * 4)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Free(p) })
	b := device.Buf{Ptr: p, N: len(v)}
	if err := d.Kernels().CopyFromHost(b, v); err != nil {
		t.Fatal(err)
	}
	return b
}

func download(t *testing.T, d *Device, b device.Buf) []float32 {
	t.Helper()
	out := make([]float32, b.N)
	if err := d.Kernels().CopyToHost(out, b); err != nil {
		t.Fatal(err)
	}
	return out
}

func randFloats(r *rand.Rand, n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(r.Float64()*2 - 1)
	}
	return v
}

// TestKVDTypesMatchKernels: the seam's encodings are the kernels', by
// number, name and size.
func TestKVDTypesMatchKernels(t *testing.T) {
	for _, dt := range device.KVDTypes() {
		kt := kcpu.KVType(dt)
		if kt.String() != dt.String() || kt.ScaleBlock() != dt.ScaleBlock() {
			t.Fatalf("%v: kernels say %v with block %d, device block %d", dt, kt, kt.ScaleBlock(), dt.ScaleBlock())
		}
		for n := 32; n <= 1024; n += 32 {
			if int64(kt.RowBytes(n)) != dt.RowBytes(n) || int64(kt.ScaleBytes(n)) != dt.ScaleBytes(n) {
				t.Fatalf("%v n=%d: kernels %d+%d bytes, device %d+%d", dt, n, kt.RowBytes(n), kt.ScaleBytes(n), dt.RowBytes(n), dt.ScaleBytes(n))
			}
		}
	}
}

// TestAttentionEveryDType writes a cache of each encoding through the
// device and runs prefill and batched decode with a window, sinks and a
// soft cap; the results equal the kernels run on the same bytes, and pages
// released behind the window (-1 in the table) are never looked at.
func TestAttentionEveryDType(t *testing.T) {
	d := open(t, 64<<20)
	k := d.Kernels()
	dk := k.(device.DecodeKernels)
	const ps, kvHeads, heads, hd, vhd, pages = 8, 2, 6, 64, 32, 24
	const n, start, window = 20, 60, 25
	r := rand.New(rand.NewPCG(5, 6))
	sinksHost := randFloats(r, heads)
	sinks := upload(t, d, sinksHost)
	opts := device.AttnOpts{Scale: 0.2, Window: window, SoftCap: 4, Sinks: device.Weight{Ptr: sinks.Ptr, Type: device.F32, Rows: 1, Cols: heads, Bytes: 4 * heads}}
	for _, dt := range device.KVDTypes() {
		t.Run(dt.String(), func(t *testing.T) {
			kv := newKVLayer(t, d, dt, pages*ps, ps, kvHeads, hd, vhd, false)
			table := make([]int32, (start+n+ps-1)/ps)
			for i, p := range r.Perm(pages)[:len(table)] {
				table[i] = int32(p)
			}
			total := start + n
			kAll, vAll := randFloats(r, total*kvHeads*hd), randFloats(r, total*kvHeads*vhd)
			if err := k.WriteKV(kv, upload(t, d, kAll), upload(t, d, vAll), total, table, 0); err != nil {
				t.Fatal(err)
			}
			// Pages wholly before the first query's window are released.
			released := append([]int32(nil), table...)
			for p := range (start - window + 1) / ps {
				released[p] = -1
			}
			qv := randFloats(r, n*heads*hd)
			q := upload(t, d, qv)
			out := upload(t, d, make([]float32, n*heads*vhd))
			scratch := upload(t, d, make([]float32, k.AttentionScratch(device.AttnShape{Heads: heads, KVHeads: kvHeads, HeadDim: hd, VHeadDim: vhd})))
			if err := k.Attention(out, q, n, heads, kv, released, start, opts, scratch); err != nil {
				t.Fatal(err)
			}
			got := download(t, d, out)

			// The same kernels over the same bytes, called directly.
			view := func(s device.Span) []byte {
				if s.Ptr == 0 {
					return nil
				}
				b, err := d.Bytes(s.Ptr, s.Bytes)
				if err != nil {
					t.Fatal(err)
				}
				return b
			}
			pk := kcpu.PagedKV{Type: kcpu.KVType(dt), K: view(kv.K), V: view(kv.V), KScale: view(kv.KScale), VScale: view(kv.VScale),
				PageSize: ps, KVHeads: kvHeads, HeadDim: hd, VHeadDim: vhd}
			ko := kcpu.AttnOpts{Scale: opts.Scale, Window: window, SoftCap: opts.SoftCap, Sinks: sinksHost}
			want := make([]float32, len(got))
			d.pool.Attention(want, qv, n, heads, pk, table, start, ko, make([]float32, kcpu.AttentionScratch(d.pool.Threads(), hd, vhd)))
			for i := range want {
				if got[i] != want[i] {
					t.Fatalf("out[%d] = %v, kernels give %v", i, got[i], want[i])
				}
			}

			// Decode: the last query row again, as a batch of one.
			pos := []int32{start + n - 1}
			dout := upload(t, d, make([]float32, heads*vhd))
			if err := dk.DecodeAttention(dout, q.Slice((n-1)*heads*hd, heads*hd), heads, kv, pos, [][]int32{released}, opts, scratch, start+n); err != nil {
				t.Fatal(err)
			}
			for i, v := range download(t, d, dout) {
				if math.Abs(float64(v-got[(n-1)*heads*vhd+i])) > 1e-6 {
					t.Fatalf("decode out[%d] = %v, prefill's last row %v", i, v, got[(n-1)*heads*vhd+i])
				}
			}

			// A released page inside the window is refused, not read.
			bad := append([]int32(nil), released...)
			bad[(start-window+1)/ps] = -1
			if err := k.Attention(out, q, n, heads, kv, bad, start, opts, scratch); err == nil || !strings.Contains(err.Error(), "page -1") {
				t.Fatalf("attention over a released page inside the window: %v", err)
			}
			badDec := append([]int32(nil), released...)
			badDec[(int(pos[0])-window+1)/ps] = -1
			if err := dk.DecodeAttention(dout, q, heads, kv, pos, [][]int32{badDec}, opts, scratch, start+n); err == nil || !strings.Contains(err.Error(), "page -1") {
				t.Fatalf("decode over a released page inside the window: %v", err)
			}
		})
	}
}

// TestLatentKV: an MLA latent layer (one KV head, V the first VHeadDim of
// each K row) is written without a V input and read by every query head.
func TestLatentKV(t *testing.T) {
	d := open(t, 64<<20)
	k := d.Kernels()
	const ps, heads, hd, vhd, slots = 16, 16, 96, 64, 64
	kv := newKVLayer(t, d, device.KVBF16, slots, ps, 1, hd, vhd, true)
	r := rand.New(rand.NewPCG(7, 8))
	table := []int32{3, 0, 2}
	kAll := randFloats(r, 40*hd)
	if err := k.WriteKV(kv, upload(t, d, kAll), device.Buf{}, 40, table, 0); err != nil {
		t.Fatal(err)
	}
	qv := randFloats(r, 2*heads*hd)
	out := upload(t, d, make([]float32, 2*heads*vhd))
	scratch := upload(t, d, make([]float32, k.AttentionScratch(device.AttnShape{Heads: heads, KVHeads: 1, HeadDim: hd, VHeadDim: vhd})))
	if err := k.Attention(out, upload(t, d, qv), 2, heads, kv, table, 38, device.AttnOpts{Scale: 0.1}, scratch); err != nil {
		t.Fatal(err)
	}
	// Float64 reference over the bf16 values of the latent rows.
	got := download(t, d, out)
	for i := range 2 {
		for h := range heads {
			var den float64
			ref := make([]float64, vhd)
			for p := 0; p <= 38+i; p++ {
				kr := kAll[p*hd : (p+1)*hd]
				var s float64
				for j := range hd {
					s += float64(qv[(i*heads+h)*hd+j]) * float64(kcpu.BF16ToF32(kcpu.F32ToBF16(kr[j])))
				}
				e := math.Exp(0.1 * s)
				den += e
				for j := range vhd {
					ref[j] += e * float64(kcpu.BF16ToF32(kcpu.F32ToBF16(kr[j])))
				}
			}
			for j := range vhd {
				if g := float64(got[(i*heads+h)*vhd+j]); math.Abs(g-ref[j]/den) > 2e-5 {
					t.Fatalf("row %d head %d out[%d] = %v, want %v", i, h, j, g, ref[j]/den)
				}
			}
		}
	}
}

// TestAttentionRefusesBadInput: errors name what is wrong and leave the
// device usable.
func TestAttentionRefusesBadInput(t *testing.T) {
	d := open(t, 16<<20)
	k := d.Kernels()
	kv := newKVLayer(t, d, device.KVF16, 32, 8, 2, 16, 16, false)
	q := upload(t, d, make([]float32, 4*16))
	out := upload(t, d, make([]float32, 4*16))
	scratch := upload(t, d, make([]float32, k.AttentionScratch(device.AttnShape{Heads: 4, KVHeads: 2, HeadDim: 16, VHeadDim: 16})))
	sinks := upload(t, d, make([]float32, 3))
	for _, c := range []struct {
		name string
		o    device.AttnOpts
		sc   device.Buf
		want string
	}{
		{"zero scale", device.AttnOpts{}, scratch, "scale"},
		{"negative window", device.AttnOpts{Scale: 1, Window: -1}, scratch, "window"},
		{"short sinks", device.AttnOpts{Scale: 1, Sinks: device.Weight{Ptr: sinks.Ptr, Type: device.F32, Rows: 1, Cols: 3, Bytes: 12}}, scratch, "3 logits for 4 query heads"},
		{"short scratch", device.AttnOpts{Scale: 1}, scratch.Slice(0, 10), "attention scratch"},
	} {
		err := k.Attention(out, q, 1, 4, kv, []int32{0}, 0, c.o, c.sc)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error about %q", c.name, err, c.want)
		}
	}
	bad := kv
	bad.K.Bytes = 10
	if err := k.WriteKV(bad, q, q, 1, []int32{0}, 0); err == nil || !strings.Contains(err.Error(), "K holds 10 bytes") {
		t.Errorf("a layer whose K span is too short: %v", err)
	}
}
