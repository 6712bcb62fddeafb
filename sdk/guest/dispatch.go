package guest

import (
	"encoding/json"
	"errors"
	"fmt"
	"sort"

	"github.com/kvhost/kvhost/sdk"
)

// Configurator is what a configurator plugin implements.
type Configurator interface {
	// Describe returns the plugin's descriptor; Kind and ABI are filled in
	// by the library when left empty.
	Describe() sdk.Descriptor
	// Configure computes the pools for one model and host. It must be a pure
	// function of its input.
	Configure(in sdk.ConfigureInput) (Plan, error)
}

// Plan is a configured layout: its pools and how to size them.
type Plan interface {
	// Pools returns the pools with their buffers, in declaration order.
	Pools() []sdk.Pool
	// Size returns the units for each pool given the bytes available and
	// the caps (0 = no cap). It must be a pure function of its inputs.
	Size(available, tokenCap, requestCap int64) (map[string]int64, error)
}

// Host is the set of host imports (ABI.md §Imports) a Dispatcher calls.
type Host interface {
	DeclarePool(name string, kind sdk.PoolKind, pageSize, window, bytesPerUnit int64) int32
	DeclareBuffer(pool, name string, role sdk.Role, layer int32, shape []int64, dtype string) int32
	SetUnits(pool string, units int64) int32
	Log(level int32, msg string)
}

// Dispatcher turns ABI calls into Configurator calls. It is not safe for
// concurrent use; a wasm instance is single-threaded.
type Dispatcher struct {
	impl    Configurator
	host    Host
	plan    Plan
	desc    []byte
	lastErr string
}

// NewDispatcher binds an implementation to a host.
func NewDispatcher(impl Configurator, host Host) *Dispatcher {
	return &Dispatcher{impl: impl, host: host}
}

// Descriptor returns the implementation's descriptor with Kind and ABI
// filled in.
func (d *Dispatcher) Descriptor() sdk.Descriptor {
	desc := d.impl.Describe()
	if desc.Kind == "" {
		desc.Kind = sdk.KindConfigurator
	}
	if desc.ABI == 0 {
		desc.ABI = sdk.ABIVersion
	}
	return desc
}

// DescribeJSON returns the descriptor as JSON (what kvhost_describe points at).
func (d *Dispatcher) DescribeJSON() []byte {
	if d.desc == nil {
		b, err := json.Marshal(d.Descriptor())
		if err != nil {
			d.lastErr = "guest: descriptor: " + err.Error()
			return nil
		}
		d.desc = b
	}
	return d.desc
}

// LastError returns the text of the last failed call.
func (d *Dispatcher) LastError() string { return d.lastErr }

func (d *Dispatcher) fail(err error) int32 {
	d.lastErr = err.Error()
	return sdk.StatusGuestError
}

// Configure handles kvhost_configure: it decodes the input, runs the
// implementation and declares every pool and buffer. It returns a status.
func (d *Dispatcher) Configure(input []byte) int32 {
	d.plan = nil
	in, err := sdk.ParseConfigureInput(input)
	if err != nil {
		return d.fail(err)
	}
	plan, err := d.impl.Configure(in)
	if errors.Is(err, sdk.ErrDeclined) {
		d.lastErr = err.Error()
		return sdk.StatusDeclined
	}
	if err != nil {
		return d.fail(err)
	}
	for _, p := range plan.Pools() {
		if st := d.host.DeclarePool(p.Name, p.Kind, p.PageSize, p.Window, p.BytesPerUnit); st != sdk.StatusOK {
			return d.fail(fmt.Errorf("guest: declare_pool %s: host status %d", p.Name, st))
		}
		for _, b := range p.Buffers {
			if st := d.host.DeclareBuffer(p.Name, b.Name, b.Role, b.Layer, b.Shape, b.DType); st != sdk.StatusOK {
				return d.fail(fmt.Errorf("guest: declare_buffer %s/%s layer %d: host status %d", p.Name, b.Name, b.Layer, st))
			}
		}
	}
	d.plan = plan
	d.lastErr = ""
	return sdk.StatusOK
}

// Size handles kvhost_size: it sizes the configured plan and reports each
// pool's units through set_units, in pool-name order.
func (d *Dispatcher) Size(available, tokenCap, requestCap int64) int32 {
	if d.plan == nil {
		return d.fail(fmt.Errorf("guest: size called before a successful configure"))
	}
	units, err := d.plan.Size(available, tokenCap, requestCap)
	if err != nil {
		return d.fail(err)
	}
	names := make([]string, 0, len(units))
	for name := range units {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if st := d.host.SetUnits(name, units[name]); st != sdk.StatusOK {
			return d.fail(fmt.Errorf("guest: set_units %s=%d: host status %d", name, units[name], st))
		}
	}
	d.lastErr = ""
	return sdk.StatusOK
}
