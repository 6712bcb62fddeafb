package boot

import (
	"fmt"

	"github.com/kvhost/kvhost/host/alloc"
	"github.com/kvhost/kvhost/host/device"
	"github.com/kvhost/kvhost/host/ledger"
	"github.com/kvhost/kvhost/host/plan"
)

// arena is the KV cache's virtual-memory reservation: one range holding
// every K and V buffer at a granularity-aligned stride sized for the upper
// bound, of which a prefix of each buffer is mapped. Growing maps more of
// each buffer; nothing moves, so pools built over a prefix stay valid.
type arena struct {
	name    string
	vm      device.VirtualMemory
	layout  plan.Layout
	kvHeads int
	headDim int
	base    device.Ptr
	stride  int64
	mapped  int64 // per buffer
	used    int   // tokens a live pool spans
}

func newArena(name string, vm device.VirtualMemory, l plan.Layout, kvHeads, headDim, upperBound int) (*arena, error) {
	a := &arena{name: name, vm: vm, layout: l, kvHeads: kvHeads, headDim: headDim, stride: l.BufferBytes(upperBound)}
	if a.stride <= 0 {
		return nil, fmt.Errorf("boot: KV arena for %d tokens is empty", upperBound)
	}
	base, err := vm.Reserve(a.stride * int64(l.Buffers))
	if err != nil {
		return nil, fmt.Errorf("boot: reserve the KV arena (%d buffers × %d bytes): %w", l.Buffers, a.stride, err)
	}
	a.base = base
	return a, nil
}

// mapTo backs every buffer up to tokens rows (granularity-rounded).
func (a *arena) mapTo(tokens int) error {
	want := a.layout.BufferBytes(tokens)
	if want > a.stride {
		return fmt.Errorf("boot: KV arena holds %d bytes per buffer, %d tokens need %d", a.stride, tokens, want)
	}
	if want <= a.mapped {
		return nil
	}
	for i := range a.layout.Buffers {
		if err := a.vm.Map(a.base, int64(i)*a.stride+a.mapped, want-a.mapped); err != nil {
			return fmt.Errorf("boot: map KV buffer %d to %d bytes: %w", i, want, err)
		}
	}
	a.mapped = want
	return nil
}

// layers returns the per-layer K/V views of the first tokens rows and
// records them as in use.
func (a *arena) layers(tokens int) []device.KVLayer {
	a.used = tokens
	n := int64(tokens) * int64(a.kvHeads*a.headDim) * 4
	out := make([]device.KVLayer, a.layout.Buffers/2)
	for l := range out {
		k := a.base + device.Ptr(int64(2*l)*a.stride)
		v := a.base + device.Ptr(int64(2*l+1)*a.stride)
		out[l] = device.KVLayer{DType: device.KVF32, K: device.Span{Ptr: k, Bytes: n}, V: device.Span{Ptr: v, Bytes: n}, Slots: tokens,
			PageSize: a.layout.PageSize, KVHeads: a.kvHeads, HeadDim: a.headDim, VHeadDim: a.headDim}
	}
	return out
}

// Usage implements ledger.Source: mapped granules, of which the live pool's
// rows are KV cache and the rest granule rounding.
func (a *arena) Usage() []ledger.Usage {
	u := ledger.NewUsage(a.name, ledger.KindArena)
	if a.base == 0 {
		return []ledger.Usage{u}
	}
	u.DeviceBytes = a.mapped * int64(a.layout.Buffers)
	kvb := int64(a.used) * a.layout.RowBytes * int64(a.layout.Buffers)
	u.Categories[alloc.KVCache.String()] = kvb
	u.Rounding = u.DeviceBytes - kvb
	return []ledger.Usage{u}
}

func (a *arena) release() error {
	if a.base == 0 {
		return nil
	}
	err := a.vm.Release(a.base)
	a.base, a.mapped, a.used = 0, 0, 0
	return err
}
