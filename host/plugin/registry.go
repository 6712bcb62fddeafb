package plugin

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"

	"github.com/kvhost/kvhost/host/plugin/allowlist"
)

// Source is where a plugin's bytes came from.
type Source struct {
	Name   string // file name without .wasm
	Origin string // "builtin" or the file's path
	Wasm   []byte
}

// Registry is the set of available plugins: the built-ins overlaid by the
// .wasm files of a plugins directory (same name wins). Plugins are loaded
// (compiled, handshaken) on first use and kept. Safe for concurrent use.
type Registry struct {
	rt      *Runtime
	sources map[string]Source
	trusted map[string]bool // sha256 of the built-ins' bytes
	allow   *allowlist.List

	mu     sync.Mutex
	loaded map[string]*Plugin
}

// RegistryOptions configure a Registry beyond its sources.
type RegistryOptions struct {
	// AllowSHA256 pins the plugins of the plugins directory: when set, a
	// plugin whose bytes are neither a built-in's nor listed (for its
	// name) is refused with an *allowlist.NotAllowedError when first
	// used, before it is compiled. Entries are "<hex sha256>" or
	// "<hex sha256> <name>" (allowlist.ReadFile's result). Empty allows
	// every plugin. Built-ins are always trusted.
	AllowSHA256 []string
}

// NewRegistry is NewRegistryWith without options (every plugin allowed).
func NewRegistry(rt *Runtime, builtin fs.FS, dir string) (*Registry, error) {
	return NewRegistryWith(rt, builtin, dir, RegistryOptions{})
}

// NewRegistryWith lists the *.wasm files at the root of builtin (may be
// nil) and of dir ("" for none); a file in dir overrides the built-in of
// the same name. Nothing is compiled yet.
func NewRegistryWith(rt *Runtime, builtin fs.FS, dir string, opts RegistryOptions) (*Registry, error) {
	allow, err := allowlist.New(opts.AllowSHA256)
	if err != nil {
		return nil, fmt.Errorf("plugin: options AllowSHA256: %w", err)
	}
	r := &Registry{rt: rt, sources: map[string]Source{}, trusted: map[string]bool{}, allow: allow, loaded: map[string]*Plugin{}}
	if builtin != nil {
		names, err := fs.Glob(builtin, "*.wasm")
		if err != nil {
			return nil, fmt.Errorf("plugin: built-in set: %w", err)
		}
		for _, n := range names {
			b, err := fs.ReadFile(builtin, n)
			if err != nil {
				return nil, fmt.Errorf("plugin: built-in %s: %w", n, err)
			}
			name := strings.TrimSuffix(n, ".wasm")
			r.sources[name] = Source{Name: name, Origin: "builtin", Wasm: b}
			r.trusted[allowlist.Sum(b)] = true
		}
	}
	if dir != "" {
		paths, err := filepath.Glob(filepath.Join(dir, "*.wasm"))
		if err != nil {
			return nil, fmt.Errorf("plugin: plugins dir %s: %w", dir, err)
		}
		if _, err := os.Stat(dir); err != nil {
			return nil, fmt.Errorf("plugin: plugins dir: %w", err)
		}
		for _, path := range paths {
			b, err := os.ReadFile(path)
			if err != nil {
				return nil, fmt.Errorf("plugin: %w", err)
			}
			name := strings.TrimSuffix(filepath.Base(path), ".wasm")
			r.sources[name] = Source{Name: name, Origin: path, Wasm: b}
		}
	}
	return r, nil
}

// Names lists the available plugins, sorted.
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

// Plugin loads (once) and returns the named plugin. Under an allow-list a
// refused plugin's error is an *allowlist.NotAllowedError (errors.Is
// allowlist.ErrNotAllowed), asked again on every call.
func (r *Registry) Plugin(ctx context.Context, name string) (*Plugin, error) {
	src, ok := r.sources[name]
	if !ok {
		return nil, fmt.Errorf("plugin: no plugin named %q (have %s)", name, strings.Join(r.Names(), ", "))
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if p, ok := r.loaded[name]; ok {
		return p, nil
	}
	if r.allow.Enabled() {
		if sum := allowlist.Sum(src.Wasm); !r.trusted[sum] {
			if err := r.allow.Check(name, sum); err != nil {
				return nil, fmt.Errorf("plugin: %w (from %s)", err, src.Origin)
			}
		}
	}
	p, err := r.rt.Load(ctx, name, src.Wasm)
	if err != nil {
		return nil, fmt.Errorf("%w (from %s)", err, src.Origin)
	}
	r.loaded[name] = p
	return p, nil
}

// ForArchitecture returns the first configurator whose descriptor claims the
// architecture and accepts the KV dtype: the plugins directory's in name
// order, then the built-ins' (a configurator the user dropped in wins over a
// built-in claiming the same architecture). Plugins that fail to load are
// skipped, but reported if nothing matches.
func (r *Registry) ForArchitecture(ctx context.Context, arch, kvDType string) (*Plugin, error) {
	var loadErrs []error
	names := r.Names()
	sort.SliceStable(names, func(i, j int) bool {
		return r.sources[names[i]].Origin != "builtin" && r.sources[names[j]].Origin == "builtin"
	})
	for _, name := range names {
		p, err := r.Plugin(ctx, name)
		if err != nil {
			loadErrs = append(loadErrs, err)
			continue
		}
		d := p.Descriptor()
		if d.Kind == "configurator" && d.Claims(arch) && d.AcceptsKVDType(kvDType) {
			return p, nil
		}
	}
	err := fmt.Errorf("plugin: no configurator claims architecture %q with kv_dtype %q among %s",
		arch, kvDType, strings.Join(r.Names(), ", "))
	return nil, errors.Join(append([]error{err}, loadErrs...)...)
}

// Close closes every loaded plugin.
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
