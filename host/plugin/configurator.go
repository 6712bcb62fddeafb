package plugin

import (
	"context"
	"fmt"
	"sync"

	"github.com/kvhost/kvhost/sdk"
)

// Plugin is one configurator version (the configurator kind's adapter
// over the runtime core): a compiled module that passed the handshake, and
// a pool of instances. It is safe for concurrent use; each call takes an
// instance of its own.
//
// A deferred Plugin (Registry.ForArchitecture under
// Config.RecallAnswers, for bytes a record says were accepted and
// self-tested) starts without its module: its configure and size answers
// are recalled (answers.go) while every call it gets was answered before,
// and the module is loaded — the whole load pipeline — on the first call
// that was not.
type Plugin struct {
	m    *module // nil while a deferred plugin has not loaded
	desc sdk.Descriptor
	name string
	sha  string
	size int
	// disk records and recalls answers (nil: Config.RecallAnswers off,
	// or no cache).
	disk *diskCache

	mu     sync.Mutex
	load   func(context.Context) (*module, error) // a deferred plugin's loader
	closed bool
}

// newPlugin wraps an accepted configurator module.
func newPlugin(m *module, desc sdk.Descriptor) *Plugin {
	p := &Plugin{m: m, desc: desc, name: m.name, sha: m.sha, size: m.size}
	if m.rt.cfg.RecallAnswers {
		p.disk = m.rt.disk
	}
	return p
}

// module returns the plugin's module, loading a deferred plugin's now.
func (p *Plugin) module(ctx context.Context) (*module, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, fmt.Errorf("plugin: %s: closed", p.name)
	}
	if p.m == nil {
		m, err := p.load(ctx)
		if err != nil {
			return nil, err
		}
		p.m = m
	}
	return p.m, nil
}

// isClosed reports whether Close was called.
func (p *Plugin) isClosed() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return fmt.Errorf("plugin: %s: closed", p.name)
	}
	return nil
}

// Load loads wasm as a configurator (a plugin of another kind is a
// *KindError, found before anything is compiled): the load pipeline
// (Runtime.prepare), an instance, the handshake (ABI version *ABIError,
// required exports *MissingExportError, a valid descriptor *ContractError),
// each refusal a *RefusedError naming its stage. name labels the plugin in
// errors and logs (usually the file name without .wasm).
func (r *Runtime) Load(ctx context.Context, name string, wasm []byte) (*Plugin, error) {
	m, inst, err := r.open(ctx, configuratorKind, name, wasm)
	if err != nil {
		return nil, err
	}
	desc, err := sdk.ParseDescriptor(m.raw)
	if err != nil {
		inst.broken = true
		m.release(inst)
		return nil, m.refuse(ctx, "describe", &ContractError{Plugin: name, Call: sdk.ExportDescribe, Detail: err.Error()})
	}
	m.accept(inst, m.selfTested())
	return newPlugin(m, desc), nil
}

// Name is the plugin's label (file name without .wasm).
func (p *Plugin) Name() string { return p.name }

// Descriptor is what the plugin's kvhost_describe returned.
func (p *Plugin) Descriptor() sdk.Descriptor { return p.desc }

// SHA256 is the hex sha256 of the plugin's bytes (its version key).
func (p *Plugin) SHA256() string { return p.sha }

// Size is the plugin's size in bytes.
func (p *Plugin) Size() int { return p.size }

// CallStats reports the calls into this plugin version, how many failed
// and the time spent in them.
func (p *Plugin) CallStats() (calls, failures int64, seconds float64) {
	p.mu.Lock()
	m := p.m
	p.mu.Unlock()
	if m == nil {
		return 0, 0, 0
	}
	s := m.stats()
	return s.Calls, s.Failures, s.Total.Seconds()
}

// Close closes idle instances and releases the compiled module once every
// plugin sharing it is closed. Calls in flight finish; their instances are
// closed when returned.
func (p *Plugin) Close(ctx context.Context) error {
	p.mu.Lock()
	p.closed = true
	m := p.m
	p.mu.Unlock()
	if m == nil {
		return nil
	}
	return m.close(ctx)
}

// selfTested reports whether this version's self-test passed before (on
// this machine, by its bytes); a deferred plugin is made only for such.
func (p *Plugin) selfTested() bool { return p.m == nil || p.m.selfTested() }

// markSelfTested records a passed self-test for the next start.
func (p *Plugin) markSelfTested() {
	if p.m != nil {
		p.m.accept(nil, true)
	}
}

// call runs one configurator export with the per-call fuel and deadline,
// and the call state the host functions fill.
func (p *Plugin) call(ctx context.Context, inst *instance, export string, st *callState, params ...uint64) ([]uint64, error) {
	if st != nil {
		ctx = withState(ctx, st)
	}
	stack := make([]uint64, max(len(params), 1))
	copy(stack, params)
	c := p.m.rt.cfg
	if err := p.m.call(ctx, inst, export, c.CallFuel, c.CallTimeout, stack); err != nil {
		return nil, err
	}
	return stack, nil
}

// lastError reads kvhost_last_error.
func (p *Plugin) lastError(ctx context.Context, inst *instance) string {
	res, err := p.call(ctx, inst, sdk.ExportLastError, nil)
	if err != nil {
		return "(kvhost_last_error failed: " + err.Error() + ")"
	}
	b, err := p.m.readPacked(inst, res[0], sdk.ExportLastError, sdk.MaxInputBytes)
	if err != nil {
		return "(" + err.Error() + ")"
	}
	return firstLine(string(b))
}

// acquire and release wrap the module's pool for the configurator calls: a
// *GuestError (the plugin's own reported failure) leaves the instance
// usable; any other failure discards it.
func (p *Plugin) acquire(ctx context.Context) (*instance, error) {
	m, err := p.module(ctx)
	if err != nil {
		return nil, err
	}
	return m.acquire(ctx)
}

func (p *Plugin) release(inst *instance, err error) {
	if _, guest := err.(*GuestError); err != nil && !guest {
		inst.broken = true
	}
	p.m.release(inst)
}
