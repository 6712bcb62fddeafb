package plugin

import (
	"context"
	"embed"
	"encoding/json"

	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/kvhost/kvhost/sdk"
	"github.com/kvhost/kvhost/sdk/sampler"
)

//go:embed samples/*.json
var samples embed.FS

// SelfTestAvailable is the byte budget the self-test sizes with (64 GiB).
const SelfTestAvailable = 64 << 30

// Report is what a plugin check found: the kind, the handshake result and
// the kind's self-test (a configurator: one configure + size; a sampler:
// one synthetic batch).
type Report struct {
	Path   string
	Kind   string
	Bytes  int
	SHA256 string
	Load   time.Duration // validate, instrument, compile (or cache hit), handshake, self-test
	// Configurator: its descriptor and self-test.
	Descriptor sdk.Descriptor
	Sample     string // sample config used for the self-test
	Host       sdk.HostFacts
	Pools      []sdk.Pool
	Available  int64
	Units      map[string]int64
	// Sampler: its descriptor and self-test step.
	Sampler  sampler.Descriptor
	MaxBatch int
	// Calls are the version's call counters after the self-test (its
	// start-up included in MaxFuel); Budget the fuel of one call (a
	// configurator's) or of the self-test's step (a sampler's).
	Calls  Stats
	Budget int64
}

// String prints the declaration: for a configurator its descriptor, pools
// with a buffer summary and the self-test sizing; for a sampler its
// descriptor, parameters and self-test step.
func (r *Report) String() string {
	if r.Kind == KindSampler {
		return r.samplerString()
	}
	var b strings.Builder
	d := r.Descriptor
	fmt.Fprintf(&b, "plugin %s %s (%s, ABI %d) %s\n", d.Name, d.Version, d.Kind, d.ABI, r.Path)
	fmt.Fprintf(&b, "  sha256 %s, %d bytes, loaded in %v\n", r.SHA256, r.Bytes, r.Load.Round(time.Millisecond))
	fmt.Fprintf(&b, "  architectures: %s\n", strings.Join(d.Architectures, ", "))
	fmt.Fprintf(&b, "  kv dtypes: %s\n", strings.Join(d.AcceptedKVDTypes(), ", "))
	fmt.Fprintf(&b, "self-test: %s, kv_dtype %s, page %d, tp %d, context %d\n",
		r.Sample, r.Host.KVDType, r.Host.PageSize, r.Host.TPSize, r.Host.ContextLength)
	for _, p := range r.Pools {
		kind := string(p.Kind)
		switch {
		case p.Kind == sdk.SlidingWindow:
			kind = fmt.Sprintf("%s %d, page %d", p.Kind, p.Window, p.PageSize)
		case p.Unit() == sdk.UnitToken:
			kind = fmt.Sprintf("%s, page %d", p.Kind, p.PageSize)
		}
		fmt.Fprintf(&b, "  pool %-6s (%s) %12d B/%s  %s\n", p.Name, kind, p.BytesPerUnit, p.Unit(), bufferSummary(p))
	}
	names := make([]string, 0, len(r.Units))
	for n := range r.Units {
		names = append(names, n)
	}
	sort.Strings(names)
	var used int64
	for _, n := range names {
		for _, p := range r.Pools {
			if p.Name == n {
				used += r.Units[n] * p.BytesPerUnit
				fmt.Fprintf(&b, "  size(%d): %s = %d %ss\n", r.Available, n, r.Units[n], p.Unit())
			}
		}
	}
	fmt.Fprintf(&b, "  uses %d of %d bytes\n", used, r.Available)
	fmt.Fprintf(&b, "  %d calls, longest %v, at most %d fuel of the %d budget\n", r.Calls.Calls, r.Calls.Max.Round(time.Microsecond), r.Calls.MaxFuel, r.Budget)
	return b.String()
}

// bufferSummary groups a pool's buffers by name: "k×32 [8 128] bf16, …".
func bufferSummary(p sdk.Pool) string {
	type group struct {
		n     int
		shape []int64
		dtype string
		mixed bool
	}
	var order []string
	groups := map[string]*group{}
	for _, buf := range p.Buffers {
		g, ok := groups[buf.Name]
		if !ok {
			g = &group{shape: buf.Shape, dtype: buf.DType}
			groups[buf.Name] = g
			order = append(order, buf.Name)
		}
		g.n++
		g.mixed = g.mixed || fmt.Sprint(g.shape) != fmt.Sprint(buf.Shape) || g.dtype != buf.DType
	}
	parts := make([]string, 0, len(order))
	for _, name := range order {
		g := groups[name]
		s := fmt.Sprintf("%s×%d %v %s", name, g.n, g.shape, g.dtype)
		if g.mixed {
			s += " (varies)"
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, ", ")
}

// sampleFor picks the embedded sample config for the first claimed
// architecture that has one, else Llama-3-8B.
func sampleFor(d sdk.Descriptor) (string, []byte, error) {
	entries, err := samples.ReadDir("samples")
	if err != nil {
		return "", nil, err
	}
	byArch := map[string]string{}
	for _, e := range entries {
		raw, err := samples.ReadFile("samples/" + e.Name())
		if err != nil {
			return "", nil, err
		}
		var cfg struct {
			Architectures []string `json:"architectures"`
		}
		if err := json.Unmarshal(raw, &cfg); err == nil && len(cfg.Architectures) > 0 {
			byArch[cfg.Architectures[0]] = e.Name()
		}
	}
	name := "llama-3-8b.json"
	for _, a := range d.Architectures {
		if n, ok := byArch[a]; ok {
			name = n
			break
		}
	}
	raw, err := samples.ReadFile("samples/" + name)
	return name, raw, err
}

func (r *Report) samplerString() string {
	var b strings.Builder
	d := r.Sampler
	fmt.Fprintf(&b, "plugin %s %s (%s, ABI %d) %s\n", d.Name, d.Version, d.Kind, d.ABI, r.Path)
	fmt.Fprintf(&b, "  sha256 %s, %d bytes, loaded in %v\n", r.SHA256, r.Bytes, r.Load.Round(time.Millisecond))
	fmt.Fprintf(&b, "  candidates %d, state %d, history %d, argmax-invariant %v\n", d.Candidates, d.State, d.History, d.ArgmaxInvariant)
	fmt.Fprintf(&b, "  host pre-ops: %s\n", strings.Join(d.PreOps, ", "))
	for _, p := range d.Params {
		fmt.Fprintf(&b, "  param %-20s %-5s [%g, %g] default %g\n", p.Name, p.Type, p.Min, p.Max, p.Default)
	}
	fmt.Fprintf(&b, "self-test: a synthetic batch of %d rows answered from its candidates in %v, spending at most %d fuel (budget %d)\n",
		min(8, r.MaxBatch), r.Calls.Max.Round(time.Microsecond), r.Calls.MaxFuel, r.Budget)
	return b.String()
}

// SelfTest configures a sample config that matches a claimed architecture
// (else Llama-3-8B), in the plugin's preferred KV dtype, and sizes it for
// SelfTestAvailable bytes: the checks a configurator passes before it may
// size a pool.
func (p *Plugin) SelfTest(ctx context.Context) (*Report, error) {
	rep := &Report{Kind: KindConfigurator, Bytes: p.Size(), SHA256: p.SHA256(), Descriptor: p.Descriptor(), Available: SelfTestAvailable}
	sample, raw, err := sampleFor(rep.Descriptor)
	if err != nil {
		return nil, fmt.Errorf("plugin: self-test samples: %w", err)
	}
	rep.Sample = sample
	rep.Host = sdk.HostFacts{KVDType: rep.Descriptor.AcceptedKVDTypes()[0]}.WithDefaults()
	layout, err := p.Configure(ctx, sdk.ConfigureInput{Model: raw, Host: rep.Host})
	if err != nil {
		return nil, fmt.Errorf("self-test with %s: %w", sample, err)
	}
	rep.Pools = layout.Pools
	if rep.Units, err = layout.Size(ctx, SelfTestAvailable, 0, 0); err != nil {
		return nil, fmt.Errorf("self-test with %s: %w", sample, err)
	}
	return rep, nil
}

// Check loads wasm as the named plugin, of whichever kind its exports
// say, runs the handshake and its kind's self-test, and closes it again.
func (r *Runtime) Check(ctx context.Context, name string, wasm []byte) (*Report, error) {
	start := time.Now()
	kind, err := r.KindOf(name, wasm)
	if err != nil {
		return nil, err
	}
	if kind == KindSampler {
		s, err := r.LoadSampler(ctx, name, wasm)
		if err != nil {
			return nil, err
		}
		defer s.Close(ctx)
		return &Report{Path: name, Kind: kind, Bytes: len(wasm), SHA256: s.SHA256(), Load: time.Since(start),
			Sampler: s.Descriptor(), Calls: s.Stats(), Budget: s.budget(min(8, s.MaxBatch())), MaxBatch: s.MaxBatch()}, nil
	}
	p, err := r.Load(ctx, name, wasm)
	if err != nil {
		return nil, err
	}
	defer p.Close(ctx)
	rep, err := p.SelfTest(ctx)
	if err != nil {
		return nil, err
	}
	rep.Path, rep.Load = name, time.Since(start)
	rep.Calls, rep.Budget = p.m.stats(), r.cfg.CallFuel
	return rep, nil
}

// CheckFile is `kvhost plugin check FILE.wasm`: it checks one file, a
// configurator or a sampler, with a default runtime (default compilation
// cache). It reads only a regular file within the size cap. A broken file
// gives an error whose message is one line.
func CheckFile(ctx context.Context, path string) (*Report, error) {
	wasm, err := ReadPluginFile(path, DefaultMaxModuleBytes)
	if err != nil {
		return nil, err
	}
	rt, err := NewRuntime(ctx, Config{})
	if err != nil {
		return nil, err
	}
	defer rt.Close(ctx)
	rep, err := rt.Check(ctx, strings.TrimSuffix(filepath.Base(path), ".wasm"), wasm)
	if err != nil {
		return nil, oneLine(err)
	}
	rep.Path = path
	return rep, nil
}

// oneLine keeps err (for errors.As) but flattens its message.
func oneLine(err error) error {
	msg := err.Error()
	if !strings.ContainsAny(msg, "\r\n") {
		return err
	}
	return &flatError{msg: strings.Join(strings.Fields(msg), " "), err: err}
}

type flatError struct {
	msg string
	err error
}

func (e *flatError) Error() string { return e.msg }
func (e *flatError) Unwrap() error { return e.err }
