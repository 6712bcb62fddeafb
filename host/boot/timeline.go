package boot

import (
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/kvhost/kvhost/internal/cputime"
)

// Step is one startup step: how long it took on the wall clock and in the
// process's CPU time (user + system, every thread), which a machine shared
// with other work inflates far less than the wall clock.
type Step struct {
	Name string
	Wall time.Duration
	CPU  time.Duration
}

// Timeline records startup steps in order, each ending where Mark is
// called and starting where the previous one ended. It is safe for
// concurrent use (background steps mark from their own goroutine, and
// their CPU time then overlaps the foreground's).
type Timeline struct {
	mu          sync.Mutex
	start, last time.Time
	cpuLast     time.Duration
	steps       []Step
}

// NewTimeline starts a timeline now.
func NewTimeline() *Timeline {
	now := time.Now()
	return &Timeline{start: now, last: now, cpuLast: cputime.Process()}
}

// Mark ends the current step under name (nil-safe).
func (t *Timeline) Mark(name string) {
	if t == nil {
		return
	}
	now, cpu := time.Now(), cputime.Process()
	t.mu.Lock()
	defer t.mu.Unlock()
	t.steps = append(t.steps, Step{Name: name, Wall: now.Sub(t.last), CPU: cpu - t.cpuLast})
	t.last, t.cpuLast = now, cpu
}

// Steps returns the steps marked so far.
func (t *Timeline) Steps() []Step {
	if t == nil {
		return nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]Step(nil), t.steps...)
}

// Since is the wall time from the timeline's start.
func (t *Timeline) Since() time.Duration { return time.Since(t.start) }

// String is the timeline as one log value: "name wall/cpu, ...".
func (t *Timeline) String() string {
	var b strings.Builder
	for i, s := range t.Steps() {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s %s/%s", s.Name, ms(s.Wall), ms(s.CPU))
	}
	return b.String()
}

func ms(d time.Duration) string { return fmt.Sprintf("%.0fms", float64(d)/float64(time.Millisecond)) }
