package constraint

import (
	"context"
	"fmt"
)

// Background is a Runner loaded on its own goroutine, so a server answers
// before the constraint plugin (a large module given the whole vocabulary)
// is ready. Open waits for it, bounded by the request's context, and fails
// with the load's error when the load failed; Step, EOG and Name are only
// reached for sequences Open started, so after the load. Requests without a
// constraint never wait.
type Background struct {
	done chan struct{}
	r    Runner
	err  error
}

var _ Runner = (*Background)(nil)

// NewBackground starts load and returns at once.
func NewBackground(load func() (Runner, error)) *Background {
	b := &Background{done: make(chan struct{})}
	go func() {
		defer close(b.done)
		r, err := load()
		if err == nil && r == nil {
			err = fmt.Errorf("constraint: the runner's loader returned none")
		}
		b.r, b.err = r, err
	}()
	return b
}

// Ready is closed when the load has ended, well or not.
func (b *Background) Ready() <-chan struct{} { return b.done }

// Wait waits for the load (or ctx) and returns the runner or the load's
// error.
func (b *Background) Wait(ctx context.Context) (Runner, error) {
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

// Open implements Runner: it waits for the load.
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

// EOG implements Runner (after the load; nil if it failed).
func (b *Background) EOG() []int32 {
	<-b.done
	if b.r == nil {
		return nil
	}
	return b.r.EOG()
}

// Name implements Runner: the runner's name once loaded.
func (b *Background) Name() string {
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

// Close waits for the load and closes the runner when it can be closed.
func (b *Background) Close(ctx context.Context) error {
	<-b.done
	if c, ok := b.r.(interface{ Close(context.Context) error }); ok {
		return c.Close(ctx)
	}
	return nil
}
