package kv

import (
	"fmt"
	"sync"

	"github.com/kvhost/kvhost/host/alloc"
	"github.com/kvhost/kvhost/host/device"
)

// Spec is the shape of a pool.
type Spec struct {
	Layers   int
	KVHeads  int
	HeadDim  int
	PageSize int
	NumPages int
}

// BytesPerToken is the cell size of an F32 K+V cache over all layers.
func (s Spec) BytesPerToken() int64 {
	return 2 * int64(s.Layers) * int64(s.KVHeads) * int64(s.HeadDim) * 4
}

// Bytes is the arena size of the whole pool.
func (s Spec) Bytes() int64 { return s.BytesPerToken() * int64(s.PageSize) * int64(s.NumPages) }

// Validate names the bad field.
func (s Spec) Validate() error {
	switch {
	case s.Layers <= 0:
		return fmt.Errorf("kv: layers %d must be positive", s.Layers)
	case s.KVHeads <= 0 || s.HeadDim <= 0:
		return fmt.Errorf("kv: kv heads %d and head dim %d must be positive", s.KVHeads, s.HeadDim)
	case s.PageSize <= 0 || s.PageSize > 1024:
		return fmt.Errorf("kv: page size %d out of range [1, 1024]", s.PageSize)
	case s.NumPages <= 0:
		return fmt.Errorf("kv: pool of %d pages: no memory left for the KV cache", s.NumPages)
	}
	return nil
}

// Pool is the paged KV cache.
type Pool struct {
	spec   Spec
	layers []device.KVLayer
	ptrs   []device.Ptr
	owner  *alloc.Direct

	mu   sync.Mutex
	free []int32
	// refs counts the page tables holding each page; sharing a prompt's
	// pages between the n choices of one request raises it above one.
	refs []int32
}

// ErrNoPages means the pool cannot satisfy a page request right now.
var ErrNoPages = fmt.Errorf("kv: pool exhausted")

// New allocates the arenas through a (category KV cache).
func New(spec Spec, a *alloc.Direct) (*Pool, error) {
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	p := &Pool{spec: spec, owner: a}
	slots := spec.NumPages * spec.PageSize
	bytes := int64(slots) * int64(spec.KVHeads*spec.HeadDim) * 4
	for l := 0; l < spec.Layers; l++ {
		var bufs [2]device.Span
		for i := range bufs {
			ptr, err := a.Alloc(bytes, alloc.KVCache)
			if err != nil {
				p.Close()
				return nil, fmt.Errorf("kv: layer %d arena: %w", l, err)
			}
			p.ptrs = append(p.ptrs, ptr)
			bufs[i] = device.Span{Ptr: ptr, Bytes: bytes}
		}
		p.layers = append(p.layers, device.KVLayer{DType: device.KVF32, K: bufs[0], V: bufs[1], Slots: slots, PageSize: spec.PageSize,
			KVHeads: spec.KVHeads, HeadDim: spec.HeadDim, VHeadDim: spec.HeadDim})
	}
	p.initPages()
	return p, nil
}

// initPages puts every page on the free list, low pages handed out first.
func (p *Pool) initPages() {
	p.refs = make([]int32, p.spec.NumPages)
	p.free = make([]int32, p.spec.NumPages)
	for i := range p.free {
		p.free[i] = int32(p.spec.NumPages - 1 - i)
	}
}

// Spec returns the pool's shape.
func (p *Pool) Spec() Spec { return p.spec }

// Layer returns layer l's cache.
func (p *Pool) Layer(l int) device.KVLayer { return p.layers[l] }

// PagesFor is the number of pages n tokens occupy.
func (p *Pool) PagesFor(n int) int { return (n + p.spec.PageSize - 1) / p.spec.PageSize }

// Grow appends pages to table until it covers n tokens. It takes all pages
// or none: on ErrNoPages the table is unchanged.
func (p *Pool) Grow(table []int32, n int) ([]int32, error) {
	need := p.PagesFor(n) - len(table)
	if need <= 0 {
		return table, nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if need > len(p.free) {
		return table, ErrNoPages
	}
	k := len(p.free) - need
	for i := len(p.free) - 1; i >= k; i-- {
		table = append(table, p.free[i])
		p.refs[p.free[i]] = 1
	}
	p.free = p.free[:k]
	return table, nil
}

// Release drops table's hold on its pages; a page returns to the free list
// when no table holds it.
func (p *Pool) Release(table []int32) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, pg := range table {
		if p.refs[pg] <= 0 {
			panic(fmt.Sprintf("kv: release of free page %d", pg))
		}
		p.refs[pg]--
		if p.refs[pg] == 0 {
			p.free = append(p.free, pg)
		}
	}
}

// Share returns a new page table holding the same pages as table (each
// page's count raised), for copy-on-write forks.
func (p *Pool) Share(table []int32) []int32 {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, pg := range table {
		p.refs[pg]++
	}
	return append([]int32(nil), table...)
}

// Shared reports whether page pg is held by more than one table.
func (p *Pool) Shared(pg int32) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.refs[pg] > 1
}

// FreePages is the number of pages on the free list.
func (p *Pool) FreePages() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.free)
}

// Close frees the arenas.
func (p *Pool) Close() {
	for _, ptr := range p.ptrs {
		_ = p.owner.Free(ptr)
	}
	p.ptrs = nil
	p.layers = nil
}

// Unshare gives table a private copy of its page i when another table holds
// it too (copy-on-write before a write into a shared partial page). It
// copies every layer's K and V rows (and their scales) with the device's
// kernels, one page as one row of 32-bit words.
func (p *Pool) Unshare(table []int32, i int, k device.Kernels) error {
	if !p.Shared(table[i]) {
		return nil
	}
	fresh, err := p.Grow(nil, p.spec.PageSize)
	if err != nil {
		return err
	}
	src, dst := table[i], fresh[0]
	for _, l := range p.layers {
		if err := copyPage(k, l, src, dst); err != nil {
			p.Release(fresh)
			return fmt.Errorf("kv: copy page %d: %w", src, err)
		}
	}
	p.Release(table[i : i+1])
	table[i] = fresh[0]
	return nil
}

// copyPage copies page src of every span of l to page dst.
func copyPage(k device.Kernels, l device.KVLayer, src, dst int32) error {
	spans := []struct {
		s        device.Span
		rowBytes int64
	}{
		{l.K, l.DType.RowBytes(l.KRowElems())}, {l.KScale, l.DType.ScaleBytes(l.KRowElems())},
		{l.V, l.DType.RowBytes(l.VRowElems())}, {l.VScale, l.DType.ScaleBytes(l.VRowElems())},
	}
	for _, sp := range spans {
		if sp.s.Ptr == 0 || sp.rowBytes == 0 {
			continue
		}
		page := int64(l.PageSize) * sp.rowBytes
		if page%4 != 0 {
			return fmt.Errorf("kv: a page of %d bytes is not whole 32-bit words", page)
		}
		words := int(page / 4)
		b := device.Buf{Ptr: sp.s.Ptr, N: int(sp.s.Bytes / 4)}
		if err := k.GatherRows(b.Slice(int(dst)*words, words), b, words, []int32{src}); err != nil {
			return err
		}
	}
	return nil
}
