package boot

import (
	"fmt"

	"github.com/kvhost/kvhost/host/alloc"
	"github.com/kvhost/kvhost/host/device"
	"github.com/kvhost/kvhost/host/kv"
	"github.com/kvhost/kvhost/host/ledger"
)

// arena is the KV pools' virtual-memory reservation: one range holding
// every declared buffer of every pool, each at a granularity-aligned offset
// sized for its pool's upper bound, of which a prefix of each buffer is
// mapped. Growing maps more of each buffer; nothing moves, so pools built
// over a prefix stay valid.
type arena struct {
	name   string
	vm     device.VirtualMemory
	layout *kv.Layout
	gran   int64
	base   device.Ptr
	// per buffer, in layout order (pool by pool): its offset, its stride
	// (reserved bytes) and what is mapped of it.
	offset, stride, mapped [][]int64
	used                   []int // units a live set spans, per pool
}

func newArena(name string, vm device.VirtualMemory, l *kv.Layout, upper []int) (*arena, error) {
	a := &arena{name: name, vm: vm, layout: l, gran: vm.Granularity()}
	var total int64
	for pi, p := range l.Pools {
		var off, str []int64
		for _, b := range p.Buffers {
			st := kv.AlignUp(int64(upper[pi])*b.UnitBytes, a.gran)
			off, str = append(off, total), append(str, st)
			total += st
		}
		a.offset, a.stride, a.mapped = append(a.offset, off), append(a.stride, str), append(a.mapped, make([]int64, len(str)))
	}
	if total <= 0 {
		return nil, fmt.Errorf("boot: KV arena for %v units is empty", upper)
	}
	base, err := vm.Reserve(total)
	if err != nil {
		return nil, fmt.Errorf("boot: reserve the KV arena (%d buffers, %d bytes): %w", l.Buffers(), total, err)
	}
	a.base = base
	return a, nil
}

// mapTo backs every buffer of pool p up to units[p] units (granule-rounded).
func (a *arena) mapTo(units []int) error {
	for pi, p := range a.layout.Pools {
		for bi, b := range p.Buffers {
			want := kv.AlignUp(int64(units[pi])*b.UnitBytes, a.gran)
			if want > a.stride[pi][bi] {
				return fmt.Errorf("boot: KV arena holds %d bytes of pool %s buffer %s, %d units need %d", a.stride[pi][bi], p.Name, b.Name, units[pi], want)
			}
			if have := a.mapped[pi][bi]; want > have {
				if err := a.vm.Map(a.base, a.offset[pi][bi]+have, want-have); err != nil {
					return fmt.Errorf("boot: map KV pool %s buffer %s to %d bytes: %w", p.Name, b.Name, want, err)
				}
				a.mapped[pi][bi] = want
			}
		}
	}
	return nil
}

// span is a kv.SpanFunc over the mapped buffers.
func (a *arena) span(pool, buf int, bytes int64) (device.Span, error) {
	if bytes > a.mapped[pool][buf] {
		return device.Span{}, fmt.Errorf("boot: KV arena maps %d bytes of the buffer, %d asked", a.mapped[pool][buf], bytes)
	}
	return device.Span{Ptr: a.base + device.Ptr(a.offset[pool][buf]), Bytes: bytes}, nil
}

// use records the units of the live set, whose cells the ledger counts as
// KV cache.
func (a *arena) use(units []int) { a.used = append([]int(nil), units...) }

// Usage implements ledger.Source: mapped granules, of which the live pools'
// cells are KV cache and the rest granule rounding.
func (a *arena) Usage() []ledger.Usage {
	u := ledger.NewUsage(a.name, ledger.KindArena)
	if a.base == 0 {
		return []ledger.Usage{u}
	}
	for _, m := range a.mapped {
		for _, b := range m {
			u.DeviceBytes += b
		}
	}
	var kvb int64
	if a.used != nil {
		kvb = a.layout.Bytes(a.used)
	}
	u.Categories[alloc.KVCache.String()] = kvb
	u.Rounding = u.DeviceBytes - kvb
	return []ledger.Usage{u}
}

func (a *arena) release() error {
	if a.base == 0 {
		return nil
	}
	err := a.vm.Release(a.base)
	a.base, a.used = 0, nil
	return err
}
