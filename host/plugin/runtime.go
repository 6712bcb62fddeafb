package plugin

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"
)

// Config configures a Runtime. The zero value is usable: defaults are
// filled into a copy by NewRuntime.
type Config struct {
	// CacheDir holds wazero's file-backed compilation cache; "" means
	// DefaultCacheDir(). NoCache turns the file cache off (tests of cold
	// compiles).
	CacheDir string
	NoCache  bool
	// MemoryLimitPages caps each plugin instance's linear memory in 64 KiB
	// pages (default 512 = 32 MiB; Go guests need at least 32 pages).
	MemoryLimitPages uint32
	// CallTimeout is the deadline of every plugin call, instantiation
	// included (default 5s).
	CallTimeout time.Duration
	// MaxIdle is how many idle instances each plugin keeps (default 4).
	MaxIdle int
	// Logger receives plugin log messages (nil: discarded).
	Logger *slog.Logger
}

// Defaults.
const (
	DefaultMemoryLimitPages = 512
	DefaultCallTimeout      = 5 * time.Second
	DefaultMaxIdle          = 4
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
	if c.MemoryLimitPages == 0 {
		c.MemoryLimitPages = DefaultMemoryLimitPages
	}
	if c.CallTimeout == 0 {
		c.CallTimeout = DefaultCallTimeout
	}
	if c.MaxIdle == 0 {
		c.MaxIdle = DefaultMaxIdle
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return c
}

// Validate names the first field out of range.
func (c Config) Validate() error {
	if c.MemoryLimitPages != 0 && (c.MemoryLimitPages < minGoPages || c.MemoryLimitPages > 65536) {
		return fmt.Errorf("plugin: config MemoryLimitPages %d: want %d..65536 (64 KiB pages)", c.MemoryLimitPages, minGoPages)
	}
	if c.CallTimeout < 0 || c.CallTimeout > time.Hour {
		return fmt.Errorf("plugin: config CallTimeout %v: want 0 (default %v) up to 1h", c.CallTimeout, DefaultCallTimeout)
	}
	if c.MaxIdle < 0 || c.MaxIdle > 1024 {
		return fmt.Errorf("plugin: config MaxIdle %d: want 0 (default %d) up to 1024", c.MaxIdle, DefaultMaxIdle)
	}
	return nil
}

// Runtime is one wazero runtime (compiler, compilation cache, WASI and the
// kvhost host module) shared by the plugins loaded into it. It is safe for
// concurrent use.
type Runtime struct {
	cfg   Config
	rt    wazero.Runtime
	cache wazero.CompilationCache

	mu       sync.Mutex
	compiled map[string]*compiledEntry // by sha256
}

type compiledEntry struct {
	mod  wazero.CompiledModule
	refs int
}

// NewRuntime builds a runtime: compiler only, file-backed compilation
// cache, close-on-context-done, a memory limit per instance, WASI preview 1
// (deterministic clocks and randomness, no files) and the kvhost imports.
func NewRuntime(ctx context.Context, cfg Config) (*Runtime, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	rc := wazero.NewRuntimeConfigCompiler().
		WithCloseOnContextDone(true).
		WithMemoryLimitPages(cfg.MemoryLimitPages)
	var cache wazero.CompilationCache
	if !cfg.NoCache {
		var err error
		if cache, err = wazero.NewCompilationCacheWithDir(cfg.CacheDir); err != nil {
			return nil, fmt.Errorf("plugin: compilation cache %s: %w", cfg.CacheDir, err)
		}
		rc = rc.WithCompilationCache(cache)
	}
	r := &Runtime{cfg: cfg, rt: wazero.NewRuntimeWithConfig(ctx, rc), cache: cache, compiled: map[string]*compiledEntry{}}
	if _, err := wasi_snapshot_preview1.Instantiate(ctx, r.rt); err != nil {
		_ = r.Close(ctx)
		return nil, fmt.Errorf("plugin: wasi: %w", err)
	}
	if err := instantiateHostModule(ctx, r.rt, cfg.Logger); err != nil {
		_ = r.Close(ctx)
		return nil, fmt.Errorf("plugin: host module: %w", err)
	}
	return r, nil
}

// Config returns the runtime's configuration with defaults filled in.
func (r *Runtime) Config() Config { return r.cfg }

// Close closes every plugin's modules, the runtime and the cache handle
// (the cache directory stays).
func (r *Runtime) Close(ctx context.Context) error {
	err := r.rt.Close(ctx)
	if r.cache != nil {
		err = errors.Join(err, r.cache.Close(ctx))
	}
	return err
}

// compile returns the CompiledModule for wasm, compiling it at most once
// per runtime (and, through the file cache, once per machine).
func (r *Runtime) compile(ctx context.Context, wasm []byte) (string, wazero.CompiledModule, error) {
	sum := sha256.Sum256(wasm)
	key := hex.EncodeToString(sum[:])
	r.mu.Lock()
	defer r.mu.Unlock()
	if e, ok := r.compiled[key]; ok {
		e.refs++
		return key, e.mod, nil
	}
	mod, err := r.rt.CompileModule(ctx, wasm)
	if err != nil {
		return "", nil, err
	}
	r.compiled[key] = &compiledEntry{mod: mod, refs: 1}
	return key, mod, nil
}

// release drops one reference to a compiled module, closing it with the last.
func (r *Runtime) release(ctx context.Context, key string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e, ok := r.compiled[key]
	if !ok {
		return
	}
	if e.refs--; e.refs == 0 {
		delete(r.compiled, key)
		_ = e.mod.Close(ctx)
	}
}

// signature renders a function type as "(i32,i64)->i32".
func signature(params, results []api.ValueType) string {
	s := "("
	for i, p := range params {
		if i > 0 {
			s += ","
		}
		s += api.ValueTypeName(p)
	}
	s += ")->("
	for i, p := range results {
		if i > 0 {
			s += ","
		}
		s += api.ValueTypeName(p)
	}
	return s + ")"
}
