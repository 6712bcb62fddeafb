package ledger

import (
	"fmt"
	"log/slog"
	"sync"

	"github.com/kvhost/kvhost/host/alloc"
	"github.com/kvhost/kvhost/host/device"
)

// GiB is the unit of every logged figure (2^30 B; SGLang says "GB" but
// means the same).
const GiB = 1 << 30

// Meter is the part of a device the ledger reads.
type Meter interface {
	Info() device.Info
	MemGetInfo() (free, total int64)
}

// Phase is one startup phase measured by free-memory readings.
type Phase struct {
	Name       string `json:"name"`
	FreeBefore int64  `json:"free_before_bytes"`
	FreeAfter  int64  `json:"free_after_bytes"`
	// Delta is FreeBefore − FreeAfter: what the phase took (negative when it
	// gave memory back).
	Delta int64 `json:"delta_bytes"`
	// AvailGiB and UsageGiB are the logged figures (GiB = 2^30 B).
	AvailGiB float64 `json:"avail_gib"`
	UsageGiB float64 `json:"usage_gib"`
}

// LogLine is the phase as SGLang-style logs print it.
func (p Phase) LogLine() string {
	return fmt.Sprintf("%s: avail mem=%.2f GiB, mem usage=%.2f GiB (GiB = 2^30 B)", p.Name, p.AvailGiB, p.UsageGiB)
}

// Source is a holder of device memory that can explain its bytes. One source
// may report several allocators (the caching allocator reports one per
// pool).
type Source interface {
	Usage() []Usage
}

// Ledger records phases and explains device memory by allocator.
type Ledger struct {
	dev Meter
	log *slog.Logger

	mu      sync.Mutex
	start   int64
	last    int64
	phases  []Phase
	sources []Source
	pools   func() []KVPool
	budget  any
	runtime *alloc.Allocator
	diags   func() any
	// base is the caching allocator's state when serving began
	// (MarkServing): runtime growth is measured above it.
	base alloc.Stats
}

// New takes the starting free-memory reading of dev. log may be nil.
func New(dev Meter, log *slog.Logger) *Ledger {
	free, _ := dev.MemGetInfo()
	return &Ledger{dev: dev, log: log, start: free, last: free}
}

// Phase ends the phase called name: it reads free memory, records the
// delta since the previous phase (or the start), logs it and returns it.
// Callers that cache memory (the caching allocator) should empty their
// cache first, as SGLang's get_available_gpu_memory does.
func (l *Ledger) Phase(name string) Phase {
	free, _ := l.dev.MemGetInfo()
	l.mu.Lock()
	p := Phase{Name: name, FreeBefore: l.last, FreeAfter: free, Delta: l.last - free,
		AvailGiB: float64(free) / GiB, UsageGiB: float64(l.last-free) / GiB}
	l.phases = append(l.phases, p)
	l.last = free
	l.mu.Unlock()
	if l.log != nil {
		l.log.Info(p.LogLine(), "phase", name, "free_bytes", free, "delta_bytes", p.Delta)
	}
	return p
}

// AddSource registers a holder of device memory.
func (l *Ledger) AddSource(s Source) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sources = append(l.sources, s)
}

// SetKVPools names the reading of every KV pool's capacity and use (a live
// kv.Set's Stats), taken at each snapshot.
func (l *Ledger) SetKVPools(read func() []KVPool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.pools = read
}

// SetBudget records the sizing inputs and derived values (any
// JSON-marshalable value; host/plan.Budget in practice).
func (l *Ledger) SetBudget(b any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.budget = b
}

// SetRuntime names the caching allocator whose peaks are the live runtime
// peak since start.
func (l *Ledger) SetRuntime(a *alloc.Allocator) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.runtime = a
}

// MarkServing starts the runtime window: the caching allocator's peaks are
// reset and its current bytes (workspaces, graph pools — already in the
// phases) become the baseline the runtime peak is measured above, which is
// what the reserved slack must hold.
func (l *Ledger) MarkServing() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.runtime == nil {
		return
	}
	l.runtime.ResetPeak()
	l.base = l.runtime.Stats()
}

// SetDiagnoses names the source of out-of-memory diagnoses (the engine's)
// that /v1/memory reports beside the ledger.
func (l *Ledger) SetDiagnoses(f func() any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.diags = f
}

// Phases returns a copy of the recorded phases.
func (l *Ledger) Phases() []Phase {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]Phase(nil), l.phases...)
}

// StartFree is the free-memory reading New took.
func (l *Ledger) StartFree() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.start
}
