package constraint

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// Background is a Runner loaded on its own goroutine, so a server answers
// before the constraint plugin (a large module given the whole vocabulary)
// is ready. NewBackground starts the load at once; NewOnDemand starts it
// on the first Open, so a server that never sees a constrained request
// never loads the plugin (a built-in grammar plugin holds ~30 MiB of
// compiled code, linear memory and decoded tables). Open waits for it,
// bounded by the request's context, and fails with the load's error when
// the load failed; Step, EOG and Name are only reached for sequences Open
// started, so after the load started. Requests without a constraint never
// wait and never start it.
type Background struct {
	load func() (Runner, error)
	done chan struct{}

	mu      sync.Mutex
	started bool
	closed  bool

	r   Runner
	err error
}

var _ Runner = (*Background)(nil)

// errClosed is the load error of a runner closed before its load started.
var errClosed = errors.New("constraint: the runner was closed before it loaded")

// NewBackground starts load and returns at once.
func NewBackground(load func() (Runner, error)) *Background {
	b := NewOnDemand(load)
	b.Start()
	return b
}

// NewOnDemand returns a runner whose load starts on the first Open (or
// Start) and runs on its own goroutine; nothing is loaded before.
func NewOnDemand(load func() (Runner, error)) *Background {
	return &Background{load: load, done: make(chan struct{})}
}

// Start starts the load unless it has started (or the runner is closed).
func (b *Background) Start() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.started || b.closed {
		return
	}
	b.started = true
	go func() {
		defer close(b.done)
		r, err := b.load()
		if err == nil && r == nil {
			err = fmt.Errorf("constraint: the runner's loader returned none")
		}
		b.r, b.err = r, err
	}()
}

// Started reports whether the load has started.
func (b *Background) Started() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.started
}

// Ready is closed when the load has ended, well or not (never, for an
// on-demand runner nothing opened).
func (b *Background) Ready() <-chan struct{} { return b.done }

// Wait starts the load if it has not started, waits for it (or ctx) and
// returns the runner or the load's error.
func (b *Background) Wait(ctx context.Context) (Runner, error) {
	b.Start()
	select {
	case <-b.done:
	case <-ctx.Done():
		return nil, fmt.Errorf("constraint: waiting for the runner to load: %w", context.Cause(ctx))
	}
	if b.err != nil {
		return nil, fmt.Errorf("constraint: the runner failed to load: %w", b.err)
	}
	return b.r, nil
}

// Open implements Runner: it starts the load if needed and waits for it.
func (b *Background) Open(ctx context.Context, spec *Spec) (Seq, error) {
	r, err := b.Wait(ctx)
	if err != nil {
		return nil, err
	}
	return r.Open(ctx, spec)
}

// Step implements Runner. Rows exist only for sequences Open started, so
// the runner is loaded; with none there is nothing to wait for.
func (b *Background) Step(ctx context.Context, rows []Row) {
	if len(rows) == 0 {
		return
	}
	<-b.done
	if b.r != nil {
		b.r.Step(ctx, rows)
	}
}

// EOG implements Runner (after the load; nil if it failed or never
// started).
func (b *Background) EOG() []int32 {
	if !b.Started() {
		return nil
	}
	<-b.done
	if b.r == nil {
		return nil
	}
	return b.r.EOG()
}

// Name implements Runner: the runner's name once loaded.
func (b *Background) Name() string {
	if !b.Started() {
		return "constraint runner (loaded on the first constrained request)"
	}
	select {
	case <-b.done:
		if b.r != nil {
			return b.r.Name()
		}
		return "constraint runner (failed to load)"
	default:
		return "constraint runner (loading)"
	}
}

// Close waits for a started load and closes the runner when it can be
// closed; a runner whose load never started is closed at once, and a
// later Open fails.
func (b *Background) Close(ctx context.Context) error {
	b.mu.Lock()
	if !b.started {
		b.closed, b.started, b.err = true, true, errClosed
		close(b.done)
		b.mu.Unlock()
		return nil
	}
	b.mu.Unlock()
	<-b.done
	if c, ok := b.r.(interface{ Close(context.Context) error }); ok {
		return c.Close(ctx)
	}
	return nil
}
