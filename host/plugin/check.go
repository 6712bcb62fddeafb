package plugin

import (
	"context"
	"embed"
	"encoding/json"

	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/kvhost/kvhost/sdk"
)

//go:embed samples/*.json
var samples embed.FS

// SelfTestAvailable is the byte budget the self-test sizes with (64 GiB).
const SelfTestAvailable = 64 << 30

// Report is what a plugin check found: the handshake result and one
// self-test configure + size.
type Report struct {
	Path       string
	Bytes      int
	SHA256     string
	Load       time.Duration // compile (or cache hit) + handshake
	Descriptor sdk.Descriptor
	Sample     string // sample config used for the self-test
	Host       sdk.HostFacts
	Pools      []sdk.Pool
	Available  int64
	Units      map[string]int64
}

// String prints the declaration: descriptor, pools with a buffer summary,
// and the self-test sizing.
func (r *Report) String() string {
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

// Check loads wasm as the named plugin, runs the handshake and a self-test
// (configure a sample config that matches a claimed architecture, in the
// plugin's preferred KV dtype, then size it for SelfTestAvailable bytes),
// and closes it again.
func (r *Runtime) Check(ctx context.Context, name string, wasm []byte) (*Report, error) {
	start := time.Now()
	p, err := r.Load(ctx, name, wasm)
	if err != nil {
		return nil, err
	}
	defer p.Close(ctx)
	rep := &Report{Path: name, Bytes: len(wasm), SHA256: p.SHA256(), Load: time.Since(start), Descriptor: p.Descriptor(), Available: SelfTestAvailable}
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

// CheckFile is `kvhost plugin check FILE.wasm`: it checks one file with a
// default runtime (default compilation cache). A broken file gives an error
// whose message is one line.
func CheckFile(ctx context.Context, path string) (*Report, error) {
	wasm, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("plugin: %w", err)
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
