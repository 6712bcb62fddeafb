package sampling

import (
	"context"

	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvhost/kvhost/host/plugin/allowlist"
	"github.com/kvhost/kvhost/host/sampling/builtin"
	"github.com/kvhost/kvhost/host/sampling/wasmrt"
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
	Runtime wasmrt.Config
	// Default is the policy a request without a sampler field gets
	// (default "standard").
	Default string
	// NoBuiltins skips loading the built-in policies; Builtins replaces
	// the embedded set (package builtin) with another folder of
	// <name>.wasm files (tests use the freshly built ones on disk).
	NoBuiltins bool
	Builtins   fs.FS
	Logger     *slog.Logger
	// AllowSHA256 pins every policy that is not a built-in: when set, Swap
	// refuses (with an *allowlist.NotAllowedError, before compiling
	// anything) a module whose sha256 is not listed, or is listed under
	// another name. Entries are "<hex sha256>" or "<hex sha256> <name>"
	// (allowlist.ReadFile's result). Empty allows every module. The
	// built-ins (the embedded set, or Builtins) are always trusted: their
	// bytes are exempt whatever the source label.
	AllowSHA256 []string
	// AllowlistFile is the file AllowSHA256 was read from, if any. Watch
	// re-reads it whenever it changes, before scanning the folder, so a
	// plugin and its pin can arrive together (one ConfigMap update); a
	// folder file refused under the old list is tried again under the new
	// one. A file that no longer parses is logged and the previous list
	// stays. A new list governs loads from then on: versions already
	// serving are not unloaded by losing their pin (remove the file).
	AllowlistFile string
	// DisableAfter is how many consecutive failed steps (guest faults:
	// traps, fuel, contract breaches; not cancelled contexts) disable a
	// policy version (default DefaultDisableAfter; negative: never). A
	// disabled policy keeps its name and parameters, its steps run on the
	// default policy, and a successful Swap of the name re-enables it.
	DisableAfter int
}

// generation is one loaded version of a policy, reference-counted: the
// registry holds one reference while it is current, each step in flight
// one more; the last release closes its module.
type generation struct {
	mod     *wasmrt.Module
	schema  *schema
	source  string
	version string // "<descriptor version>+<sha256[:12]>", as in Choice
	loaded  time.Time
	refs    atomic.Int64
	closing sync.Once
	// consecutive counts failed steps since the last success; disabled is
	// set (once) when it reaches Options.DisableAfter.
	consecutive atomic.Int64
	disabled    atomic.Pointer[PolicyDisabledError]
}

func (g *generation) release() {
	if g.refs.Add(-1) == 0 {
		g.closing.Do(func() { _ = g.mod.Close(context.Background()) })
	}
}

// entry is one policy name: its current generation and lifetime counters.
type entry struct {
	cur             atomic.Pointer[generation]
	calls, failures atomic.Int64
	swaps           atomic.Int64
	fallbacks       atomic.Int64 // rows of this name served by a fallback
}

// acquire returns the current generation with a reference held.
func (e *entry) acquire() *generation {
	for {
		g := e.cur.Load()
		if g == nil {
			return nil
		}
		g.refs.Add(1)
		if e.cur.Load() == g {
			return g
		}
		g.release() // swapped meanwhile: retry on the new one
	}
}

// Registry holds the sampling policies by name, serves steps lock-free and
// swaps versions atomically. Safe for concurrent use.
type Registry struct {
	rt       *wasmrt.Runtime
	opts     Options
	log      *slog.Logger
	builtins map[string][]byte
	trusted  map[string]bool // sha256 of the built-ins' bytes
	allow    atomic.Pointer[allowlist.List]

	mu       sync.Mutex // serialises writers (Swap, Remove)
	policies atomic.Pointer[map[string]*entry]
	scratch  chan *batchScratch // free list (a channel: unlike sync.Pool it never drops items, so steps stay allocation-free)
}

// NewRegistry builds the runtime and loads the built-in policies.
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
	allow, err := allowlist.New(opts.AllowSHA256)
	if err != nil {
		return nil, fmt.Errorf("sampling: options AllowSHA256: %w", err)
	}
	rt, err := wasmrt.NewRuntime(ctx, opts.Runtime)
	if err != nil {
		return nil, err
	}
	r := &Registry{rt: rt, opts: opts, log: opts.Logger, builtins: map[string][]byte{}, trusted: map[string]bool{}}
	r.allow.Store(allow)
	r.policies.Store(&map[string]*entry{})
	r.scratch = make(chan *batchScratch, 64)
	if !opts.NoBuiltins {
		fsys := opts.Builtins
		if fsys == nil {
			fsys = builtin.FS()
		}
		names, err := fs.Glob(fsys, "*.wasm")
		if err != nil {
			return nil, err
		}
		for _, file := range names {
			b, err := fs.ReadFile(fsys, file)
			if err != nil {
				return nil, err
			}
			name := strings.TrimSuffix(file, ".wasm")
			r.builtins[name] = b
			r.trusted[allowlist.Sum(b)] = true
			if err := r.Swap(ctx, name, b, SourceBuiltin); err != nil {
				_ = r.Close(ctx)
				return nil, fmt.Errorf("sampling: built-in %s: %w", name, err)
			}
		}
	}
	return r, nil
}

// SetAllowSHA256 replaces the sha256 allow-list (entries as
// Options.AllowSHA256) for every later Swap; Watch calls it when
// Options.AllowlistFile changes. On a bad entry the list in force stays.
// Built-ins stay trusted whatever the list.
func (r *Registry) SetAllowSHA256(entries []string) error {
	l, err := allowlist.New(entries)
	if err != nil {
		return fmt.Errorf("sampling: allow-list: %w", err)
	}
	r.allow.Store(l)
	return nil
}

// Close closes every policy and the runtime. Steps must have finished.
func (r *Registry) Close(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, e := range *r.policies.Load() {
		if g := e.cur.Swap(nil); g != nil {
			g.release()
		}
	}
	r.policies.Store(&map[string]*entry{})
	return r.rt.Close(ctx)
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
		if e.cur.Load() != nil {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out
}

// Swap loads wasm as the new version of policy name: it compiles,
// handshakes and self-tests it (wasmrt.Load), checks the descriptor's name
// matches, then switches atomically. Steps already running finish on the
// old version, which closes once drained. On any failure the old version
// keeps serving and the error (a *wasmrt.RefusedError or a name mismatch)
// says why. With Options.AllowSHA256 set, bytes that are neither a
// built-in nor listed for name are refused first with an
// *allowlist.NotAllowedError (errors.Is allowlist.ErrNotAllowed). A
// successful Swap re-enables a policy disabled by repeated failures.
func (r *Registry) Swap(ctx context.Context, name string, wasm []byte, source string) error {
	if !sampler.ValidName(name) {
		return fmt.Errorf("sampling: sampler name %q: want lowercase letters, digits, '.', '_' or '-' (1–64 bytes)", name)
	}
	if allow := r.allow.Load(); allow.Enabled() {
		if sum := allowlist.Sum(wasm); !r.trusted[sum] {
			if err := allow.Check(name, sum); err != nil {
				return fmt.Errorf("sampling: %s from %s: %w", name, source, err)
			}
		}
	}
	mod, err := r.rt.Load(ctx, name, wasm)
	if err != nil {
		return err
	}
	d := mod.Descriptor()
	if d.Name != name {
		_ = mod.Close(ctx)
		return &wasmrt.RefusedError{Plugin: name, Stage: "describe", Err: fmt.Errorf("descriptor names the sampler %q, not %q", d.Name, name)}
	}
	g := &generation{mod: mod, schema: newSchema(d), source: source, version: d.Version + "+" + mod.SHA256()[:12], loaded: time.Now()}
	g.refs.Store(1)
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
		e.cur.Store(g)
		r.policies.Store(&next)
	} else if prev := e.cur.Swap(g); prev != nil {
		if d := prev.disabled.Load(); d != nil {
			r.log.Info("sampler re-enabled by a new version", "name", name, "version", g.version, "disabled_version", d.Version)
		}
		prev.release()
	}
	e.swaps.Add(1)
	r.log.Info("sampler loaded", "name", name, "version", g.version, "source", source)
	return nil
}

// Remove unloads a policy; steps in flight finish on it first.
func (r *Registry) Remove(name string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	old := *r.policies.Load()
	e, ok := old[name]
	if !ok || e.cur.Load() == nil {
		return &UnknownPolicyError{Policy: name, Available: r.names()}
	}
	next := make(map[string]*entry, len(old))
	for k, v := range old {
		if k != name {
			next[k] = v
		}
	}
	r.policies.Store(&next)
	if g := e.cur.Swap(nil); g != nil {
		g.release()
	}
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
	Overruns   int64           `json:"overruns"` // current version's steps over the deadline
	// Disabled: the current version failed DisableAfter steps in a row
	// and its sequences are served by the default policy (or, when that
	// cannot, the host sampler) until a Swap; DisabledAt and LastError say
	// when and why. ConsecutiveFailures is the current run of failures.
	Disabled            bool      `json:"disabled"`
	DisabledAt          time.Time `json:"disabled_at,omitzero"`
	LastError           string    `json:"last_error,omitempty"`
	ConsecutiveFailures int64     `json:"consecutive_failures"`
	// Fallbacks counts rows of this name served by a fallback (the default
	// policy, or the host sampler after a *PolicyDisabledError) since the
	// name was first loaded; metrics export it as kvhost_sampler_fallbacks.
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
		d := g.mod.Descriptor()
		st := g.mod.Stats()
		info := Info{
			Name: name, Version: g.version, SHA256: g.mod.SHA256(), Source: g.source, Loaded: g.loaded,
			Candidates: d.Candidates, PreOps: slices.Clone(d.PreOps), Params: slices.Clone(g.schema.all),
			Calls: e.calls.Load(), Failures: e.failures.Load(), Swaps: e.swaps.Load(),
			MeanStep: st.Mean, MaxStep: st.Max, Overruns: st.Overruns,
			ConsecutiveFailures: g.consecutive.Load(), Fallbacks: e.fallbacks.Load(),
		}
		if dis := g.disabled.Load(); dis != nil {
			last, _, _ := strings.Cut(dis.LastErr.Error(), "\n") // not wazero's stack trace
			info.Disabled, info.DisabledAt, info.LastError = true, dis.DisabledAt, last
		}
		out = append(out, info)
		g.release()
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
	defer g.release()
	values, err := g.schema.validate(policy, params)
	if err != nil {
		return Compiled{}, err
	}
	c := Compiled{policy: policy, values: values}
	c.resolve(g.schema)
	return c, nil
}
