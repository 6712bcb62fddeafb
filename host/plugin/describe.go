package plugin

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/kvhost/kvhost/host/plugin/fuel"
	"github.com/kvhost/kvhost/sdk"
	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
)

// Describe tells a module's kind and descriptor without compiling it to
// machine code: from the record of an earlier load of the same bytes, or
// else by the load limits (package fuel), then — in the compile worker —
// wazero's interpreter validating the original and running its start
// functions, kvhost_abi_version and kvhost_describe under
// Config.DescribeTimeout (the interpreter honours the deadline, and a guest
// running in it is ordinary Go code the scheduler and collector can stop).
// The answer is recorded, so the next start reads it from disk. A registry
// decides which configurator claims a model this way and compiles only the
// claimant; the descriptor is not trusted beyond that choice: the full
// load shakes hands again.
func (r *Runtime) Describe(ctx context.Context, name string, wasm []byte) (kind string, raw []byte, err error) {
	if kind, raw, ok := r.recorded(wasm); ok {
		return kind, raw, nil
	}
	exports, err := fuel.Exports(wasm)
	if err != nil {
		return "", nil, refused(name, "instrument", err)
	}
	k, err := kindOf(name, exports, configuratorKind)
	if err != nil {
		return "", nil, refused(name, "exports", err)
	}
	if _, _, err := fuel.Instrument(wasm, r.fuelOptions(k)); err != nil {
		return "", nil, refusal(name, err)
	}
	if err := r.acquireWorker(ctx, name, "describe"); err != nil {
		return "", nil, err
	}
	defer func() { <-r.compiling }()
	r.interprets.Add(1)
	raw, stage, err := r.interpret(ctx, k, name, wasm)
	if err != nil {
		return "", nil, refused(name, stage, err)
	}
	if r.disk != nil {
		r.disk.put(sum256(wasm), record{Kind: k.name, Descriptor: raw})
	}
	return k.name, raw, nil
}

// interpret validates wasm with the interpreter and asks it for its
// descriptor.
func (r *Runtime) interpret(ctx context.Context, k *kindSpec, name string, wasm []byte) ([]byte, string, error) {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.DescribeTimeout)
	defer cancel()
	cm, err := r.validator.CompileModule(ctx, wasm)
	if err != nil {
		return nil, "validate", err
	}
	defer cm.Close(context.Background())
	stderr := newTailBuffer(4 << 10)
	mod, err := r.validator.InstantiateModule(ctx, cm, wazero.NewModuleConfig().WithName("").
		WithStartFunctions(sdk.ExportInitialize).WithStderr(stderr).WithStdout(stderr))
	if err != nil {
		return nil, "instantiate", r.interpretError(ctx, name, "instantiate", stderr, err)
	}
	defer mod.Close(context.Background())
	call := func(export string) (uint64, error) {
		fn := mod.ExportedFunction(export)
		if fn == nil {
			return 0, &MissingExportError{Plugin: name, Export: export}
		}
		res, err := fn.Call(ctx)
		if err != nil {
			return 0, r.interpretError(ctx, name, export, stderr, err)
		}
		if len(res) != 1 {
			return 0, &MissingExportError{Plugin: name, Export: export, Found: "a function of another signature"}
		}
		return res[0], nil
	}
	v, err := call(sdk.ExportABIVersion)
	if err != nil {
		return nil, "handshake", err
	}
	if got := int(api.DecodeI32(v)); got != k.abi {
		return nil, "handshake", &ABIError{Plugin: name, Want: k.abi, Found: got}
	}
	packed, err := call(sdk.ExportDescribe)
	if err != nil {
		return nil, "handshake", err
	}
	ptr, n := sdk.UnpackPtrLen(packed)
	if n > k.maxDescriptor {
		return nil, "describe", &ContractError{Plugin: name, Call: sdk.ExportDescribe, Detail: fmt.Sprintf("%d bytes is over the %d limit", n, k.maxDescriptor)}
	}
	b, ok := mod.Memory().Read(ptr, n)
	if !ok {
		return nil, "describe", &ContractError{Plugin: name, Call: sdk.ExportDescribe, Detail: fmt.Sprintf("(ptr %d, len %d) is outside guest memory", ptr, n)}
	}
	raw := append([]byte(nil), b...)
	var head struct {
		Kind string `json:"kind"`
	}
	if err := json.Unmarshal(raw, &head); err != nil || head.Kind != k.name {
		return nil, "describe", &ContractError{Plugin: name, Call: sdk.ExportDescribe,
			Detail: fmt.Sprintf("descriptor kind %q, but its exports are a %s's", head.Kind, k.name)}
	}
	return raw, "", nil
}

func (r *Runtime) interpretError(ctx context.Context, name, call string, stderr *tailBuffer, err error) error {
	if ctx.Err() != nil {
		return &DeadlineError{Plugin: name, Call: call, Timeout: r.cfg.DescribeTimeout, Elapsed: r.cfg.DescribeTimeout}
	}
	out := stderr.String()
	return &TrapError{Plugin: name, Call: call, Reason: guestReason(out), Stderr: out, Err: err}
}
