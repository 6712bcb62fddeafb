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
}

// ErrNoPages means the pool cannot satisfy a page request right now.
var ErrNoPages = fmt.Errorf("kv: pool exhausted")

// New allocates the arenas through a (category KV cache).
func New(spec Spec, a *alloc.Direct) (*Pool, error) {
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	p := &Pool{spec: spec, owner: a}
	floats := spec.NumPages * spec.PageSize * spec.KVHeads * spec.HeadDim
	for l := 0; l < spec.Layers; l++ {
		var bufs [2]device.Buf
		for i := range bufs {
			ptr, err := a.Alloc(int64(floats)*4, alloc.KVCache)
			if err != nil {
				p.Close()
				return nil, fmt.Errorf("kv: layer %d arena: %w", l, err)
			}
			p.ptrs = append(p.ptrs, ptr)
			bufs[i] = device.Buf{Ptr: ptr, N: floats}
		}
		p.layers = append(p.layers, device.KVLayer{K: bufs[0], V: bufs[1], PageSize: spec.PageSize, KVHeads: spec.KVHeads, HeadDim: spec.HeadDim})
	}
	p.free = make([]int32, spec.NumPages)
	for i := range p.free {
		// Hand out low pages first.
		p.free[i] = int32(spec.NumPages - 1 - i)
	}
	return p, nil
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
	}
	p.free = p.free[:k]
	return table, nil
}

// Release returns every page of table to the pool.
func (p *Pool) Release(table []int32) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.free = append(p.free, table...)
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
