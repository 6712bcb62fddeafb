package kv_test

import (
	"strings"
	"testing"

	"github.com/kvhost/kvhost/host/alloc"
	"github.com/kvhost/kvhost/host/device"
	"github.com/kvhost/kvhost/host/kv"
	"github.com/kvhost/kvhost/host/kv/kvtest"
	"github.com/kvhost/kvhost/sdk"
)

// TestEveryKVDType: the mha/fp4 configurators' declaration of each KV
// dtype is realised as that device encoding, every layer's device view
// validates, and the pool holds exactly the declared bytes.
func TestEveryKVDType(t *testing.T) {
	dev := newDevice(t, 64<<20)
	needs := kvtest.Uniform(3, 2, 32)
	for _, tt := range []struct {
		sdk  string
		want device.KVDType
	}{
		{sdk.KVFP32, device.KVF32}, {sdk.KVFP16, device.KVF16}, {sdk.KVBF16, device.KVBF16},
		{sdk.KVFP8E4M3, device.KVFP8E4M3}, {sdk.KVFP8E5M2, device.KVFP8E5M2},
		{sdk.KVMXFP8, device.KVMXFP8}, {sdk.KVNVFP4, device.KVNVFP4}, {"fp4", device.KVNVFP4},
	} {
		t.Run(tt.sdk, func(t *testing.T) {
			d := alloc.NewDirect("kv", dev)
			s := kvtest.MHA(t, d, needs, tt.sdk, 16, 4)
			p := s.Layout().Pools[0]
			if p.DType != tt.want.String() || p.Kind != sdk.FullAttention || p.Layers != 3 {
				t.Fatalf("pool %+v, want %s", p, tt.want)
			}
			// The device's own row sizes over every layer, plus what the
			// configurator reserves beyond them (nvfp4's dequant workspace).
			var rows int64
			for l := range needs {
				kl := s.Layer(l)
				if kl.DType != tt.want || kl.Validate() != nil {
					t.Fatalf("layer %d: %+v: %v", l, kl, kl.Validate())
				}
				rows += 2 * (tt.want.RowBytes(kl.KRowElems()) + tt.want.ScaleBytes(kl.KRowElems()))
			}
			if tt.want == device.KVNVFP4 {
				rows += 2 * 2 * 32 // k_dequant + v_dequant: fp8, one layer
			}
			if p.UnitBytes != rows {
				t.Fatalf("declared %d B/token, the device's rows add up to %d", p.UnitBytes, rows)
			}
			if _, total := d.Bytes(); total != 64*rows {
				t.Fatalf("allocated %d, want 64 tokens × %d", total, rows)
			}
		})
	}
}

// TestLayoutRefuses: a declaration that disagrees with the model is
// refused with a message naming the pool, layer and numbers.
func TestLayoutRefuses(t *testing.T) {
	needs := kvtest.Uniform(2, 2, 32)
	base := func(t *testing.T) []sdk.Pool {
		decl, err := kvtest.DeclareMHA(needs, sdk.KVBF16, 16)
		if err != nil {
			t.Fatal(err)
		}
		return decl
	}
	setBuf := func(decl []sdk.Pool, name string, layer int32, f func(b *sdk.Buffer)) {
		p := &decl[0]
		for i := range p.Buffers {
			if b := &p.Buffers[i]; b.Name == name && b.Layer == layer {
				old, _ := b.Bytes()
				f(b)
				n, _ := b.Bytes()
				p.BytesPerUnit += n - old
			}
		}
	}
	drop := func(decl []sdk.Pool, name string, layer int32) {
		p := &decl[0]
		for i, b := range p.Buffers {
			if b.Name == name && b.Layer == layer {
				n, _ := b.Bytes()
				p.Buffers = append(p.Buffers[:i], p.Buffers[i+1:]...)
				p.BytesPerUnit -= n
				return
			}
		}
	}
	tests := []struct {
		name  string
		needs []kv.LayerNeed
		edit  func([]sdk.Pool) []sdk.Pool
		want  string
	}{
		{"short k row", needs, func(d []sdk.Pool) []sdk.Pool {
			setBuf(d, "k", 1, func(b *sdk.Buffer) { b.Shape = []int64{2, 16} })
			return d
		}, `pool kv layer 1: k buffer "k" holds 64 bytes per token, the model's bf16 row of 2 heads × 32/32 needs 128`},
		{"no v", needs, func(d []sdk.Pool) []sdk.Pool { drop(d, "v", 0); return d }, "pool kv layer 0: no v buffer"},
		{"layer missing", needs, func(d []sdk.Pool) []sdk.Pool { drop(d, "k", 1); drop(d, "v", 1); return d },
			"layer 1 keeps an attention cache but no pool declares it"},
		{"layer twice", needs, func(d []sdk.Pool) []sdk.Pool {
			two := kvtest.Split(d, func(int) bool { return false })
			two[1].Buffers = append(two[1].Buffers, d[0].Buffers[0])
			two[1].Buffers[0].Pool = "hi"
			two[1].BytesPerUnit = 128
			two[1].Buffers = append(two[1].Buffers, sdk.Buffer{Pool: "hi", Name: "v", Role: sdk.RoleV, Layer: 0, Shape: []int64{2, 32}, DType: "bf16"})
			two[1].BytesPerUnit += 128
			return two
		}, "layer 0 is already served by pool kv"},
		{"beyond the model", needs[:1], func(d []sdk.Pool) []sdk.Pool { return d }, "buffer k: layer 1, the model has 1 layers"},
		{"window for full attention", needs, func(d []sdk.Pool) []sdk.Pool {
			d[0].Kind, d[0].Window = sdk.SlidingWindow, 4096
			return d
		}, "pool kv keeps a sliding window of 4096 tokens but layer 0 attends to every past position"},
		{"latent for MHA", needs, func(d []sdk.Pool) []sdk.Pool {
			d[0].Kind = sdk.LatentAttention
			var kept []sdk.Buffer
			for _, b := range d[0].Buffers {
				if b.Role == sdk.RoleK {
					b.Role, b.Shape = sdk.RoleLatent, []int64{1, 128}
					kept = append(kept, b)
				}
			}
			d[0].Buffers = kept
			return d
		}, "pool kv is a latent pool but layer 0 is not MLA"},
		{"two encodings", needs, func(d []sdk.Pool) []sdk.Pool {
			setBuf(d, "k", 1, func(b *sdk.Buffer) { b.DType = "fp16" })
			setBuf(d, "v", 1, func(b *sdk.Buffer) { b.DType = "fp16" })
			return d
		}, "one pool holds one encoding"},
		{"no such encoding", needs, func(d []sdk.Pool) []sdk.Pool {
			setBuf(d, "k", 0, func(b *sdk.Buffer) { b.DType = "int32" })
			return d
		}, "int32 values with \"\" scales are no KV encoding"},
		{"scales on bf16", needs, func(d []sdk.Pool) []sdk.Pool {
			d[0].Buffers = append(d[0].Buffers, sdk.Buffer{Pool: "kv", Name: "k_scale", Role: sdk.RoleKScale, Layer: 0, Shape: []int64{2}, DType: "fp8_e8m0"})
			d[0].BytesPerUnit += 2
			return d
		}, "bf16 values with \"fp8_e8m0\" scales"},
		{"state for attention", needs, func(d []sdk.Pool) []sdk.Pool {
			return append(d, sdk.Pool{Name: "s", Kind: sdk.RecurrentState, PageSize: 1, BytesPerUnit: 8, Buffers: []sdk.Buffer{
				{Pool: "s", Name: "conv", Role: sdk.RoleConv, Layer: 0, Shape: []int64{1}, DType: "fp32"},
				{Pool: "s", Name: "ssm", Role: sdk.RoleSSM, Layer: 0, Shape: []int64{1}, DType: "fp32"}}})
		}, "pool s: layer 0 keeps no recurrent state"},
		{"bytes do not add up", needs, func(d []sdk.Pool) []sdk.Pool { d[0].BytesPerUnit++; return d }, "but the pool declares"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := kv.NewLayout(tt.edit(base(t)), tt.needs)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v\nwant it to contain %q", err, tt.want)
			}
		})
	}
	// A workspace-only pool of extra bytes per token is allowed: the host
	// allocates and accounts it, nothing reads it.
	d := base(t)
	d = append(d, sdk.Pool{Name: "extra", Kind: sdk.FullAttention, PageSize: 16, BytesPerUnit: 4, Buffers: []sdk.Buffer{
		{Pool: "extra", Name: "token_ids", Role: sdk.RoleWorkspace, Layer: -1, Shape: []int64{1}, DType: "int32"}}})
	l, err := kv.NewLayout(d, needs)
	if err != nil || l.TokenBytes() != 2*2*128+4 || l.Pools[1].Layers != 0 {
		t.Fatalf("workspace pool: %v %+v", err, l)
	}
}

// TestMapped: the granular mapping rounds every buffer on its own.
func TestMapped(t *testing.T) {
	needs := kvtest.Uniform(2, 1, 8)
	decl, _ := kvtest.DeclareMHA(needs, sdk.KVFP32, 4)
	l, err := kv.NewLayout(decl, needs)
	if err != nil {
		t.Fatal(err)
	}
	// 4 buffers of 32 B/token: 100 tokens = 3200 B each, 4096 mapped each.
	if got := l.Mapped([]int{100}, 4096); got != 4*4096 {
		t.Fatalf("mapped %d", got)
	}
	if got := l.Bytes([]int{100}); got != 12800 {
		t.Fatalf("bytes %d", got)
	}
	if err := l.Check([]int{6}); err == nil || !strings.Contains(err.Error(), "whole number of 4-token pages") {
		t.Fatalf("check: %v", err)
	}
	if err := l.Check([]int{0}); err == nil || !strings.Contains(err.Error(), "no memory left") {
		t.Fatalf("check 0: %v", err)
	}
}
