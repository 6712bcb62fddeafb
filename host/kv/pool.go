package kv

import (
	"errors"
	"fmt"
	"sync"

	"github.com/kvhost/kvhost/host/device"
	"github.com/kvhost/kvhost/sdk"
)

// ErrNoPages means a token pool cannot satisfy a page request right now.
var ErrNoPages = errors.New("kv: pool exhausted")

// Released marks a page-table entry whose page a sliding-window pool gave
// back (Trim): the position range it covered is out of every window.
const Released int32 = -1

// buffer is one declared buffer's memory: unitBytes per token or slot.
// Workspace buffers are allocated and accounted but never copied: no layer
// reads them through the pool.
type buffer struct {
	span      device.Span
	unitBytes int64
	workspace bool
}

// Pool is one token pool (full attention, sliding window or MLA latent):
// every buffer of the pool carved into pages of PageSize tokens, handed to
// page tables. Page ownership is the invariant: a page is on the free list
// or held by page tables whose number its reference count says, and the
// last Release returns it.
type Pool struct {
	layout   PoolLayout
	numPages int
	bufs     []buffer

	mu   sync.Mutex
	free []int32
	// refs counts the page tables holding each page; sharing a prompt's
	// pages between the n choices of one request raises it above one.
	refs []int32
}

func newPool(l PoolLayout, tokens int, bufs []buffer) *Pool {
	p := &Pool{layout: l, numPages: tokens / l.PageSize, bufs: bufs}
	p.refs = make([]int32, p.numPages)
	p.free = make([]int32, p.numPages)
	for i := range p.free { // low pages handed out first
		p.free[i] = int32(p.numPages - 1 - i)
	}
	return p
}

// Name, Kind, PageSize and Window are the declaration's.
func (p *Pool) Name() string            { return p.layout.Name }
func (p *Pool) Kind() sdk.PoolKind      { return p.layout.Kind }
func (p *Pool) PageSize() int           { return p.layout.PageSize }
func (p *Pool) Window() int             { return p.layout.Window }
func (p *Pool) Layout() PoolLayout      { return p.layout }
func (p *Pool) Pages() int              { return p.numPages }
func (p *Pool) Tokens() int             { return p.numPages * p.layout.PageSize }
func (p *Pool) PagesFor(n int) int      { return (n + p.layout.PageSize - 1) / p.layout.PageSize }
func (p *Pool) unitBytes() int64        { return p.layout.UnitBytes }
func (p *Pool) bytes() int64            { return int64(p.Tokens()) * p.unitBytes() }
func (p *Pool) String() string          { return fmt.Sprintf("%s pool %s", p.layout.Kind, p.layout.Name) }
func (p *Pool) windowed() bool          { return p.layout.Kind == sdk.SlidingWindow }
func (p *Pool) held(pg int32) bool      { return pg != Released }
func (p *Pool) validPage(pg int32) bool { return pg >= 0 && int(pg) < p.numPages }

// MaxPages is the most pages a sequence of tokens tokens holds in this
// pool when one forward adds at most chunk tokens to it: all of them in a
// full or latent pool; in a sliding-window pool, whose pages Trim gives back
// once they fall out of the window, those covering the window before the
// chunk and the chunk itself.
func (p *Pool) MaxPages(tokens, chunk int) int {
	n := p.PagesFor(tokens)
	if p.windowed() && chunk > 0 {
		n = min(n, int(sdk.WindowPages(int64(p.layout.Window), int64(chunk), int64(p.layout.PageSize))))
	}
	return n
}

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
// when no table holds it. Released entries are skipped.
func (p *Pool) Release(table []int32) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, pg := range table {
		if p.held(pg) {
			p.unref(pg)
		}
	}
}

func (p *Pool) unref(pg int32) {
	if !p.validPage(pg) || p.refs[pg] <= 0 {
		panic(fmt.Sprintf("kv: %s: release of free page %d", p, pg))
	}
	p.refs[pg]--
	if p.refs[pg] == 0 {
		p.free = append(p.free, pg)
	}
}

// Share returns a new page table holding the same pages as table (each
// page's count raised), for copy-on-write forks.
func (p *Pool) Share(table []int32) []int32 {
	p.Retain(table)
	return append([]int32(nil), table...)
}

// Retain takes one more hold on each page of table (Released entries
// skipped) for a holder that keeps its own list of them: the prefix cache.
// Retaining a free page is a bug and panics.
func (p *Pool) Retain(table []int32) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, pg := range table {
		if !p.held(pg) {
			continue
		}
		if !p.validPage(pg) || p.refs[pg] <= 0 {
			panic(fmt.Sprintf("kv: %s: retain of free page %d", p, pg))
		}
		p.refs[pg]++
	}
}

// Shared reports whether page pg is held by more than one table.
func (p *Pool) Shared(pg int32) bool {
	if !p.held(pg) {
		return false
	}
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

// Trim gives back the pages of table that lie wholly before position from
// (the earliest position a later query may read: the next position less the
// window, plus one), marking their entries Released, and returns how many
// it released. Only a sliding-window pool trims; in any other pool Trim
// does nothing, since every position stays readable.
func (p *Pool) Trim(table []int32, from int) int {
	if !p.windowed() || from <= 0 {
		return 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for i := 0; i < min(from/p.layout.PageSize, len(table)); i++ {
		if p.held(table[i]) {
			p.unref(table[i])
			table[i] = Released
			n++
		}
	}
	return n
}

// Unshare gives table a private copy of its page i when another table holds
// it too (copy-on-write before a write into a shared partial page). It
// copies the page in every buffer of the pool with the device's kernels.
func (p *Pool) Unshare(table []int32, i int, k device.Kernels) error {
	if !p.Shared(table[i]) {
		return nil
	}
	fresh, err := p.Grow(nil, p.layout.PageSize)
	if err != nil {
		return err
	}
	src, dst := table[i], fresh[0]
	for _, b := range p.bufs {
		if b.workspace {
			continue
		}
		if err := copyRows(k, b, int64(p.layout.PageSize), src, dst); err != nil {
			p.Release(fresh)
			return fmt.Errorf("kv: %s: copy page %d: %w", p, src, err)
		}
	}
	p.Release(table[i : i+1])
	table[i] = fresh[0]
	return nil
}

// copyRows copies block src of rows units of b to block dst, as 32-bit
// words (NewLayout refuses pages that are not whole words).
func copyRows(k device.Kernels, b buffer, rows int64, src, dst int32) error {
	block := rows * b.unitBytes
	if block%4 != 0 {
		return fmt.Errorf("kv: a block of %d bytes is not whole 32-bit words", block)
	}
	words := int(block / 4)
	buf := device.Buf{Ptr: b.span.Ptr, N: int(b.span.Bytes / 4)}
	return k.GatherRows(buf.Slice(int(dst)*words, words), buf, words, []int32{src})
}
