package kv

import (
	"errors"
	"fmt"
	"sync"

	"github.com/kvhost/kvhost/host/device"
	"github.com/kvhost/kvhost/sdk"
)

// ErrNoSlots means a state pool has no free request slot right now.
var ErrNoSlots = errors.New("kv: no free state slot")

// SlotPool is one recurrent-state pool: every buffer holds Slots slots of
// its bytes, one per running request whatever its length. A slot is free
// or held by exactly one sequence.
type SlotPool struct {
	layout PoolLayout
	slots  int
	bufs   []buffer

	mu   sync.Mutex
	free []int32
	held []bool
}

func newSlotPool(l PoolLayout, slots int, bufs []buffer) *SlotPool {
	p := &SlotPool{layout: l, slots: slots, bufs: bufs, held: make([]bool, slots)}
	p.free = make([]int32, slots)
	for i := range p.free { // low slots handed out first
		p.free[i] = int32(slots - 1 - i)
	}
	return p
}

// Name and Kind are the declaration's; Slots is the pool's size.
func (p *SlotPool) Name() string       { return p.layout.Name }
func (p *SlotPool) Kind() sdk.PoolKind { return p.layout.Kind }
func (p *SlotPool) Layout() PoolLayout { return p.layout }
func (p *SlotPool) Slots() int         { return p.slots }
func (p *SlotPool) String() string     { return fmt.Sprintf("%s pool %s", p.layout.Kind, p.layout.Name) }

// FreeSlots is the number of slots no sequence holds.
func (p *SlotPool) FreeSlots() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.free)
}

// Acquire hands out a free slot, or ErrNoSlots.
func (p *SlotPool) Acquire() (int32, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.free) == 0 {
		return 0, ErrNoSlots
	}
	s := p.free[len(p.free)-1]
	p.free = p.free[:len(p.free)-1]
	p.held[s] = true
	return s, nil
}

// Release returns slot s; releasing a free slot is a bug and panics.
func (p *SlotPool) Release(s int32) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if s < 0 || int(s) >= p.slots || !p.held[s] {
		panic(fmt.Sprintf("kv: %s: release of free slot %d", p, s))
	}
	p.held[s] = false
	p.free = append(p.free, s)
}

// Copy copies slot src's state into slot dst in every buffer (the fork of
// a request's n choices).
func (p *SlotPool) Copy(k device.Kernels, src, dst int32) error {
	for _, b := range p.bufs {
		if b.workspace {
			continue
		}
		if err := copyRows(k, b, 1, src, dst); err != nil {
			return fmt.Errorf("kv: %s: copy slot %d to %d: %w", p, src, dst, err)
		}
	}
	return nil
}
