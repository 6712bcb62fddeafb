package cpu

import (
	"sync"
	"sync/atomic"
)

// task is one parallel kernel call. run is invoked once per worker (worker 0 is
// the calling goroutine); implementations hand out work through an atomic
// counter so a descheduled worker does not stall the others.
type task interface {
	run(worker int)
}

// Pool is a fixed set of worker goroutines that kernels split their work over.
// A nil *Pool is valid everywhere and means single-threaded. One kernel call
// runs at a time per Pool (concurrent calls are serialised); per-kernel task
// state lives inside the Pool so that dispatching allocates nothing.
type Pool struct {
	threads int
	mu      sync.Mutex // serialises calls; guards closed and the task fields
	closed  bool
	work    []chan task // one per extra worker (threads-1)
	wg      sync.WaitGroup

	mm  matmulTask
	gm  gemmTask
	at  attnTask
	dat decodeAttnTask
}

// NewPool starts threads-1 worker goroutines; the caller's goroutine is the
// remaining worker. threads <= 1 runs every kernel inline.
func NewPool(threads int) *Pool {
	if threads < 1 {
		threads = 1
	}
	p := &Pool{threads: threads}
	for w := 1; w < threads; w++ {
		c := make(chan task, 1)
		p.work = append(p.work, c)
		go p.worker(w, c)
	}
	return p
}

func (p *Pool) worker(id int, c chan task) {
	for t := range c {
		t.run(id)
		p.wg.Done()
	}
}

// Threads is the number of workers kernels split over (1 for a nil Pool).
func (p *Pool) Threads() int {
	if p == nil {
		return 1
	}
	return p.threads
}

// Close stops the workers. It is idempotent; a closed Pool keeps working
// single-threaded.
func (p *Pool) Close() {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	p.closed = true
	for _, c := range p.work {
		close(c)
	}
}

// parallel runs t on every worker and waits. The caller holds p.mu.
func (p *Pool) parallel(t task) {
	if p.closed || len(p.work) == 0 {
		t.run(0)
		return
	}
	p.wg.Add(len(p.work))
	for _, c := range p.work {
		c <- t
	}
	t.run(0)
	p.wg.Wait()
}

// chunker hands out chunk indices [0, n) to workers.
type chunker struct {
	next atomic.Int64
	n    int64
}

func (c *chunker) reset(n int) { c.next.Store(0); c.n = int64(n) }

// take returns the next chunk index, or -1 when none are left.
func (c *chunker) take() int {
	i := c.next.Add(1) - 1
	if i >= c.n {
		return -1
	}
	return int(i)
}
