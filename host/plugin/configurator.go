package plugin

import (
	"context"

	"github.com/kvhost/kvhost/sdk"
)

// Plugin is one loaded configurator version (the configurator kind's
// adapter over the runtime core): a compiled module that passed the
// handshake, and a pool of instances. It is safe for concurrent use; each
// call takes an instance of its own.
type Plugin struct {
	m    *module
	desc sdk.Descriptor
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
	return &Plugin{m: m, desc: desc}, nil
}

// Name is the plugin's label (file name without .wasm).
func (p *Plugin) Name() string { return p.m.name }

// Descriptor is what the plugin's kvhost_describe returned.
func (p *Plugin) Descriptor() sdk.Descriptor { return p.desc }

// SHA256 is the hex sha256 of the plugin's bytes (its version key).
func (p *Plugin) SHA256() string { return p.m.sha }

// Size is the plugin's size in bytes.
func (p *Plugin) Size() int { return p.m.size }

// CallStats reports the calls into this plugin version, how many failed
// and the time spent in them.
func (p *Plugin) CallStats() (calls, failures int64, seconds float64) {
	s := p.m.stats()
	return s.Calls, s.Failures, s.Total.Seconds()
}

// Close closes idle instances and releases the compiled module once every
// plugin sharing it is closed. Calls in flight finish; their instances are
// closed when returned.
func (p *Plugin) Close(ctx context.Context) error { return p.m.close(ctx) }

// selfTested reports whether this version's self-test passed before (on
// this machine, by its bytes).
func (p *Plugin) selfTested() bool { return p.m.selfTested() }

// markSelfTested records a passed self-test for the next start.
func (p *Plugin) markSelfTested() { p.m.accept(nil, true) }

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
func (p *Plugin) acquire(ctx context.Context) (*instance, error) { return p.m.acquire(ctx) }

func (p *Plugin) release(inst *instance, err error) {
	if _, guest := err.(*GuestError); err != nil && !guest {
		inst.broken = true
	}
	p.m.release(inst)
}
