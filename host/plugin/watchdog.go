package plugin

import (
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tetratelabs/wazero/api"
)

// drained is the fuel the watchdog leaves an overdue instance with (-2^62):
// the guest traps at its next fuel check (a loop header, a function entry
// or a bulk operation), whatever it decrements first.
var drained = api.EncodeI64(-1 << 62)

// redrain is how often the watchdog drains an overdue call again until it
// returns: a guest that had just loaded its counter when the watchdog
// wrote it stores its own value back, and the next write wins.
const redrain = time.Millisecond

// watchdog enforces wall-clock deadlines on calls into compiled guests.
//
// wazero cannot interrupt compiled code from outside: without
// close-on-context-done (which adds a call into Go at every loop header,
// 4–9× on a sampler) neither the context nor Module.CloseWithExitCode stops
// a running guest, and a goroutine inside compiled code holds up every
// stop-the-world phase of the garbage collector. The guest's own fuel
// counter is the lever instead: at a call's deadline the watchdog sets the
// instance's fuel global to a large negative value, the guest traps at its
// next fuel check — at most one loop iteration, function body or bulk
// operation (bounded by the memory and table caps) later — and the caller
// gets a *DeadlineError and discards the instance. The goroutine never
// stays inside wasm.
//
// The limit of this design: while the collector waits for the guest to
// reach a safe point, the watchdog goroutine is stopped too, so during a
// collection the guest runs until its fuel budget ends it — which is why
// every budget is sized in units of about a nanosecond (package fuel), and
// the deadline is the second line of defence, not the first.
//
// The per-call cost is a mutex and a timestamp, with no allocation; the
// watchdog goroutine wakes only for the earliest deadline.
type watchdog struct {
	mu    sync.Mutex
	insts map[*instance]struct{}
	next  atomic.Int64 // unix nanoseconds the loop sleeps until (MaxInt64: idle)
	wake  chan struct{}
	stop  chan struct{}
	done  chan struct{}
}

func newWatchdog() *watchdog {
	w := &watchdog{insts: map[*instance]struct{}{}, wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	w.next.Store(math.MaxInt64)
	go w.loop()
	return w
}

// add and remove track live instances (at instantiation and close).
func (w *watchdog) add(inst *instance) {
	w.mu.Lock()
	w.insts[inst] = struct{}{}
	w.mu.Unlock()
}

func (w *watchdog) remove(inst *instance) {
	w.mu.Lock()
	delete(w.insts, inst)
	w.mu.Unlock()
}

// arm starts a call on inst that must end by deadline.
func (w *watchdog) arm(inst *instance, deadline time.Time) {
	d := deadline.UnixNano()
	inst.dl.Lock()
	inst.deadline, inst.expired = d, false
	inst.dl.Unlock()
	if d < w.next.Load() {
		select {
		case w.wake <- struct{}{}:
		default:
		}
	}
}

// disarm ends the call and reports whether its deadline passed (the
// watchdog drained its fuel).
func (w *watchdog) disarm(inst *instance) bool {
	inst.dl.Lock()
	expired := inst.expired
	inst.deadline, inst.expired = 0, false
	inst.dl.Unlock()
	return expired
}

func (w *watchdog) close() {
	close(w.stop)
	<-w.done
}

func (w *watchdog) loop() {
	defer close(w.done)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		now := time.Now().UnixNano()
		next := int64(math.MaxInt64)
		w.mu.Lock()
		for inst := range w.insts {
			inst.dl.Lock()
			if d := inst.deadline; d != 0 {
				if now >= d {
					inst.fuel.Set(drained)
					inst.expired = true
					next = min(next, now+int64(redrain))
				} else {
					next = min(next, d)
				}
			}
			inst.dl.Unlock()
		}
		w.mu.Unlock()
		w.next.Store(next)
		if next == math.MaxInt64 {
			select {
			case <-w.wake:
			case <-w.stop:
				return
			}
			continue
		}
		timer.Reset(time.Duration(next - now))
		select {
		case <-timer.C:
		case <-w.wake:
			timer.Stop()
		case <-w.stop:
			timer.Stop()
			return
		}
	}
}
