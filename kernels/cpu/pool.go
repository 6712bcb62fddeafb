package cpu

import (
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// task is one parallel kernel call. run is invoked at most once per worker
// (worker 0, the calling goroutine, always runs it); implementations hand out
// work through an atomic counter (chunker), so a worker that never starts
// loses nothing and a descheduled one does not stall the others.
type task interface {
	run(worker int)
}

// Pool is a fixed set of worker goroutines that kernels split their work over.
// A nil *Pool is valid everywhere and means single-threaded. One kernel call
// runs at a time per Pool (concurrent calls are serialised); per-kernel task
// state lives inside the Pool so that dispatching allocates nothing.
//
// Dispatch does not go through a channel: a forward is hundreds of kernel
// calls of 10–200 µs each, and waking a parked goroutine costs tens of
// microseconds on a virtual machine (the idle vCPU must be woken), enough
// that a second thread used to add nothing to a decode matvec. Instead a
// worker that has just finished a call spins for spinWindow on a generation
// counter, so the next call of the same forward reaches it at once; idle
// longer, it parks. A worker that has not started a call by the time the
// caller has finished it is retracted (its claim taken by the caller), so a
// parked worker's wake-up latency never lengthens a call.
type Pool struct {
	threads int
	mu      sync.Mutex // serialises calls; guards the task fields and cur
	closed  atomic.Bool
	workers []*poolWorker  // threads-1 of them
	exited  sync.WaitGroup // the workers, until Close has stopped them
	mb      mambaTask      // every Mamba-2 kernel (mamba_scan.go)

	cur     task          // the call being dispatched; set before gen moves
	gen     atomic.Uint64 // dispatch generation; workers watch it
	pending atomic.Int32  // claims of the current generation not yet finished
	moe     moeTasks      // Route and ScatterAdd (moe.go, moe_group.go)

	mm matmulTask
	gm gemmTask
	gt gemmTTask
	// xt holds the small-batch GEMM's packed x block (gemm16.go), grown
	// like qbuf.
	xt []float32
	qm qmatTask
	// grp is MatMuls: several weights over one input (matmul_group.go).
	grp groupTask
	// qbuf holds MatMul's quantized activation rows (qact.go): grown by the
	// first call of a size, reused by every later one.
	qbuf []uint64
	at   attnTask
}

// poolWorker is one extra worker's hand-off state.
type poolWorker struct {
	id int
	// taken is the last generation claimed, by the worker (to run it) or by
	// the caller (retracting it): whoever moves it from g-1 to g owns g.
	taken  atomic.Uint64
	parked atomic.Bool   // set by the worker before it blocks on wake
	wake   chan struct{} // one token per parked→running transition the caller makes
}

// spinWindow is how long an idle worker keeps watching for the next call
// before it parks: longer than the gaps between the kernels of one forward
// (and between decode steps), short enough that an idle server does not burn
// a core.
const spinWindow = 300 * time.Microsecond

// NewPool starts threads-1 worker goroutines; the caller's goroutine is the
// remaining worker. threads <= 1 runs every kernel inline.
func NewPool(threads int) *Pool {
	if threads < 1 {
		threads = 1
	}
	p := &Pool{threads: threads}
	for id := 1; id < threads; id++ {
		w := &poolWorker{id: id, wake: make(chan struct{}, 1)}
		p.workers = append(p.workers, w)
		p.exited.Add(1)
		go p.worker(w)
	}
	return p
}

func (p *Pool) worker(w *poolWorker) {
	defer p.exited.Done()
	seen := uint64(0)
	for {
		g := p.waitGen(w, seen)
		if p.closed.Load() {
			return
		}
		seen = g
		if w.taken.CompareAndSwap(g-1, g) {
			p.cur.run(w.id)
			p.pending.Add(-1)
		}
	}
}

// waitGen returns the first generation after seen: spinning while the last
// call is recent, parked after that.
func (p *Pool) waitGen(w *poolWorker, seen uint64) uint64 {
	var deadline time.Time
	for i := 0; ; i++ {
		if g := p.gen.Load(); g != seen {
			return g
		}
		if i&63 != 63 {
			continue
		}
		// Let any other goroutine on this P run between checks.
		runtime.Gosched()
		now := time.Now()
		if deadline.IsZero() {
			deadline = now.Add(spinWindow)
			continue
		}
		if now.Before(deadline) {
			continue
		}
		w.parked.Store(true)
		if g := p.gen.Load(); g != seen {
			if !w.parked.CompareAndSwap(true, false) {
				<-w.wake // the caller saw us parked and is sending a token
			}
			return g
		}
		<-w.wake
		deadline = time.Time{}
		i = 0
	}
}

// Threads is the number of workers kernels split over (1 for a nil Pool).
func (p *Pool) Threads() int {
	if p == nil {
		return 1
	}
	return p.threads
}

// Close stops the workers and returns once they have exited. It is
// idempotent; a closed Pool keeps working single-threaded.
func (p *Pool) Close() {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed.Swap(true) {
		return
	}
	p.gen.Add(1)
	p.wakeParked()
	p.exited.Wait()
}

// wakeParked hands a token to every worker that has parked.
func (p *Pool) wakeParked() {
	for _, w := range p.workers {
		if w.parked.Load() && w.parked.CompareAndSwap(true, false) {
			w.wake <- struct{}{}
		}
	}
}

// parallel runs t on every worker that starts in time and waits. The caller
// holds p.mu.
func (p *Pool) parallel(t task) {
	if p.closed.Load() || len(p.workers) == 0 {
		t.run(0)
		return
	}
	p.cur = t
	p.pending.Store(int32(len(p.workers)))
	g := p.gen.Add(1)
	p.wakeParked()
	t.run(0)
	for _, w := range p.workers {
		if w.taken.CompareAndSwap(g-1, g) {
			p.pending.Add(-1) // not started: nothing of the call is left for it
		}
	}
	for i := 1; p.pending.Load() != 0; i++ {
		if i&63 == 0 {
			runtime.Gosched()
		}
	}
	p.cur = nil
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
