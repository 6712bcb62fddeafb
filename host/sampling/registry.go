package sampling

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvhost/kvhost/host/plugin"
	"github.com/kvhost/kvhost/host/plugin/builtin"
	"github.com/kvhost/kvhost/sdk/sampler"
)

// Sources of a policy version.
const (
	SourceBuiltin = "built-in"
	SourceFolder  = "folder"
	SourceUpload  = "upload"
)

// Options configure a Registry; zero fields take defaults.
type Options struct {
	// Plugins is the plugin registry (one for every plugin kind) whose
	// runtime, sampler sources — the built-ins overlaid by the plugins
	// folder — and allow-list the policies come from. Nil builds one over
	// Builtins (default: the embedded set) with a runtime of its own,
	// configured by Runtime and AllowSHA256, which Close closes.
	Plugins     *plugin.Registry
	Runtime     plugin.Config
	Builtins    fs.FS
	AllowSHA256 []string
	// NoBuiltins loads none of the sources at construction (tests that
	// Swap their own).
	NoBuiltins bool
	// Default is the policy a request without a sampler field gets
	// (default "standard"); it cannot be removed.
	Default string
	Logger  *slog.Logger
	// AllowlistFile is the file AllowSHA256 was read from, if any. Watch
	// re-reads it whenever it changes, before scanning the folder, so a
	// plugin and its pin can arrive together (one ConfigMap update); a
	// folder file refused under the old list is tried again under the new
	// one. A file that no longer parses is logged and the previous list
	// stays. A new list governs loads from then on: versions already
	// serving are not unloaded by losing their pin (remove the file).
	AllowlistFile string
	// DisableAfter is how many consecutive failed steps (guest faults:
	// traps, fuel, deadlines, contract breaches; not cancelled contexts)
	// disable a policy version (default DefaultDisableAfter; negative:
	// never). A disabled policy keeps its name and parameters, its steps
	// run on the default policy, and a successful Swap of the name
	// re-enables it.
	DisableAfter int
}

// policy is one loaded version of a policy; the registry publishes it in
// a plugin.Generation, which drains and closes it when swapped out.
type policy struct {
	mod     *plugin.Sampler
	schema  *schema
	source  string
	version string // "<descriptor version>+<sha256[:12]>", as in Choice
	loaded  time.Time
	// consecutive counts failed steps since the last success; disabled is
	// set (once) when it reaches Options.DisableAfter.
	consecutive atomic.Int64
	disabled    atomic.Pointer[PolicyDisabledError]
}

// generation is a published policy version with its reference count.
type generation = plugin.Generation[*policy]

// entry is one policy name: its current generation and lifetime counters.
type entry struct {
	cur             plugin.Current[*policy]
	calls, failures atomic.Int64
	swaps           atomic.Int64
	fallbacks       atomic.Int64 // rows of this name served by a fallback
}

// acquire returns the current generation with a reference held.
func (e *entry) acquire() *generation { return e.cur.Acquire() }

// Registry holds the sampling policies by name, serves steps lock-free and
// swaps versions atomically. Safe for concurrent use.
type Registry struct {
	plugins  *plugin.Registry
	rt       *plugin.Runtime
	ownRT    bool // built by NewRegistry: closed by Close
	opts     Options
	log      *slog.Logger
	builtins map[string][]byte // the embedded bytes of each built-in policy

	mu       sync.Mutex // serialises writers (Swap, Remove)
	policies atomic.Pointer[map[string]*entry]
	scratch  chan *batchScratch // free list (a channel: unlike sync.Pool it never drops items, so steps stay allocation-free)
}

// NewRegistry loads the sampler sources of the plugin registry (the
// built-ins, overridden by the plugins folder's files of the same name);
// sources of other kinds are left to their registries.
func NewRegistry(ctx context.Context, opts Options) (*Registry, error) {
	if opts.Default == "" {
		opts.Default = "standard"
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if opts.DisableAfter == 0 {
		opts.DisableAfter = DefaultDisableAfter
	}
	if opts.Plugins != nil && (len(opts.AllowSHA256) > 0 || opts.Builtins != nil) {
		// Both belong to the plugin registry when one is given: refuse
		// rather than ignore them.
		return nil, errors.New("sampling: options AllowSHA256 and Builtins configure the registry's own plugin registry; with Plugins set, give them to plugin.NewRegistryWith")
	}
	r := &Registry{opts: opts, log: opts.Logger, builtins: map[string][]byte{}, plugins: opts.Plugins}
	if r.plugins == nil {
		rt, err := plugin.NewRuntime(ctx, opts.Runtime)
		if err != nil {
			return nil, err
		}
		fsys := opts.Builtins
		if fsys == nil {
			fsys = builtin.FS()
		}
		if r.plugins, err = plugin.NewRegistryWith(rt, fsys, "", plugin.RegistryOptions{AllowSHA256: opts.AllowSHA256, Logger: opts.Logger}); err != nil {
			_ = rt.Close(ctx)
			return nil, fmt.Errorf("sampling: %w", err)
		}
		r.ownRT = true
	}
	r.rt = r.plugins.Runtime()
	r.policies.Store(&map[string]*entry{})
	r.scratch = make(chan *batchScratch, 64)
	for _, name := range r.plugins.Names() {
		b, ok := r.plugins.Builtin(name)
		if !ok {
			continue
		}
		if src, _ := r.plugins.Source(name); src.Builtin() {
			// The kind of a built-in nothing overrides comes from its
			// record: a configurator's bytes are not read for it.
			if kind, err := r.plugins.Kind(name); err != nil || kind != plugin.KindSampler {
				continue
			}
		}
		if wasm, err := b.Wasm(); err == nil && r.isSampler(name, wasm) {
			r.builtins[name] = wasm
		}
	}
	if !opts.NoBuiltins {
		for _, name := range r.plugins.Names() {
			src, _ := r.plugins.Source(name)
			if kind, err := r.plugins.Kind(name); err != nil || kind != plugin.KindSampler {
				continue
			}
			source := SourceBuiltin
			if !src.Builtin() {
				source = SourceFolder
			}
			wasm, err := src.Wasm()
			if err == nil {
				err = r.Swap(ctx, name, wasm, source)
			}
			if err != nil {
				if source == SourceBuiltin {
					_ = r.Close(ctx)
					return nil, fmt.Errorf("sampling: built-in %s: %w", name, err)
				}
				r.log.Error("sampler file refused", "file", src.Origin, "err", err)
			}
		}
	}
	return r, nil
}

// isSampler tells a sampler's bytes from another kind's, compiling
// nothing.
func (r *Registry) isSampler(name string, wasm []byte) bool {
	kind, err := r.rt.KindOf(name, wasm)
	return err == nil && kind == plugin.KindSampler
}

// MaxModuleBytes is the size cap of an uploaded policy (the runtime's).
func (r *Registry) MaxModuleBytes() int64 { return int64(r.rt.Config().MaxModuleBytes) }

// Close closes every policy and, when NewRegistry built it, the runtime.
// Steps must have finished.
// SetAllowSHA256 replaces the sha256 allow-list of the plugin registry
// (entries as Options.AllowSHA256) for every later Swap; Watch calls it
// when Options.AllowlistFile changes. On a bad entry the list in force
// stays. Built-ins stay trusted whatever the list.
func (r *Registry) SetAllowSHA256(entries []string) error {
	if err := r.plugins.SetAllowSHA256(entries); err != nil {
		return fmt.Errorf("sampling: %w", err)
	}
	return nil
}

func (r *Registry) Close(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, e := range *r.policies.Load() {
		e.cur.Swap(nil)
	}
	r.policies.Store(&map[string]*entry{})
	if r.ownRT {
		return r.rt.Close(ctx)
	}
	return nil
}

// Default is the policy used when a request names none.
func (r *Registry) Default() string { return r.opts.Default }

func (r *Registry) entry(name string) *entry {
	if name == "" {
		name = r.opts.Default
	}
	return (*r.policies.Load())[name]
}

func (r *Registry) names() []string {
	m := *r.policies.Load()
	out := make([]string, 0, len(m))
	for n, e := range m {
		if e.cur.Peek() != nil {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out
}

// Swap loads wasm as the new version of policy name: it compiles,
// handshakes and self-tests it (plugin.Runtime.LoadSampler), checks the
// descriptor's name matches, then switches atomically. Steps already
// running finish on the old version, which closes once drained. On any
// failure the old version keeps serving and the error (a
// *plugin.RefusedError, a *plugin.KindError for another kind of plugin,
// or a name mismatch) says why. Bytes the plugin registry's allow-list
// does not permit are refused first, before compiling, with an
// *allowlist.NotAllowedError (errors.Is allowlist.ErrNotAllowed). A
// successful Swap re-enables a policy disabled by repeated failures.
func (r *Registry) Swap(ctx context.Context, name string, wasm []byte, source string) error {
	if !sampler.ValidName(name) {
		return fmt.Errorf("sampling: sampler name %q: want lowercase letters, digits, '.', '_' or '-' (1–64 bytes)", name)
	}
	if err := r.plugins.Allowed(name, wasm); err != nil {
		return fmt.Errorf("sampling: %s from %s: %w", name, source, err)
	}
	mod, err := r.rt.LoadSampler(ctx, name, wasm)
	if err != nil {
		return err
	}
	d := mod.Descriptor()
	if d.Name != name {
		_ = mod.Close(ctx)
		return &plugin.RefusedError{Plugin: name, Stage: "describe", Err: fmt.Errorf("descriptor names the sampler %q, not %q", d.Name, name)}
	}
	p := &policy{mod: mod, schema: newSchema(d), source: source, version: d.Version + "+" + mod.SHA256()[:12], loaded: time.Now()}
	g := plugin.NewGeneration(p, func() { _ = mod.Close(context.Background()) })
	r.mu.Lock()
	defer r.mu.Unlock()
	old := *r.policies.Load()
	e, ok := old[name]
	if !ok {
		e = &entry{}
		next := make(map[string]*entry, len(old)+1)
		for k, v := range old {
			next[k] = v
		}
		next[name] = e
		e.cur.Swap(g)
		r.policies.Store(&next)
	} else if prev := e.cur.Swap(g); prev != nil {
		if d := prev.Value.disabled.Load(); d != nil {
			r.log.Info("sampler re-enabled by a new version", "name", name, "version", p.version, "disabled_version", d.Version)
		}
	}
	e.swaps.Add(1)
	r.log.Info("sampler loaded", "name", name, "version", p.version, "source", source)
	return nil
}

// Remove unloads a policy; steps in flight finish on it first. The
// default policy cannot be removed (*DefaultPolicyError): every request
// that names no policy needs it.
func (r *Registry) Remove(name string) error {
	if name == r.opts.Default {
		return &DefaultPolicyError{Policy: name}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	old := *r.policies.Load()
	e, ok := old[name]
	if !ok || e.cur.Peek() == nil {
		return &UnknownPolicyError{Policy: name, Available: r.names()}
	}
	next := make(map[string]*entry, len(old))
	for k, v := range old {
		if k != name {
			next[k] = v
		}
	}
	r.policies.Store(&next)
	e.cur.Swap(nil)
	r.log.Info("sampler removed", "name", name)
	return nil
}

// Info describes one loaded policy (GET /admin/samplers).
type Info struct {
	Name       string          `json:"name"`
	Version    string          `json:"version"` // as in Choice.Version
	SHA256     string          `json:"sha256"`
	Source     string          `json:"source"`
	Loaded     time.Time       `json:"loaded"`
	Candidates int             `json:"candidates"`
	PreOps     []string        `json:"preops"`
	Params     []sampler.Param `json:"params"`   // host pre-op params first
	Calls      int64           `json:"calls"`    // steps since the name was first loaded
	Failures   int64           `json:"failures"` // failed steps, same span
	Swaps      int64           `json:"swaps"`
	MeanStep   time.Duration   `json:"mean_step_ns"` // current version
	MaxStep    time.Duration   `json:"max_step_ns"`
	Overruns   int64           `json:"overruns"` // current version's steps over their deadline (each failed and fell back)
	// Disabled: the current version failed DisableAfter steps in a row
	// and its sequences are served by the default policy (or, when that
	// cannot, the host sampler) until a Swap; DisabledAt and LastError say
	// when and why. ConsecutiveFailures is the current run of failures.
	Disabled            bool      `json:"disabled"`
	DisabledAt          time.Time `json:"disabled_at,omitzero"`
	LastError           string    `json:"last_error,omitempty"`
	ConsecutiveFailures int64     `json:"consecutive_failures"`
	// Fallbacks counts rows of this name served by a fallback (the default
	// policy, or the host sampler when it cannot) after a failed step or
	// while disabled, since the name was first loaded; metrics export it
	// as kvhost_sampler_fallbacks_total.
	Fallbacks int64 `json:"fallbacks"`
}

// List returns the loaded policies sorted by name.
func (r *Registry) List() []Info {
	var out []Info
	for _, name := range r.names() {
		e := r.entry(name)
		if e == nil {
			continue
		}
		g := e.acquire()
		if g == nil {
			continue
		}
		p := g.Value
		d := p.mod.Descriptor()
		st := p.mod.Stats()
		info := Info{
			Name: name, Version: p.version, SHA256: p.mod.SHA256(), Source: p.source, Loaded: p.loaded,
			Candidates: d.Candidates, PreOps: slices.Clone(d.PreOps), Params: slices.Clone(p.schema.all),
			Calls: e.calls.Load(), Failures: e.failures.Load(), Swaps: e.swaps.Load(),
			MeanStep: st.Mean, MaxStep: st.Max, Overruns: st.Overruns,
			ConsecutiveFailures: p.consecutive.Load(), Fallbacks: e.fallbacks.Load(),
		}
		if dis := p.disabled.Load(); dis != nil {
			last, _, _ := strings.Cut(dis.LastErr.Error(), "\n") // not wazero's stack trace
			info.Disabled, info.DisabledAt, info.LastError = true, dis.DisabledAt, last
		}
		out = append(out, info)
		g.Release()
	}
	return out
}

// ValidateParams checks a request's parameters against the current
// version of policy ("" = the default) and returns them compiled. An
// unknown policy is an *UnknownPolicyError; an unknown, non-numeric or
// out-of-range parameter a *ParamError naming it (both HTTP 400).
func (r *Registry) ValidateParams(policy string, params map[string]any) (Compiled, error) {
	if policy == "" {
		policy = r.opts.Default
	}
	e := r.entry(policy)
	var g *generation
	if e != nil {
		g = e.acquire()
	}
	if g == nil {
		return Compiled{}, &UnknownPolicyError{Policy: policy, Available: r.names()}
	}
	defer g.Release()
	values, err := g.Value.schema.validate(policy, params)
	if err != nil {
		return Compiled{}, err
	}
	c := Compiled{policy: policy, values: values}
	c.resolve(g.Value.schema)
	return c, nil
}
