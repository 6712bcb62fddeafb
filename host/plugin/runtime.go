package plugin

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvhost/kvhost/host/plugin/fuel"
	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"
)

// Runtime is the one wazero runtime (compiler, compilation cache, WASI and
// the kvhost host module) every plugin of every kind is loaded into. It is
// safe for concurrent use.
type Runtime struct {
	cfg Config
	rt  wazero.Runtime
	// validator is wazero's interpreter, with the same host modules: it
	// validates originals, and tells a module's descriptor without
	// compiling it (Describe). It honours context deadlines, and its
	// guests run as ordinary, preemptible Go code.
	validator wazero.Runtime
	cache     wazero.CompilationCache
	disk      *diskCache // nil with NoCache
	dog       *watchdog
	compiling chan struct{}  // one compile at a time
	workers   sync.WaitGroup // compile goroutines, waited for by Close
	closeOnce sync.Once
	closeErr  error

	mu       sync.Mutex
	compiled map[string]*compiledEntry // by kind/sha256 of the original bytes

	// compiles and interprets count compiler runs and Describe's
	// interpreter runs (tests check what a start compiles).
	compiles, interprets atomic.Int64
	// validates counts the interpreter's validations of an original
	// module before its instrumented copy is compiled.
	validates atomic.Int64
	closed    atomic.Bool
}

type compiledEntry struct {
	mod  wazero.CompiledModule
	refs int
}

// NewRuntime builds the runtime: compiler only, without wazero's
// close-on-context-done checks (fuel and the watchdog stop guests), the
// features package fuel decodes, a file-backed compilation cache with its
// records, WASI preview 1 (deterministic clocks and randomness, no files)
// and the kvhost host functions.
func NewRuntime(ctx context.Context, cfg Config) (*Runtime, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	rc := wazero.NewRuntimeConfigCompiler().
		WithCoreFeatures(fuel.CoreFeatures).
		WithCloseOnContextDone(false).
		WithMemoryLimitPages(max(cfg.MemoryLimitPages, cfg.SamplerMemoryLimitPages))
	r := &Runtime{cfg: cfg, compiled: map[string]*compiledEntry{}, compiling: make(chan struct{}, 1)}
	if !cfg.NoCache {
		cache, err := wazero.NewCompilationCacheWithDir(cfg.CacheDir)
		if err != nil {
			return nil, fmt.Errorf("plugin: compilation cache %s: %w", cfg.CacheDir, err)
		}
		if r.disk, err = newDiskCache(cfg.CacheDir, cfg.MaxCacheBytes, cfg.Logger); err != nil {
			_ = cache.Close(ctx)
			return nil, err
		}
		r.cache = cache
		rc = rc.WithCompilationCache(cache)
	}
	r.rt = wazero.NewRuntimeWithConfig(ctx, rc)
	r.validator = wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfigInterpreter().
		WithCoreFeatures(fuel.CoreFeatures).
		WithCloseOnContextDone(true).
		WithMemoryLimitPages(max(cfg.MemoryLimitPages, cfg.SamplerMemoryLimitPages)))
	r.dog = newWatchdog()
	for _, w := range []wazero.Runtime{r.rt, r.validator} {
		if _, err := wasi_snapshot_preview1.Instantiate(ctx, w); err != nil {
			_ = r.Close(ctx)
			return nil, fmt.Errorf("plugin: wasi: %w", err)
		}
		if err := instantiateHostModule(ctx, w, cfg.Logger); err != nil {
			_ = r.Close(ctx)
			return nil, fmt.Errorf("plugin: host module: %w", err)
		}
	}
	if r.disk != nil {
		r.disk.evict()
	}
	return r, nil
}

// Config returns the runtime's configuration with defaults filled in.
func (r *Runtime) Config() Config { return r.cfg }

// Close closes every plugin's modules, the runtime and the cache handle
// (the cache directory stays). Calls must have finished; a compile a
// caller abandoned is waited for (it cannot be interrupted).
func (r *Runtime) Close(ctx context.Context) error {
	r.closeOnce.Do(func() {
		// Hold the worker for good: no compile or Describe is in flight,
		// and later ones fail (acquire sees closed).
		r.compiling <- struct{}{}
		r.closed.Store(true)
		r.workers.Wait()
		err := r.rt.Close(ctx)
		err = errors.Join(err, r.validator.Close(ctx))
		if r.cache != nil {
			err = errors.Join(err, r.cache.Close(ctx))
		}
		if r.dog != nil {
			r.dog.close()
		}
		r.closeErr = err
	})
	return r.closeErr
}

// errClosed is what loading into a closed runtime gets.
var errClosed = errors.New("plugin: the runtime is closed")

// acquireWorker takes the compile worker, or fails when ctx ends or the
// runtime closes.
func (r *Runtime) acquireWorker(ctx context.Context, name, stage string) error {
	if r.closed.Load() {
		return refused(name, stage, errClosed)
	}
	select {
	case r.compiling <- struct{}{}:
		if r.closed.Load() {
			<-r.compiling
			return refused(name, stage, errClosed)
		}
		return nil
	case <-ctx.Done():
		return refused(name, stage, fmt.Errorf("abandoned while waiting for the compile worker: %w", ctx.Err()))
	}
}

func sum256(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// fuelOptions are the instrumentation options of a kind.
func (r *Runtime) fuelOptions(k *kindSpec) fuel.Options {
	c := r.cfg
	return fuel.Options{
		Initial: c.InitFuel, MaxTableElements: c.MaxTableElements, MaxMemoryPages: k.pages(c),
		MaxModuleBytes: c.MaxModuleBytes, MaxFunctions: c.MaxFunctions, MaxCodeBytes: c.MaxCodeBytes,
		MaxBodyBytes: c.MaxBodyBytes, MaxLocals: c.MaxLocals, MaxSectionLength: 1 << 17,
	}
}

// KindOf says which kind of plugin wasm is, from its exports (a module
// exporting neither kind's marker export counts as a configurator, the
// original kind, whose load then says what it lacks). It reads only the
// export section: it compiles, hashes and checks nothing else (loading
// does). name labels errors.
func (r *Runtime) KindOf(name string, wasm []byte) (string, error) {
	exports, err := fuel.Exports(wasm)
	return kindName(name, exports, err)
}

// kindName is KindOf's answer from a module's exports, however they were
// read (err: reading them failed).
func kindName(name string, exports []string, err error) (string, error) {
	if err != nil {
		return "", refused(name, "instrument", err)
	}
	k, err := kindOf(name, exports, configuratorKind)
	if err != nil {
		return "", refused(name, "exports", err)
	}
	return k.name, nil
}

// recorded returns the descriptor an earlier, accepted load of the same
// bytes recorded, without compiling anything.
func (r *Runtime) recorded(wasm []byte) (kind string, raw []byte, ok bool) {
	if r.disk == nil {
		return "", nil, false
	}
	rec, ok := r.disk.get(sum256(wasm))
	return rec.Kind, rec.Descriptor, ok
}

// refusal names the stage of an instrumentation failure.
func refusal(name string, err error) error {
	var le *fuel.LimitError
	if errors.As(err, &le) {
		return refused(name, "limits", err)
	}
	return refused(name, "instrument", err)
}

// prepare runs the load pipeline up to a compiled module whose imports
// are checked: load limits and index checks while instrumenting (package
// fuel, before wazero decodes anything), the kind from the exports,
// wazero's validation of the original module (skipped when a record says
// these bytes were validated before), the compile of the instrumented
// module in the bounded worker (wazero validates it again), the import
// rule and the version export. The handshake checks the other exports.
func (r *Runtime) prepare(ctx context.Context, k *kindSpec, name string, wasm []byte) (*module, error) {
	sum := sum256(wasm)
	code, st, err := fuel.Instrument(wasm, r.fuelOptions(k))
	if err != nil {
		return nil, refusal(name, err)
	}
	found, err := kindOf(name, st.Exports, k)
	if err != nil {
		return nil, refused(name, "exports", err)
	}
	if found != k {
		return nil, &KindError{Plugin: name, Want: k.name, Found: found.name}
	}
	m := &module{rt: r, kind: k, name: name, sha: sum, size: len(wasm), key: k.name + "/" + sum, engine: r.rt}
	if k == configuratorKind && r.cfg.InterpretConfigurators {
		m.engine, m.key = r.validator, m.key+"/interpreted"
	}
	var rec record
	var known bool
	if r.disk != nil {
		rec, known = r.disk.get(sum)
	}
	r.mu.Lock()
	if e, ok := r.compiled[m.key]; ok {
		// Loaded before in this process: the compiled module is shared,
		// and so is what the record says of it.
		e.refs++
		m.compiled = e.mod
		r.mu.Unlock()
		if known && rec.Accepted {
			m.rec, m.files = &rec, rec.Files
		}
	} else {
		r.mu.Unlock()
		cm, files, err := r.compile(ctx, name, m.engine, wasm, code, !known)
		if err != nil {
			return nil, err
		}
		m.compiled, m.files, m.fresh = cm, files, !(known && rec.Accepted)
		if known {
			m.rec = &rec
			if len(files) == 0 && rec.Accepted {
				m.files = rec.Files // a cache hit: nothing new written
				r.disk.touch(rec.Files)
			}
		}
		r.mu.Lock()
		if e, ok := r.compiled[m.key]; ok { // compiled concurrently
			e.refs++
			r.mu.Unlock()
			_ = cm.Close(ctx)
			m.compiled = e.mod
		} else {
			r.compiled[m.key] = &compiledEntry{mod: cm, refs: 1}
			r.mu.Unlock()
		}
	}
	if err := m.checkImports(); err != nil {
		return nil, m.refuse(ctx, "imports", err)
	}
	// The version export first: a plugin built for another ABI is told
	// so by the handshake before its other exports are judged.
	if err := m.checkExport(versionExport); err != nil {
		return nil, m.refuse(ctx, "exports", err)
	}
	return m, nil
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

// compileJob is one validate-and-compile run in the worker.
type compileJob struct {
	done chan struct{}

	mu        sync.Mutex
	abandoned bool
	finished  bool
	cm        wazero.CompiledModule
	files     []string
	stage     string
	err       error
}

// compile validates the original (when validate is set) and compiles the
// instrumented code, one module at a time. The caller waits at most
// Config.CompileTimeout, or until ctx ends (an admin client that left);
// the worker then finishes on its own, discards the result and deletes
// what it wrote to the compilation cache. It returns the compiled module
// and the compiled-code files this compile added.
func (r *Runtime) compile(ctx context.Context, name string, engine wazero.Runtime, orig, code []byte, validate bool) (wazero.CompiledModule, []string, error) {
	if err := r.acquireWorker(ctx, name, "compile"); err != nil {
		return nil, nil, err
	}
	j := &compileJob{done: make(chan struct{})}
	r.workers.Add(1)
	go r.runCompile(j, engine, orig, code, validate)
	timer := time.NewTimer(r.cfg.CompileTimeout)
	defer timer.Stop()
	var cause error
	select {
	case <-j.done:
	case <-timer.C:
		cause = fmt.Errorf("not compiled within %v (Config.CompileTimeout)", r.cfg.CompileTimeout)
	case <-ctx.Done():
		cause = fmt.Errorf("abandoned by its caller: %w", ctx.Err())
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if cause != nil && !j.finished {
		j.abandoned = true
		return nil, nil, refused(name, "compile", cause)
	}
	if j.err != nil {
		return nil, nil, refused(name, j.stage, j.err)
	}
	return j.cm, j.files, nil
}

func (r *Runtime) runCompile(j *compileJob, engine wazero.Runtime, orig, code []byte, validate bool) {
	defer r.workers.Done()
	defer func() { <-r.compiling }()
	ctx := context.Background()
	var before map[string]bool
	if r.disk != nil {
		before = r.disk.files()
	}
	var cm wazero.CompiledModule
	var err error
	stage := "validate"
	if validate {
		// The original must be valid on its own: the instrumented module
		// is compiled only then (and validated again by the compiler).
		var vm wazero.CompiledModule
		r.validates.Add(1)
		if vm, err = r.validator.CompileModule(ctx, orig); err == nil {
			_ = vm.Close(ctx)
		}
	}
	if err == nil {
		stage = "compile"
		if engine == r.rt {
			r.compiles.Add(1)
		} else {
			r.interprets.Add(1)
		}
		cm, err = engine.CompileModule(ctx, code)
	}
	var files []string
	if r.disk != nil {
		files = added(before, r.disk.files())
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	j.finished = true
	close(j.done)
	if j.abandoned || err != nil {
		if cm != nil {
			_ = cm.Close(ctx)
		}
		if r.disk != nil {
			r.disk.remove(files)
		}
		j.err, j.stage = err, stage
		return
	}
	j.cm, j.files = cm, files
	if r.disk != nil && len(files) > 0 {
		r.disk.evict()
	}
}
