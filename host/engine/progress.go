package engine

import (
	"fmt"
	"time"
)

// StalledError is Stalled's answer: the engine has work (running or
// waiting requests) but its loop has not come round for longer than the
// threshold — a step is stuck (a forward or a plugin call that does not
// return).
type StalledError struct {
	Since            time.Duration // since the loop last came round
	Threshold        time.Duration
	Running, Waiting int
}

func (e *StalledError) Error() string {
	return fmt.Sprintf("engine stalled: no step completed for %v (threshold %v) with %d running and %d waiting requests",
		e.Since.Round(time.Millisecond), e.Threshold, e.Running, e.Waiting)
}

// beat marks the loop coming round: after a step, or when it wakes.
func (e *Engine) beat() { e.lastBeat.Store(time.Now().UnixNano()) }

// Stalled reports a *StalledError when the engine has pending work and its
// loop has not come round for longer than threshold; nil otherwise (an
// idle engine is never stalled). /health uses it as the liveness signal.
func (e *Engine) Stalled(threshold time.Duration) error {
	running := int(e.nRunning.Load())
	e.mu.Lock()
	waiting := len(e.waiting)
	e.mu.Unlock()
	if running == 0 && waiting == 0 {
		return nil
	}
	last := e.lastBeat.Load()
	if last == 0 {
		return nil
	}
	if since := time.Since(time.Unix(0, last)); since > threshold {
		return &StalledError{Since: since, Threshold: threshold, Running: running, Waiting: waiting}
	}
	return nil
}
