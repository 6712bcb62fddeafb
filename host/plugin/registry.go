package plugin

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/kvhost/kvhost/host/plugin/allowlist"
	"github.com/kvhost/kvhost/sdk"
)

// Registry is the set of available plugins of every kind: the built-ins
// overlaid by the .wasm files of a plugins folder (same name wins). It is
// the one place both kinds' sources are listed and allowed: configurators
// are served from it (loaded on first use, kept), and the sampling
// registry takes its sampler sources, its runtime and its allow-list from
// it. Safe for concurrent use.
type Registry struct {
	rt       *Runtime
	log      *slog.Logger
	dir      string
	sources  map[string]Source
	builtins map[string]Source              // the embedded set, even where the folder overrides a name
	allow    atomic.Pointer[allowlist.List] // SetAllowSHA256 replaces it

	trustOnce sync.Once
	trusted   map[string]bool // sha256 of the built-ins' bytes, hashed on first use

	sumMu sync.Mutex
	sums  map[string]sourceSum // by name

	mu      sync.Mutex
	loaded  map[string]*Plugin
	refused map[string]bool // configurators already reported as refused
}

// RegistryOptions configure a Registry beyond its sources.
type RegistryOptions struct {
	// AllowSHA256 pins the plugins that are not built in: when set, a
	// plugin whose bytes are neither a built-in's nor listed (for its
	// name) is refused with an *allowlist.NotAllowedError before it is
	// compiled. Entries are "<hex sha256>" or "<hex sha256> <name>"
	// (allowlist.ReadFile's result). Empty allows every plugin.
	AllowSHA256 []string
	// Logger receives skipped folder entries and refused plugins (nil:
	// the runtime's).
	Logger *slog.Logger
}

// NewRegistry is NewRegistryWith without options (every plugin allowed).
func NewRegistry(rt *Runtime, builtin fs.FS, dir string) (*Registry, error) {
	return NewRegistryWith(rt, builtin, dir, RegistryOptions{})
}

// NewRegistryWith lists the *.wasm files at the root of builtin (may be
// nil) and of dir ("" for none; it must exist); a file in dir overrides
// the built-in of the same name. Folder entries that are not regular files
// or are over Config.MaxModuleBytes are skipped with a warning. Nothing is
// compiled yet.
func NewRegistryWith(rt *Runtime, builtin fs.FS, dir string, opts RegistryOptions) (*Registry, error) {
	allow, err := allowlist.New(opts.AllowSHA256)
	if err != nil {
		return nil, fmt.Errorf("plugin: options AllowSHA256: %w", err)
	}
	log := opts.Logger
	if log == nil {
		log = rt.cfg.Logger
	}
	r := &Registry{rt: rt, log: log, dir: dir, sources: map[string]Source{}, builtins: map[string]Source{}, sums: map[string]sourceSum{},
		loaded: map[string]*Plugin{}, refused: map[string]bool{}}
	r.allow.Store(allow)
	if builtin != nil {
		names, err := fs.Glob(builtin, "*.wasm")
		if err != nil {
			return nil, fmt.Errorf("plugin: built-in set: %w", err)
		}
		sums, err := readSums(builtin)
		if err != nil {
			return nil, err
		}
		for _, n := range names {
			name := strings.TrimSuffix(n, ".wasm")
			r.sources[name] = Source{Name: name, Origin: "builtin", fsys: builtin, file: n, sha: sums[n]}
			r.builtins[name] = r.sources[name]
		}
		described, err := readDescribed(builtin)
		if err != nil {
			return nil, err
		}
		r.seedDescribed(described)
	}
	if dir != "" {
		if _, err := os.Stat(dir); err != nil {
			return nil, fmt.Errorf("plugin: plugins dir: %w", err)
		}
		entries, skipped, err := ScanFolder(dir, int64(rt.cfg.MaxModuleBytes))
		if err != nil {
			return nil, err
		}
		for _, e := range skipped {
			log.Warn("plugins folder entry skipped", "err", e)
		}
		for _, e := range entries {
			b, err := ReadPluginFile(e.Path, int64(rt.cfg.MaxModuleBytes))
			if err != nil {
				log.Warn("plugins folder entry skipped", "err", err)
				continue
			}
			r.sources[e.Name] = Source{Name: e.Name, Origin: e.Path, wasm: b}
		}
	}
	return r, nil
}

// Runtime is the runtime the registry loads into.
func (r *Registry) Runtime() *Runtime { return r.rt }

// Dir is the plugins folder ("" for none).
func (r *Registry) Dir() string { return r.dir }

// Logger is where the registry logs.
func (r *Registry) Logger() *slog.Logger { return r.log }

// Names lists the available plugins of every kind, sorted.
func (r *Registry) Names() []string {
	names := make([]string, 0, len(r.sources))
	for n := range r.sources {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Source returns where the named plugin comes from.
func (r *Registry) Source(name string) (Source, bool) {
	s, ok := r.sources[name]
	return s, ok
}

// Builtin returns the embedded plugin of that name, even when a folder
// file overrides it.
func (r *Registry) Builtin(name string) (Source, bool) {
	s, ok := r.builtins[name]
	return s, ok
}

// Kind says which kind the named plugin is, compiling nothing (an earlier
// load's record, else its exports).
func (r *Registry) Kind(name string) (string, error) {
	src, ok := r.sources[name]
	if !ok {
		return "", r.unknown(name)
	}
	sum, err := r.sum(name)
	if err != nil {
		return "", err
	}
	if r.rt.disk != nil {
		if rec, ok := r.rt.disk.get(sum.sha); ok && rec.Kind != "" {
			return rec.Kind, nil
		}
	}
	if src.fsys != nil {
		// A built-in: its export section is read as a stream, the
		// bytes are not copied.
		exports, err := src.exports()
		return kindName(name, exports, err)
	}
	return r.rt.KindOf(name, src.wasm)
}

// sourceSum is a source's sha256 and size.
type sourceSum struct {
	sha  string
	size int64
}

// sum returns the named source's sha256 and size, hashed once.
func (r *Registry) sum(name string) (sourceSum, error) {
	r.sumMu.Lock()
	defer r.sumMu.Unlock()
	if s, ok := r.sums[name]; ok {
		return s, nil
	}
	src, ok := r.sources[name]
	if !ok {
		return sourceSum{}, r.unknown(name)
	}
	sha, n, err := src.sum()
	if err != nil {
		return sourceSum{}, err
	}
	r.sums[name] = sourceSum{sha, n}
	return r.sums[name], nil
}

// SHA256 is the hex sha256 of the named plugin's bytes.
func (r *Registry) SHA256(name string) (string, error) {
	s, err := r.sum(name)
	return s.sha, err
}

func (r *Registry) unknown(name string) error {
	return fmt.Errorf("plugin: no plugin named %q (have %s)", name, strings.Join(r.Names(), ", "))
}

// Trusted reports whether wasm is the bytes of a built-in.
func (r *Registry) Trusted(wasm []byte) bool { return r.isTrusted(allowlist.Sum(wasm)) }

// isTrusted reports whether sum is a built-in's sha256 (the built-ins are
// hashed on the first question, as a stream).
func (r *Registry) isTrusted(sum string) bool {
	r.trustOnce.Do(func() {
		r.trusted = map[string]bool{}
		for name := range r.builtins {
			if sha, _, err := r.builtins[name].sum(); err == nil {
				r.trusted[sha] = true
			}
		}
	})
	return r.trusted[sum]
}

// Allowed checks wasm, to be loaded as name, against the allow-list: the
// built-ins' bytes always pass; with a list, other bytes must be listed
// (for name, when the entry names one). A refusal is an
// *allowlist.NotAllowedError (errors.Is allowlist.ErrNotAllowed).
func (r *Registry) Allowed(name string, wasm []byte) error {
	if !r.allow.Load().Enabled() {
		return nil
	}
	return r.allowedSum(name, allowlist.Sum(wasm))
}

// allowedSum is Allowed for bytes with sha256 sum.
func (r *Registry) allowedSum(name, sum string) error {
	allow := r.allow.Load()
	if !allow.Enabled() || r.isTrusted(sum) {
		return nil
	}
	return allow.Check(name, sum)
}

// SetAllowSHA256 replaces the allow-list (entries as
// RegistryOptions.AllowSHA256) for every later load and Allowed check; the
// sampler watcher calls it when the --plugin-allowlist file changes. On a
// bad entry the list in force stays. The built-ins stay trusted whatever
// the list; plugins already loaded are not unloaded by losing their pin.
func (r *Registry) SetAllowSHA256(entries []string) error {
	l, err := allowlist.New(entries)
	if err != nil {
		return fmt.Errorf("plugin: allow-list: %w", err)
	}
	r.allow.Store(l)
	return nil
}

// Plugin loads (once) and returns the named configurator. Under an
// allow-list a refused plugin's error is an *allowlist.NotAllowedError
// (errors.Is allowlist.ErrNotAllowed), asked again on every call; a
// plugin of another kind is a *KindError.
func (r *Registry) Plugin(ctx context.Context, name string) (*Plugin, error) {
	src, ok := r.sources[name]
	if !ok {
		return nil, r.unknown(name)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if p, ok := r.loaded[name]; ok {
		return p, nil
	}
	wasm, err := src.Wasm()
	if err != nil {
		return nil, err
	}
	if err := r.Allowed(name, wasm); err != nil {
		return nil, fmt.Errorf("plugin: %w (from %s)", err, src.Origin)
	}
	p, err := r.rt.Load(ctx, name, wasm)
	if err != nil {
		return nil, fmt.Errorf("%w (from %s)", err, src.Origin)
	}
	r.loaded[name] = p
	return p, nil
}

// Loaded returns the named configurator if it is loaded, loading nothing
// (listings must not compile).
func (r *Registry) Loaded(name string) (*Plugin, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	p, ok := r.loaded[name]
	return p, ok
}

// Recorded returns the named plugin's kind and descriptor from the record
// of an earlier load or Describe of the same bytes, running nothing.
func (r *Registry) Recorded(name string) (kind string, raw []byte, ok bool) {
	sum, err := r.sum(name)
	if err != nil || r.rt.disk == nil {
		return "", nil, false
	}
	rec, ok := r.rt.disk.get(sum.sha)
	return rec.Kind, rec.Descriptor, ok
}

// describe returns the named configurator's descriptor without compiling
// it (Runtime.Describe: a record of the same bytes, or the interpreter),
// after the allow-list. ok is false for a plugin of another kind.
func (r *Registry) describe(ctx context.Context, name string) (d sdk.Descriptor, ok bool, err error) {
	src := r.sources[name]
	if kind, err := r.Kind(name); err == nil && kind != KindConfigurator {
		return d, false, nil
	}
	sum, err := r.sum(name)
	if err != nil {
		return d, false, err
	}
	if err := r.allowedSum(name, sum.sha); err != nil {
		return d, false, fmt.Errorf("plugin: %w (from %s)", err, src.Origin)
	}
	kind, raw, ok := r.Recorded(name)
	if !ok {
		// Not described before: the bytes are read and interpreted.
		wasm, err := src.Wasm()
		if err != nil {
			return d, false, err
		}
		if kind, raw, err = r.rt.Describe(ctx, name, wasm); err != nil {
			return d, false, fmt.Errorf("%w (from %s)", err, src.Origin)
		}
	}
	if kind != KindConfigurator {
		return d, false, nil
	}
	if d, err = sdk.ParseDescriptor(raw); err != nil {
		return d, false, &RefusedError{Plugin: name, Stage: "describe", Err: &ContractError{Plugin: name, Call: sdk.ExportDescribe, Detail: err.Error()}}
	}
	return d, true, nil
}

// ForArchitecture returns the first configurator whose descriptor claims
// the architecture and accepts the KV dtype, and whose self-test passes:
// the plugins directory's in name order, then the built-ins' (a
// configurator the user dropped in wins over a built-in claiming the same
// architecture). Claims are decided without compiling (recorded
// descriptors, else the interpreter: Runtime.Describe), so only the
// claimant is compiled; plugins of other kinds are skipped; configurators
// that fail to describe, load or self-test are skipped with a warning, and
// reported if nothing matches. Configure is the same walk that also lets a
// claimant decline the model.
func (r *Registry) ForArchitecture(ctx context.Context, arch, kvDType string) (*Plugin, error) {
	var found *Plugin
	err := r.claimants(ctx, arch, kvDType, func(p *Plugin) error {
		found = p
		return nil
	})
	return found, err
}

// Configure configures in with the first claimant of arch (ForArchitecture's
// order) that does not decline it: a configurator may claim an
// architecture whose models it serves only when their config says so, and
// answer sdk.StatusDeclined for the rest (the swa plugin takes a Mistral
// with a sliding window smaller than the context, the mha plugin every
// other Mistral), so which configurator serves a model is decided by the
// configurators, from the config they read, and nowhere in the host. Any
// other configure error is returned as it is.
func (r *Registry) Configure(ctx context.Context, arch, kvDType string, in sdk.ConfigureInput) (*Plugin, *Layout, error) {
	var found *Plugin
	var lay *Layout
	err := r.claimants(ctx, arch, kvDType, func(p *Plugin) error {
		l, err := p.Configure(ctx, in)
		if err != nil {
			return err
		}
		found, lay = p, l
		return nil
	})
	return found, lay, err
}

// claimants calls use with each loaded, self-tested configurator claiming
// arch and accepting kvDType, in ForArchitecture's order, until use
// returns nil (done) or an error other than a decline (returned); declines
// and load failures are reported with the final error when no claimant
// took the model.
func (r *Registry) claimants(ctx context.Context, arch, kvDType string, use func(*Plugin) error) error {
	var loadErrs, declines []error
	var configurators []string
	names := r.Names()
	sort.SliceStable(names, func(i, j int) bool {
		return r.sources[names[i]].Origin != "builtin" && r.sources[names[j]].Origin == "builtin"
	})
	for _, name := range names {
		d, ok, err := r.describe(ctx, name)
		if err != nil {
			loadErrs = append(loadErrs, err)
			r.reportRefused(name, err)
			continue
		}
		if !ok {
			continue
		}
		configurators = append(configurators, name)
		if !d.Claims(arch) || !d.AcceptsKVDType(kvDType) {
			continue
		}
		p, recorded := r.deferred(name, d) // accepted and self-tested before: loaded on demand
		if !recorded {
			if p, err = r.Plugin(ctx, name); err == nil {
				err = r.selfTest(ctx, p)
			}
			if err != nil {
				loadErrs = append(loadErrs, err)
				r.reportRefused(name, err)
				continue
			}
		}
		err = use(p)
		if errors.Is(err, sdk.ErrDeclined) {
			declines = append(declines, err)
			continue
		}
		return err
	}
	what := "claims"
	if len(declines) > 0 {
		what = "serves this model of"
	}
	err := fmt.Errorf("plugin: no configurator %s architecture %q with kv_dtype %q among %s",
		what, arch, kvDType, strings.Join(configurators, ", "))
	return errors.Join(append(append([]error{err}, declines...), loadErrs...)...)
}

// deferred returns the named configurator as a deferred Plugin (loaded on
// the first call whose answer is not recorded) when answers are recalled
// and a record says these bytes were accepted and passed the self-test;
// one already loaded is returned as it is. The caller has checked the
// allow-list (describe).
func (r *Registry) deferred(name string, d sdk.Descriptor) (*Plugin, bool) {
	if !r.rt.cfg.RecallAnswers || r.rt.disk == nil {
		return nil, false
	}
	src := r.sources[name]
	sum, err := r.sum(name)
	if err != nil {
		return nil, false
	}
	rec, ok := r.rt.disk.get(sum.sha)
	if !ok || rec.Kind != KindConfigurator || !rec.Accepted || !rec.SelfTested {
		return nil, false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if p, ok := r.loaded[name]; ok {
		return p, true
	}
	p := &Plugin{desc: d, name: name, sha: sum.sha, size: int(sum.size), disk: r.rt.disk,
		load: func(ctx context.Context) (*module, error) {
			wasm, err := src.Wasm()
			if err != nil {
				return nil, err
			}
			if sum256(wasm) != sum.sha {
				return nil, fmt.Errorf("plugin: %s changed since it was hashed (from %s)", name, src.Origin)
			}
			q, err := r.rt.Load(ctx, name, wasm)
			if err != nil {
				return nil, fmt.Errorf("%w (from %s)", err, src.Origin)
			}
			return q.m, nil
		}}
	r.loaded[name] = p
	return p, true
}

// selfTest runs a configurator's self-test once per version (and not at
// all when a record says these bytes passed it); a failure unloads it.
func (r *Registry) selfTest(ctx context.Context, p *Plugin) error {
	if p.selfTested() {
		return nil
	}
	if _, err := p.SelfTest(ctx); err != nil {
		r.mu.Lock()
		if r.loaded[p.Name()] == p {
			delete(r.loaded, p.Name())
		}
		r.mu.Unlock()
		_ = p.Close(ctx)
		return refused(p.Name(), "self-test", err)
	}
	p.markSelfTested()
	return nil
}

// reportRefused logs a configurator that cannot serve, once per name.
func (r *Registry) reportRefused(name string, err error) {
	r.mu.Lock()
	seen := r.refused[name]
	r.refused[name] = true
	r.mu.Unlock()
	if !seen {
		r.log.Warn("configurator plugin refused; the others are tried", "plugin", name, "err", firstLine(err.Error()))
	}
}

// Unload closes the named configurator if it is loaded; a later Plugin
// loads it again (from the compile cache). Its records stay, so listings
// still show its descriptor. Serve unloads the configurator once the KV
// pools are sized: nothing calls it while serving, and a loaded one holds
// its compiled code and an instance (tens of MiB for a Go guest).
func (r *Registry) Unload(ctx context.Context, name string) error {
	r.mu.Lock()
	p, ok := r.loaded[name]
	delete(r.loaded, name)
	r.mu.Unlock()
	if !ok {
		return nil
	}
	return p.Close(ctx)
}

// Close closes every loaded configurator.
func (r *Registry) Close(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	var err error
	for name, p := range r.loaded {
		err = errors.Join(err, p.Close(ctx))
		delete(r.loaded, name)
	}
	return err
}
