package cpu

import (
	"sync/atomic"
	"testing"
	"time"
)

// countTask records which worker ran each chunk.
type countTask struct {
	ch       chunker
	hits     []atomic.Int32
	byWorker [4]atomic.Int32
	delay    time.Duration
}

func (c *countTask) run(w int) {
	for i := c.ch.take(); i >= 0; i = c.ch.take() {
		c.hits[i].Add(1)
		c.byWorker[w].Add(1)
		if c.delay > 0 {
			time.Sleep(c.delay)
		}
	}
}

func dispatch(p *Pool, t task) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.parallel(t)
}

// TestPoolRunsEveryChunkOnce dispatches calls back to back (workers
// spinning), after pauses longer than the spin window (workers parked, so
// most calls finish before they wake and their claims are retracted), and
// with slow chunks (workers must join in), checking each chunk ran exactly
// once and that the extra workers did take part.
func TestPoolRunsEveryChunkOnce(t *testing.T) {
	p := NewPool(3)
	defer p.Close()
	var joined int32
	for call := range 300 {
		n := 1 + call%97
		c := &countTask{hits: make([]atomic.Int32, n)}
		switch {
		case call%50 == 7:
			time.Sleep(2 * spinWindow) // let the workers park
		case call%10 == 3:
			c.delay = 20 * time.Microsecond
		}
		c.ch.reset(n)
		dispatch(p, c)
		for i := range c.hits {
			if h := c.hits[i].Load(); h != 1 {
				t.Fatalf("call %d: chunk %d ran %d times", call, i, h)
			}
		}
		if p.pending.Load() != 0 {
			t.Fatalf("call %d: %d claims still pending after the call returned", call, p.pending.Load())
		}
		joined += c.byWorker[1].Load() + c.byWorker[2].Load()
	}
	if joined == 0 {
		t.Fatal("the extra workers never ran a chunk")
	}
}

// TestPoolCloseStopsParkedAndSpinningWorkers: Close returns (its workers
// exited) whether they are parked or spinning, and the pool then runs calls
// inline.
func TestPoolCloseStopsParkedAndSpinningWorkers(t *testing.T) {
	for _, wait := range []time.Duration{0, 3 * spinWindow} {
		p := NewPool(4)
		c := &countTask{hits: make([]atomic.Int32, 8)}
		c.ch.reset(8)
		dispatch(p, c)
		time.Sleep(wait)
		done := make(chan struct{})
		go func() { p.Close(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatalf("Close after %v did not return: workers still running", wait)
		}
		c = &countTask{hits: make([]atomic.Int32, 8)}
		c.ch.reset(8)
		dispatch(p, c)
		if got := c.byWorker[0].Load(); got != 8 {
			t.Fatalf("closed pool: caller ran %d of 8 chunks", got)
		}
	}
}
