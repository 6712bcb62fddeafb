package plugin

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"time"
)

// Config configures a Runtime. The zero value is usable: NewRuntime fills
// defaults into a copy. Every bound applies to every plugin kind unless
// its name says otherwise.
type Config struct {
	// CacheDir holds wazero's compilation cache and, beside it, what
	// loading each module found (kvhost-plugins/, keyed by the sha256 of
	// its bytes); "" means DefaultCacheDir(). NoCache turns both off.
	// MaxCacheBytes bounds the compiled code kept there (default 256 MiB):
	// the least recently used files go first.
	CacheDir      string
	NoCache       bool
	MaxCacheBytes int64
	// RecallAnswers records every configure and size answer a
	// configurator gives in CacheDir and recalls it when the same version
	// is asked the same question again, without loading the module
	// (answers.go); Registry.ForArchitecture then returns a deferred
	// Plugin for a claimant whose record says it was accepted and
	// self-tested. Serve turns it on (startup); off, every call runs.
	RecallAnswers bool
	// InterpretConfigurators runs configurators on wazero's interpreter
	// instead of compiling them: the same instrumented module (fuel,
	// watchdog deadline, memory and table caps unchanged), never written
	// to the compilation cache. A configurator answers a handful of calls
	// at startup, so compiling a 3.5 MB Go guest (~1.3 s of CPU and ~150
	// MiB transient on an empty cache) costs more than interpreting them.
	InterpretConfigurators bool

	// MemoryLimitPages caps a configurator instance's linear memory in 64
	// KiB pages (default 512 = 32 MiB; Go guests need at least 32 pages);
	// SamplerMemoryLimitPages a sampler's (default 1024 = 64 MiB).
	MemoryLimitPages        uint32
	SamplerMemoryLimitPages uint32
	// ConstraintMemoryLimitPages caps an output-constraint instance
	// (default 4096 = 256 MiB: it holds the vocabulary's token trie and
	// the masks it caches, 16 KiB each for a 128k vocabulary).
	ConstraintMemoryLimitPages uint32
	// MaxTableElements caps every table (default 65536 entries, 512 KiB of
	// host memory; a Go guest's function table has ~6,000).
	MaxTableElements uint32

	// Load limits (issue 12): a module over one is refused before it is
	// compiled. MaxModuleBytes (default 16 MiB) is also the upload and
	// plugins-folder size cap; MaxFunctions (default 65536), MaxCodeBytes
	// (8 MiB), MaxBodyBytes (1 MiB), MaxLocals per function (50,000): they
	// bound what a compile costs. One compile runs at a time; a caller
	// stops waiting for it after CompileTimeout (default 5 min, generous:
	// a 3.4 MB Go configurator compiles in ~0.5 s on an idle core, ~5 s on
	// a loaded 2-core machine, over a minute under the race detector) or
	// when its context ends, and the worker discards the result.
	// DescribeTimeout bounds Describe's interpreted run of a module's
	// start-up and handshake (default 30 s; a Go guest takes ~0.2 s there).
	MaxModuleBytes  int
	MaxFunctions    uint32
	MaxCodeBytes    int
	MaxBodyBytes    int
	MaxLocals       uint32
	CompileTimeout  time.Duration
	DescribeTimeout time.Duration

	// InitFuel bounds instantiation (a Go guest's runtime start-up), the
	// handshake and a sampler's kvhost_sampler_init, each (default 2^28,
	// about 0.3 s); CallFuel bounds each configurator call (default 2^28).
	// The built-in configurators spend at most ~150,000 units on any call,
	// start-up included (Stats.MaxFuel; kvhost plugin check prints it).
	// A sampler step gets FuelBase + batch × (K + history) ×
	// FuelPerCandidate (defaults 2^20 and 1024: 256 rows of 64 candidates
	// get about 17 ms). One unit is one loop iteration or function entry,
	// or 16 bytes of a bulk memory operation (package fuel).
	InitFuel, CallFuel         int64
	FuelBase, FuelPerCandidate int64

	// CallTimeout is the wall-clock deadline of each configurator call
	// (default 5s) and StepDeadline of each sampler step (default 1s): a
	// call still running at its deadline has its fuel drained by the
	// watchdog, so it traps at its next loop header or function entry, and
	// fails with a *DeadlineError; so does one that returns late.
	CallTimeout  time.Duration
	StepDeadline time.Duration

	// MaxBatch is the rows a sampler or constraint instance's I/O region
	// holds (default 256); larger batches are split by the caller.
	MaxBatch int

	// Output constraints: ConstraintInitFuel bounds init (building the
	// token trie), open, fork and close (default 2^33); a step gets
	// ConstraintFuelBase + rows × vocabulary × ConstraintFuelPerToken
	// (defaults 2^24 and 256: a cold mask walks the token trie once) and
	// ConstraintStepDeadline (default 5s). MaxConstraintInstances bounds
	// the instances a constraint plugin spreads its sequences over
	// (default 4).
	ConstraintInitFuel, ConstraintFuelBase, ConstraintFuelPerToken int64
	ConstraintStepDeadline                                         time.Duration
	MaxConstraintInstances                                         int
	// MaxIdle is how many idle instances each plugin version keeps
	// (default 2 × GOMAXPROCS, at least 4).
	MaxIdle int
	// Logger receives plugin log messages and cache maintenance (nil:
	// discarded).
	Logger *slog.Logger
}

// Defaults.
const (
	DefaultMemoryLimitPages        = 512
	DefaultSamplerMemoryLimitPages = 1024
	DefaultMaxTableElements        = 1 << 16
	DefaultMaxModuleBytes          = 16 << 20
	DefaultMaxFunctions            = 1 << 16
	DefaultMaxCodeBytes            = 8 << 20
	DefaultMaxBodyBytes            = 1 << 20
	DefaultMaxLocals               = 50_000
	DefaultCompileTimeout          = 5 * time.Minute
	DefaultDescribeTimeout         = 30 * time.Second
	DefaultMaxCacheBytes           = 256 << 20
	DefaultInitFuel                = 1 << 28
	DefaultCallFuel                = 1 << 28
	DefaultFuelBase                = 1 << 20
	DefaultFuelPerCandidate        = 1024
	DefaultCallTimeout             = 5 * time.Second
	DefaultStepDeadline            = time.Second
	DefaultMaxBatch                = 256
	// minGoPages is the Go wasip1 runtime's minimum memory (2 MiB).
	minGoPages = 32
)

// DefaultCacheDir is os.UserCacheDir()/kvhost/wazero (or the temp dir when
// the user cache dir is unknown).
func DefaultCacheDir() string {
	base, err := os.UserCacheDir()
	if err != nil {
		base = os.TempDir()
	}
	return filepath.Join(base, "kvhost", "wazero")
}

func (c Config) withDefaults() Config {
	if c.CacheDir == "" {
		c.CacheDir = DefaultCacheDir()
	}
	def := func(v *int64, d int64) {
		if *v == 0 {
			*v = d
		}
	}
	def(&c.MaxCacheBytes, DefaultMaxCacheBytes)
	def(&c.InitFuel, DefaultInitFuel)
	def(&c.CallFuel, DefaultCallFuel)
	def(&c.FuelBase, DefaultFuelBase)
	def(&c.FuelPerCandidate, DefaultFuelPerCandidate)
	def(&c.ConstraintInitFuel, 1<<33)
	def(&c.ConstraintFuelBase, 1<<24)
	def(&c.ConstraintFuelPerToken, 256)
	if c.ConstraintMemoryLimitPages == 0 {
		c.ConstraintMemoryLimitPages = 4096
	}
	if c.ConstraintStepDeadline == 0 {
		c.ConstraintStepDeadline = 5 * time.Second
	}
	if c.MaxConstraintInstances == 0 {
		c.MaxConstraintInstances = 4
	}
	if c.MemoryLimitPages == 0 {
		c.MemoryLimitPages = DefaultMemoryLimitPages
	}
	if c.SamplerMemoryLimitPages == 0 {
		c.SamplerMemoryLimitPages = DefaultSamplerMemoryLimitPages
	}
	if c.MaxTableElements == 0 {
		c.MaxTableElements = DefaultMaxTableElements
	}
	if c.MaxModuleBytes == 0 {
		c.MaxModuleBytes = DefaultMaxModuleBytes
	}
	if c.MaxFunctions == 0 {
		c.MaxFunctions = DefaultMaxFunctions
	}
	if c.MaxCodeBytes == 0 {
		c.MaxCodeBytes = DefaultMaxCodeBytes
	}
	if c.MaxBodyBytes == 0 {
		c.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if c.MaxLocals == 0 {
		c.MaxLocals = DefaultMaxLocals
	}
	if c.CompileTimeout == 0 {
		c.CompileTimeout = DefaultCompileTimeout
	}
	if c.DescribeTimeout == 0 {
		c.DescribeTimeout = DefaultDescribeTimeout
	}
	if c.CallTimeout == 0 {
		c.CallTimeout = DefaultCallTimeout
	}
	if c.StepDeadline == 0 {
		c.StepDeadline = DefaultStepDeadline
	}
	if c.MaxBatch == 0 {
		c.MaxBatch = DefaultMaxBatch
	}
	if c.MaxIdle == 0 {
		c.MaxIdle = max(4, 2*runtime.GOMAXPROCS(0))
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return c
}

// Validate names the first field out of range.
func (c Config) Validate() error {
	pages := func(field string, v, lo uint32) error {
		if v != 0 && (v < lo || v > 65536) {
			return fmt.Errorf("plugin: config %s %d: want %d..65536 (64 KiB pages)", field, v, lo)
		}
		return nil
	}
	nonNeg := func(field string, v int64, def any) error {
		if v < 0 {
			return fmt.Errorf("plugin: config %s %d: want 0 (default %v) or more", field, v, def)
		}
		return nil
	}
	dur := func(field string, v time.Duration, def time.Duration) error {
		if v < 0 || v > time.Hour {
			return fmt.Errorf("plugin: config %s %v: want 0 (default %v) up to 1h", field, v, def)
		}
		return nil
	}
	for _, err := range []error{
		pages("MemoryLimitPages", c.MemoryLimitPages, minGoPages),
		pages("SamplerMemoryLimitPages", c.SamplerMemoryLimitPages, 1),
		nonNeg("MaxCacheBytes", c.MaxCacheBytes, DefaultMaxCacheBytes),
		nonNeg("MaxModuleBytes", int64(c.MaxModuleBytes), DefaultMaxModuleBytes),
		nonNeg("MaxCodeBytes", int64(c.MaxCodeBytes), DefaultMaxCodeBytes),
		nonNeg("MaxBodyBytes", int64(c.MaxBodyBytes), DefaultMaxBodyBytes),
		nonNeg("InitFuel", c.InitFuel, DefaultInitFuel),
		nonNeg("CallFuel", c.CallFuel, DefaultCallFuel),
		nonNeg("FuelBase", c.FuelBase, DefaultFuelBase),
		nonNeg("FuelPerCandidate", c.FuelPerCandidate, DefaultFuelPerCandidate),
		dur("CompileTimeout", c.CompileTimeout, DefaultCompileTimeout),
		dur("DescribeTimeout", c.DescribeTimeout, DefaultDescribeTimeout),
		dur("CallTimeout", c.CallTimeout, DefaultCallTimeout),
		dur("StepDeadline", c.StepDeadline, DefaultStepDeadline),
	} {
		if err != nil {
			return err
		}
	}
	switch {
	case c.MaxBatch < 0 || c.MaxBatch > 4096:
		return fmt.Errorf("plugin: config MaxBatch %d: want 0 (default %d) up to 4096", c.MaxBatch, DefaultMaxBatch)
	case c.MaxIdle < 0 || c.MaxIdle > 1024:
		return fmt.Errorf("plugin: config MaxIdle %d: want 0 (default 2×GOMAXPROCS) up to 1024", c.MaxIdle)
	case c.MaxModuleBytes > 1<<30:
		return fmt.Errorf("plugin: config MaxModuleBytes %d: want at most 1 GiB", c.MaxModuleBytes)
	}
	return nil
}
