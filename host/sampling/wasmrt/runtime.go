package wasmrt

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"
)

// Termination selects how runaway guests are stopped.
type Termination int

const (
	// TerminateFuel instruments modules with a fuel counter (the default).
	TerminateFuel Termination = iota
	// TerminateContext uses wazero's close-on-context-done checks; every
	// call then runs under Config.Deadline. Slow (for comparison).
	TerminateContext
	// TerminateNone stops nothing: trusted, reviewed modules only.
	TerminateNone
)

// Config configures a Runtime; zero fields take defaults in a copy.
type Config struct {
	// MaxBatch is the batch size every instance's I/O region holds
	// (default 256); larger batches are split by the caller.
	MaxBatch int
	// MemoryLimitPages caps each instance's memory (default 1024 = 64 MiB).
	MemoryLimitPages uint32
	// FuelBase and FuelPerCandidate size each call's budget in loop
	// iterations and function entries: FuelBase + batch × (k + history) ×
	// FuelPerCandidate (defaults 1<<20 and 1024: a C sampler loop
	// iteration costs about 1 ns, so 256 × 64 candidates get at most
	// about 17 ms). InitFuel bounds instantiation and
	// kvhost_sampler_init (default 1<<31).
	FuelBase, FuelPerCandidate, InitFuel int64
	// Deadline is the per-step latency a step should stay under (default
	// 1s): a step that took longer is counted in Stats.Overruns (with
	// fuel, the step cannot be interrupted, only bounded). Under
	// TerminateContext it is a hard deadline.
	Deadline time.Duration
	// MaxIdle is how many idle instances a module keeps (default
	// 2×GOMAXPROCS).
	MaxIdle     int
	Termination Termination
	// CacheDir holds the compilation cache ("" = user cache dir/kvhost/
	// wazero-samplers); NoCache disables it.
	CacheDir string
	NoCache  bool
}

func (c Config) withDefaults() Config {
	if c.MaxBatch == 0 {
		c.MaxBatch = 256
	}
	if c.MemoryLimitPages == 0 {
		c.MemoryLimitPages = 1024
	}
	if c.FuelBase == 0 {
		c.FuelBase = 1 << 20
	}
	if c.FuelPerCandidate == 0 {
		c.FuelPerCandidate = 1024
	}
	if c.InitFuel == 0 {
		c.InitFuel = 1 << 31
	}
	if c.Deadline == 0 {
		c.Deadline = time.Second
	}
	if c.MaxIdle == 0 {
		c.MaxIdle = 2 * runtime.GOMAXPROCS(0)
	}
	if c.CacheDir == "" {
		base, err := os.UserCacheDir()
		if err != nil {
			base = os.TempDir()
		}
		c.CacheDir = filepath.Join(base, "kvhost", "wazero-samplers")
	}
	return c
}

// Validate names the first field out of range.
func (c Config) Validate() error {
	switch {
	case c.MaxBatch < 0 || c.MaxBatch > 4096:
		return fmt.Errorf("wasmrt: config MaxBatch %d: want 0 (default 256) up to 4096", c.MaxBatch)
	case c.MemoryLimitPages != 0 && (c.MemoryLimitPages < 2 || c.MemoryLimitPages > 65536):
		return fmt.Errorf("wasmrt: config MemoryLimitPages %d: want 2..65536", c.MemoryLimitPages)
	case c.FuelBase < 0 || c.FuelPerCandidate < 0 || c.InitFuel < 0:
		return fmt.Errorf("wasmrt: config fuel must not be negative")
	case c.Deadline < 0 || c.MaxIdle < 0:
		return fmt.Errorf("wasmrt: config Deadline and MaxIdle must not be negative")
	case c.Termination < TerminateFuel || c.Termination > TerminateNone:
		return fmt.Errorf("wasmrt: config Termination %d unknown", c.Termination)
	}
	return nil
}

// Runtime compiles and hosts sampler modules. Safe for concurrent use.
type Runtime struct {
	cfg   Config
	rt    wazero.Runtime
	cache wazero.CompilationCache
}

// NewRuntime builds the wazero runtime: compiler only, a memory cap per
// instance, WASI preview 1 for Go guests (no files, fake clocks and
// deterministic randomness: wazero's defaults).
func NewRuntime(ctx context.Context, cfg Config) (*Runtime, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	rc := wazero.NewRuntimeConfigCompiler().
		WithMemoryLimitPages(cfg.MemoryLimitPages).
		WithCloseOnContextDone(cfg.Termination == TerminateContext)
	r := &Runtime{cfg: cfg}
	if !cfg.NoCache {
		cache, err := wazero.NewCompilationCacheWithDir(cfg.CacheDir)
		if err != nil {
			return nil, fmt.Errorf("wasmrt: compilation cache %s: %w", cfg.CacheDir, err)
		}
		r.cache = cache
		rc = rc.WithCompilationCache(cache)
	}
	r.rt = wazero.NewRuntimeWithConfig(ctx, rc)
	if _, err := wasi_snapshot_preview1.Instantiate(ctx, r.rt); err != nil {
		_ = r.Close(ctx)
		return nil, fmt.Errorf("wasmrt: wasi: %w", err)
	}
	return r, nil
}

// Config returns the configuration with defaults filled in.
func (r *Runtime) Config() Config { return r.cfg }

// Close closes every module and the runtime.
func (r *Runtime) Close(ctx context.Context) error {
	err := r.rt.Close(ctx)
	if r.cache != nil {
		err = errors.Join(err, r.cache.Close(ctx))
	}
	return err
}
