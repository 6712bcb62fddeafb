package kv

import (
	"fmt"

	"github.com/kvhost/kvhost/host/alloc"
	"github.com/kvhost/kvhost/host/device"
	"github.com/kvhost/kvhost/sdk"
)

// Set is every pool of one layout, realised: the token pools a sequence
// holds one page table in each of (TokenPools, in declaration order, the
// order of model.Seq.Pages) and the state pools it holds one slot in each
// of (SlotPools, the order of model.Seq.Slots). The model asks it for layer
// l's cache (Layer, Table) or state (State).
type Set struct {
	layout *Layout
	units  []int
	tokens []*Pool
	slots  []*SlotPool
	index  []int // per layout pool: its index in tokens or slots

	layers []device.KVLayer // per model layer (zero when it keeps no cache)
	states []State          // per model layer (zero when it keeps no state)

	owner *alloc.Direct
	ptrs  []device.Ptr
}

// State is one layer's recurrent state in a state pool: slot s of Conv
// starts at byte s·ConvBytes, of SSM at s·SSMBytes.
type State struct {
	Pool                int // index in SlotPools
	Conv, SSM           device.Span
	ConvBytes, SSMBytes int64
	ConvType            device.DType // F32, F16 or BF16, as declared
}

// SpanFunc supplies buffer b of layout pool p, at least bytes long.
type SpanFunc func(pool, buf int, bytes int64) (device.Span, error)

// Allocate realises l with units (one count per pool, in l.Pools order),
// one allocation per buffer through a (category KV cache); Close frees
// them.
func Allocate(l *Layout, units []int, a *alloc.Direct) (*Set, error) {
	s := &Set{owner: a}
	err := s.build(l, units, func(_, _ int, bytes int64) (device.Span, error) {
		ptr, err := a.Alloc(bytes, alloc.KVCache)
		if err != nil {
			return device.Span{}, err
		}
		s.ptrs = append(s.ptrs, ptr)
		return device.Span{Ptr: ptr, Bytes: bytes}, nil
	})
	if err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// Over realises l with units over buffers someone else owns, e.g. views of
// a virtual-memory reservation that host/boot maps in granules and grows
// after graph capture. Close only forgets them.
func Over(l *Layout, units []int, span SpanFunc) (*Set, error) {
	s := &Set{}
	if err := s.build(l, units, span); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *Set) build(l *Layout, units []int, span SpanFunc) error {
	if err := l.Check(units); err != nil {
		return err
	}
	s.layout, s.units = l, append([]int(nil), units...)
	s.layers = make([]device.KVLayer, l.Layers())
	s.states = make([]State, l.Layers())
	spans := make([][]buffer, len(l.Pools))
	for pi, p := range l.Pools {
		for bi, b := range p.Buffers {
			bytes := int64(units[pi]) * b.UnitBytes
			sp, err := span(pi, bi, bytes)
			if err != nil {
				return fmt.Errorf("kv: pool %s buffer %s (layer %d), %d bytes: %w", p.Name, b.Name, b.Layer, bytes, err)
			}
			if sp.Ptr == 0 || sp.Bytes < bytes {
				return fmt.Errorf("kv: pool %s buffer %s: backing of %d bytes at %#x, %d needed", p.Name, b.Name, sp.Bytes, sp.Ptr, bytes)
			}
			spans[pi] = append(spans[pi], buffer{span: device.Span{Ptr: sp.Ptr, Bytes: bytes}, unitBytes: b.UnitBytes, workspace: b.Role == sdk.RoleWorkspace})
		}
		if p.Tokens() {
			s.index = append(s.index, len(s.tokens))
			s.tokens = append(s.tokens, newPool(p, units[pi], spans[pi]))
		} else {
			s.index = append(s.index, len(s.slots))
			s.slots = append(s.slots, newSlotPool(p, units[pi], spans[pi]))
		}
	}
	for layer := range s.layers {
		if pi := l.TokenPool(layer); pi >= 0 {
			kl, err := attentionLayer(l, layer, units[pi], spans[pi])
			if err != nil {
				return err
			}
			s.layers[layer] = kl
		}
		if pi := l.StatePool(layer); pi >= 0 {
			st := State{Pool: s.index[pi]}
			for bi, b := range l.Pools[pi].Buffers {
				switch {
				case b.Layer != layer:
				case b.Role == sdk.RoleConv:
					st.Conv, st.ConvBytes = spans[pi][bi].span, b.UnitBytes
					st.ConvType, _ = StateDType(b.DType) // checked by placeState
				case b.Role == sdk.RoleSSM:
					st.SSM, st.SSMBytes = spans[pi][bi].span, b.UnitBytes
				}
			}
			s.states[layer] = st
		}
	}
	return nil
}

// attentionLayer builds layer's device view from its pool's buffers.
func attentionLayer(l *Layout, layer, tokens int, bufs []buffer) (device.KVLayer, error) {
	pi := l.TokenPool(layer)
	p, n := l.Pools[pi], l.Need(layer)
	kl := device.KVLayer{DType: p.dtype, Slots: tokens, PageSize: p.PageSize, KVHeads: n.KVHeads, HeadDim: n.HeadDim, VHeadDim: n.VHeadDim, VInK: n.Latent}
	for bi, b := range p.Buffers {
		if b.Layer != layer {
			continue
		}
		sp := bufs[bi].span
		switch b.Role {
		case sdk.RoleK, sdk.RoleLatent:
			kl.K = sp
		case sdk.RoleV:
			kl.V = sp
		case sdk.RoleKScale, sdk.RoleLatentScale:
			kl.KScale = sp
		case sdk.RoleVScale:
			kl.VScale = sp
		}
	}
	if err := kl.Validate(); err != nil {
		return device.KVLayer{}, fmt.Errorf("kv: pool %s layer %d: %w", p.Name, layer, err)
	}
	return kl, nil
}

// Layout is the declaration the set realises; Units its unit counts.
func (s *Set) Layout() *Layout { return s.layout }
func (s *Set) Units() []int    { return append([]int(nil), s.units...) }

// TokenPools are the token pools, in declaration order: a sequence's page
// table for TokenPools()[i] is model.Seq.Pages[i].
func (s *Set) TokenPools() []*Pool { return s.tokens }

// SlotPools are the state pools, in declaration order: a sequence's slot in
// SlotPools()[j] is model.Seq.Slots[j].
func (s *Set) SlotPools() []*SlotPool { return s.slots }

// Layer is layer l's attention cache; its page tables are those of
// TokenPools()[Table(l)].
func (s *Set) Layer(l int) device.KVLayer { return s.layers[l] }

// Table is the index in TokenPools of the pool holding layer l's cache, or
// -1 when the layer keeps none.
func (s *Set) Table(l int) int {
	if pi := s.layout.TokenPool(l); pi >= 0 {
		return s.index[pi]
	}
	return -1
}

// State is layer l's recurrent state and whether it has one.
func (s *Set) State(l int) (State, bool) {
	return s.states[l], s.layout.StatePool(l) >= 0
}

// Bytes is the memory the pools hold: Σ units × unit bytes.
func (s *Set) Bytes() int64 { return s.layout.Bytes(s.units) }

// Close frees what Allocate allocated and forgets the buffers. The page and
// slot bookkeeping stays (a holder may still release into it), but no
// layer's memory is reachable any more.
func (s *Set) Close() {
	for _, p := range s.ptrs {
		_ = s.owner.Free(p)
	}
	s.ptrs, s.layers, s.states = nil, nil, nil
	for _, p := range s.tokens {
		p.bufs = nil
	}
	for _, p := range s.slots {
		p.bufs = nil
	}
}

// PoolStat is one pool's capacity and use: the ledger's KV pool table,
// /v1/memory's kv_pools and the per-pool metrics.
type PoolStat struct {
	Name string       `json:"name"`
	Kind sdk.PoolKind `json:"kind"`
	Unit string       `json:"unit"` // "token" or "request"
	// DType is the KV encoding of the attention layers it holds.
	DType    string `json:"kv_dtype,omitempty"`
	Window   int    `json:"window,omitempty"`
	Layers   int    `json:"layers"`
	PageSize int    `json:"page_size"` // 1 for a state pool (a page is a slot)
	Pages    int    `json:"pages"`
	// FreePages: pages (slots) no sequence holds.
	FreePages int `json:"free_pages"`
	// CachedPages and CachedTokens: pages only the prefix cache holds
	// (no running request locks them), evicted when the pool needs them.
	CachedPages  int `json:"cached_pages,omitempty"`
	CachedTokens int `json:"cached_tokens,omitempty"`
	// CapacityTokens and UsedTokens (pages running requests hold × page
	// size, cached pages not counted) for token pools; Slots and UsedSlots
	// for state pools.
	CapacityTokens int `json:"capacity_tokens"`
	UsedTokens     int `json:"used_tokens"`
	Slots          int `json:"slots,omitempty"`
	UsedSlots      int `json:"used_slots,omitempty"`
	// CellBytes is the bytes per token (or per slot) over all its buffers;
	// Bytes the whole pool's.
	CellBytes int64 `json:"cell_bytes"`
	Bytes     int64 `json:"bytes"`
}

// Used is the fraction of the pool running requests hold, 0 to 1: cached
// pages no request locks count as free, as vLLM's kv_cache_usage_perc
// counts its evictable cached blocks.
func (p PoolStat) Used() float64 {
	if p.Pages == 0 {
		return 0
	}
	return float64(p.Pages-p.FreePages-p.CachedPages) / float64(p.Pages)
}

// SetCached records that pages of the pool's used pages are held by the
// prefix cache alone.
func (p *PoolStat) SetCached(pages int) {
	p.CachedPages, p.CachedTokens = pages, pages*p.PageSize
	p.UsedTokens -= p.CachedTokens
}

// Stat is what a pool of l with units would report with free pages (or
// slots) free: plan's prediction and the live reading share it.
func (p PoolLayout) Stat(units, free int) PoolStat {
	st := PoolStat{Name: p.Name, Kind: p.Kind, Unit: p.Unit().String(), DType: p.DType, Window: p.Window, Layers: p.Layers,
		PageSize: p.PageSize, CellBytes: p.UnitBytes, Bytes: int64(units) * p.UnitBytes, FreePages: free}
	if p.Tokens() {
		st.Pages = units / p.PageSize
		st.CapacityTokens, st.UsedTokens = units, (st.Pages-free)*p.PageSize
	} else {
		st.Pages, st.Slots, st.UsedSlots = units, units, units-free
	}
	return st
}

// Stats reads every pool's capacity and use now, in declaration order.
func (s *Set) Stats() []PoolStat {
	out := make([]PoolStat, 0, len(s.layout.Pools))
	for pi, p := range s.layout.Pools {
		free := 0
		if p.Tokens() {
			free = s.tokens[s.index[pi]].FreePages()
		} else {
			free = s.slots[s.index[pi]].FreeSlots()
		}
		out = append(out, p.Stat(s.units[pi], free))
	}
	return out
}
