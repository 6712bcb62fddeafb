package plugin

import (
	"sync"
	"sync/atomic"
)

// Generation is one published version of a named plugin (of any kind):
// a value and a reference count. The slot it is published in holds one
// reference while it is current and each call in flight one more; the
// last Release runs its close function, so a swapped-out version finishes
// the calls that began on it (drains) and then closes.
type Generation[T any] struct {
	Value   T
	refs    atomic.Int64
	close   func()
	closing sync.Once
}

// NewGeneration wraps a value, with the one reference its slot will hold;
// close runs after the last Release.
func NewGeneration[T any](v T, close func()) *Generation[T] {
	g := &Generation[T]{Value: v, close: close}
	g.refs.Store(1)
	return g
}

// Release drops one reference; the last one closes the generation.
func (g *Generation[T]) Release() {
	if g.refs.Add(-1) == 0 {
		g.closing.Do(func() {
			if g.close != nil {
				g.close()
			}
		})
	}
}

// Current is the slot of one name: the generation now serving, swapped
// atomically. Readers take no lock.
type Current[T any] struct{ p atomic.Pointer[Generation[T]] }

// Acquire returns the current generation with a reference held (the
// caller Releases it), or nil when the slot is empty.
func (c *Current[T]) Acquire() *Generation[T] {
	for {
		g := c.p.Load()
		if g == nil {
			return nil
		}
		g.refs.Add(1)
		if c.p.Load() == g {
			return g
		}
		g.Release() // swapped meanwhile: retry on the new one
	}
}

// Peek returns the current generation without a reference (nil when
// empty): only for reading fields that never change.
func (c *Current[T]) Peek() *Generation[T] { return c.p.Load() }

// Swap publishes g (nil empties the slot) and releases the slot's
// reference on the previous generation, which closes once drained. It
// returns the previous generation, which the caller must not use beyond
// its immutable fields.
func (c *Current[T]) Swap(g *Generation[T]) *Generation[T] {
	prev := c.p.Swap(g)
	if prev != nil {
		prev.Release()
	}
	return prev
}
