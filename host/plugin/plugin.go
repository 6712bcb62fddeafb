package plugin

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvhost/kvhost/sdk"
	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/sys"
)

// Plugin is one loaded plugin version: a compiled module that passed the
// handshake, and a pool of instances. It is safe for concurrent use; each
// call takes an instance of its own.
type Plugin struct {
	rt     *Runtime
	name   string
	sha    string
	size   int
	desc   sdk.Descriptor
	module wazero.CompiledModule

	mu     sync.Mutex
	idle   []*instance
	closed bool

	// counters for metrics: calls into the guest, failed ones, time spent
	calls, failures, nanos atomic.Int64
}

// CallStats reports the calls into this plugin version, how many failed
// and the time spent in them.
func (p *Plugin) CallStats() (calls, failures int64, seconds float64) {
	return p.calls.Load(), p.failures.Load(), time.Duration(p.nanos.Load()).Seconds()
}

// instance is one module instance; it is used by one goroutine at a time.
type instance struct {
	mod    api.Module
	stderr *tailBuffer
	// configured is the input of the last successful configure, so Size can
	// skip re-running it.
	configured string
}

// exportSig is a required export and its signature.
type exportSig struct {
	name            string
	params, results []api.ValueType
}

var (
	i32, i64 = api.ValueTypeI32, api.ValueTypeI64

	versionExport = exportSig{sdk.ExportABIVersion, nil, []api.ValueType{i32}}
	commonExports = []exportSig{
		{sdk.ExportDescribe, nil, []api.ValueType{i64}},
		{sdk.ExportMalloc, []api.ValueType{i32}, []api.ValueType{i32}},
		{sdk.ExportFree, []api.ValueType{i32}, nil},
		{sdk.ExportLastError, nil, []api.ValueType{i64}},
	}
	configuratorExports = []exportSig{
		{sdk.ExportConfigure, []api.ValueType{i32, i32}, []api.ValueType{i32}},
		{sdk.ExportSize, []api.ValueType{i64, i64, i64}, []api.ValueType{i32}},
	}
)

// Load compiles wasm (once per distinct bytes), checks its imports
// (*ImportError), instantiates it and runs the handshake: ABI version
// (*ABIError), required exports
// (*MissingExportError), a valid descriptor (*ContractError). name labels
// the plugin in errors and logs (usually the file name without .wasm).
func (r *Runtime) Load(ctx context.Context, name string, wasm []byte) (*Plugin, error) {
	key, mod, err := r.compile(ctx, wasm)
	if err != nil {
		return nil, fmt.Errorf("plugin: %s: compile: %w", name, err)
	}
	p := &Plugin{rt: r, name: name, sha: key, size: len(wasm), module: mod}
	if err := p.checkImports(); err != nil {
		r.release(ctx, key)
		return nil, err
	}
	if err := p.handshake(ctx); err != nil {
		r.release(ctx, key)
		return nil, err
	}
	return p, nil
}

func (p *Plugin) checkExport(want exportSig) error {
	def, ok := p.module.ExportedFunctions()[want.name]
	wantSig := signature(want.params, want.results)
	if !ok {
		return &MissingExportError{Plugin: p.name, Export: want.name, Want: wantSig}
	}
	if got := signature(def.ParamTypes(), def.ResultTypes()); got != wantSig {
		return &MissingExportError{Plugin: p.name, Export: want.name, Want: wantSig, Found: got}
	}
	return nil
}

func (p *Plugin) handshake(ctx context.Context) error {
	if err := p.checkExport(versionExport); err != nil {
		return err
	}
	inst, err := p.instantiate(ctx)
	if err != nil {
		return err
	}
	healthy := false
	defer func() { p.release(inst, healthy) }()
	res, err := p.call(ctx, inst, sdk.ExportABIVersion, nil)
	if err != nil {
		return err
	}
	if v := int(api.DecodeI32(res[0])); v != sdk.ABIVersion {
		return &ABIError{Plugin: p.name, Want: sdk.ABIVersion, Found: v}
	}
	for _, e := range commonExports {
		if err := p.checkExport(e); err != nil {
			return err
		}
	}
	res, err = p.call(ctx, inst, sdk.ExportDescribe, nil)
	if err != nil {
		return err
	}
	raw, err := p.readPacked(inst, res[0], "descriptor")
	if err != nil {
		return err
	}
	desc, err := sdk.ParseDescriptor(raw)
	if err != nil {
		return &ContractError{Plugin: p.name, Call: sdk.ExportDescribe, Detail: err.Error()}
	}
	switch desc.Kind {
	case sdk.KindConfigurator:
		for _, e := range configuratorExports {
			if err := p.checkExport(e); err != nil {
				return err
			}
		}
	default:
		return &ContractError{Plugin: p.name, Call: sdk.ExportDescribe,
			Detail: fmt.Sprintf("kind %q is not supported by ABI %d hosts yet", desc.Kind, sdk.ABIVersion)}
	}
	p.desc = desc
	healthy = true
	return nil
}

// Name is the plugin's label (file name without .wasm).
func (p *Plugin) Name() string { return p.name }

// Descriptor is what the plugin's kvhost_describe returned.
func (p *Plugin) Descriptor() sdk.Descriptor { return p.desc }

// SHA256 is the hex sha256 of the plugin's bytes (its version key).
func (p *Plugin) SHA256() string { return p.sha }

// Size is the plugin's size in bytes.
func (p *Plugin) Size() int { return p.size }

// Close closes idle instances and releases the compiled module once every
// plugin sharing it is closed. Calls in flight finish; their instances are
// closed when returned.
func (p *Plugin) Close(ctx context.Context) error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	idle := p.idle
	p.idle = nil
	p.mu.Unlock()
	var err error
	for _, inst := range idle {
		err = errors.Join(err, inst.mod.Close(ctx))
	}
	p.rt.release(ctx, p.sha)
	return err
}

// instantiate creates an instance under the call deadline (the guest's
// _initialize runs Go's runtime start-up and init functions).
func (p *Plugin) instantiate(ctx context.Context) (*instance, error) {
	ctx, cancel := context.WithTimeout(ctx, p.rt.cfg.CallTimeout)
	defer cancel()
	stderr := newTailBuffer(4 << 10)
	cfg := wazero.NewModuleConfig().
		WithName("").
		WithStartFunctions(sdk.ExportInitialize).
		WithStderr(stderr).
		WithStdout(stderr)
	mod, err := p.rt.rt.InstantiateModule(ctx, p.module, cfg)
	if err != nil {
		return nil, p.classify(ctx, "instantiate", stderr, err)
	}
	return &instance{mod: mod, stderr: stderr}, nil
}

// acquire takes an idle instance or makes a new one.
func (p *Plugin) acquire(ctx context.Context) (*instance, error) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, fmt.Errorf("plugin: %s: closed", p.name)
	}
	if n := len(p.idle); n > 0 {
		inst := p.idle[n-1]
		p.idle = p.idle[:n-1]
		p.mu.Unlock()
		return inst, nil
	}
	p.mu.Unlock()
	return p.instantiate(ctx)
}

// release returns a healthy instance to the pool; anything else (a trap, a
// deadline, a broken contract, a full pool, a closed plugin) closes it.
func (p *Plugin) release(inst *instance, healthy bool) {
	if healthy && !inst.mod.IsClosed() {
		p.mu.Lock()
		if !p.closed && len(p.idle) < p.rt.cfg.MaxIdle {
			inst.stderr.Reset()
			p.idle = append(p.idle, inst)
			p.mu.Unlock()
			return
		}
		p.mu.Unlock()
	}
	_ = inst.mod.Close(context.Background())
}

// call runs one export under the call deadline and classifies failures.
func (p *Plugin) call(ctx context.Context, inst *instance, export string, st *callState, params ...uint64) ([]uint64, error) {
	fn := inst.mod.ExportedFunction(export)
	if fn == nil {
		return nil, &MissingExportError{Plugin: p.name, Export: export}
	}
	ctx, cancel := context.WithTimeout(ctx, p.rt.cfg.CallTimeout)
	defer cancel()
	if st != nil {
		ctx = withState(ctx, st)
	}
	start := time.Now()
	res, err := fn.Call(ctx, params...)
	p.calls.Add(1)
	p.nanos.Add(int64(time.Since(start)))
	if err != nil {
		p.failures.Add(1)
		return nil, p.classify(ctx, export, inst.stderr, err)
	}
	return res, nil
}

// classify turns a wazero call error into a typed error.
func (p *Plugin) classify(ctx context.Context, call string, stderr *tailBuffer, err error) error {
	var exit *sys.ExitError
	if errors.As(err, &exit) {
		switch exit.ExitCode() {
		case sys.ExitCodeDeadlineExceeded:
			return &DeadlineError{Plugin: p.name, Call: call, Timeout: p.rt.cfg.CallTimeout}
		case sys.ExitCodeContextCanceled:
			return fmt.Errorf("plugin: %s: %s canceled: %w", p.name, call, context.Canceled)
		}
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return &DeadlineError{Plugin: p.name, Call: call, Timeout: p.rt.cfg.CallTimeout}
	}
	out := stderr.String()
	return &TrapError{Plugin: p.name, Call: call, Reason: guestReason(out), Stderr: out, Err: err}
}

// readPacked copies the (ptr<<32|len) region a describe-style export
// returned out of guest memory.
func (p *Plugin) readPacked(inst *instance, packed uint64, what string) ([]byte, error) {
	ptr, n := sdk.UnpackPtrLen(packed)
	if n > sdk.MaxInputBytes {
		return nil, &ContractError{Plugin: p.name, Call: what, Detail: fmt.Sprintf("%d bytes is over the %d limit", n, sdk.MaxInputBytes)}
	}
	b, ok := inst.mod.Memory().Read(ptr, n)
	if !ok {
		return nil, &ContractError{Plugin: p.name, Call: what, Detail: fmt.Sprintf("(ptr %d, len %d) is outside guest memory", ptr, n)}
	}
	return append([]byte(nil), b...), nil
}

// lastError reads kvhost_last_error.
func (p *Plugin) lastError(ctx context.Context, inst *instance) string {
	res, err := p.call(ctx, inst, sdk.ExportLastError, nil)
	if err != nil {
		return "(kvhost_last_error failed: " + err.Error() + ")"
	}
	b, err := p.readPacked(inst, res[0], sdk.ExportLastError)
	if err != nil {
		return "(" + err.Error() + ")"
	}
	return firstLine(string(b))
}

// tailBuffer keeps the first max bytes written to it (guest stderr): the
// Go runtime's diagnosis ("panic: …", "fatal error: …") comes first and the
// goroutine dump after it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func newTailBuffer(max int) *tailBuffer { return &tailBuffer{max: max} }

func (t *tailBuffer) Write(b []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if room := t.max - len(t.buf); room > 0 {
		t.buf = append(t.buf, b[:min(room, len(b))]...)
	}
	return len(b), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}

func (t *tailBuffer) Reset() {
	t.mu.Lock()
	t.buf = t.buf[:0]
	t.mu.Unlock()
}
