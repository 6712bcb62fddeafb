package wasmrt

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvhost/kvhost/host/plugin/fuel"
	"github.com/kvhost/kvhost/sdk"
	"github.com/kvhost/kvhost/sdk/sampler"
	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"
)

// Module is one loaded sampler version: a compiled, handshaken, self-tested
// module and a pool of instances.
type Module struct {
	rt     *Runtime
	name   string
	sha    string
	desc   sampler.Descriptor
	k      int
	module wazero.CompiledModule

	mu     sync.Mutex
	idle   []*Instance
	active int // instances handed out by Acquire and not yet released
	closed bool

	calls, failures, overruns, totalNs, maxNs atomic.Int64
}

// Stats are a module's counters since Load.
type Stats struct {
	Calls, Failures, Overruns int64
	Mean, Max                 time.Duration // step latency
}

var (
	i32, i64 = api.ValueTypeI32, api.ValueTypeI64
	exports  = []struct {
		name            string
		params, results []api.ValueType
	}{
		{sdk.ExportABIVersion, nil, []api.ValueType{i32}},
		{sdk.ExportDescribe, nil, []api.ValueType{i64}},
		{sampler.ExportInit, []api.ValueType{i32, i32}, []api.ValueType{i32}},
		{sampler.ExportSample, []api.ValueType{i32, i32}, []api.ValueType{i32}},
	}
)

func sigString(params, results []api.ValueType) string {
	s := "("
	for i, p := range params {
		if i > 0 {
			s += ","
		}
		s += api.ValueTypeName(p)
	}
	s += ")->("
	for i, p := range results {
		if i > 0 {
			s += ","
		}
		s += api.ValueTypeName(p)
	}
	return s + ")"
}

// Load instruments (unless Termination says otherwise), compiles,
// handshakes and self-tests wasm. name labels the module in errors.
func (r *Runtime) Load(ctx context.Context, name string, wasm []byte) (*Module, error) {
	refuse := func(stage string, err error) error { return &RefusedError{Plugin: name, Stage: stage, Err: err} }
	sum := sha256.Sum256(wasm)
	code := wasm
	if r.cfg.Termination == TerminateFuel {
		var err error
		if code, _, err = fuel.Instrument(wasm, r.cfg.InitFuel); err != nil {
			return nil, refuse("decode", err)
		}
	}
	cm, err := r.rt.CompileModule(ctx, code)
	if err != nil {
		return nil, refuse("compile", err)
	}
	m := &Module{rt: r, name: name, sha: hex.EncodeToString(sum[:]), module: cm}
	if err := m.checkShape(); err != nil {
		_ = cm.Close(ctx)
		return nil, err
	}
	inst, err := m.newInstance(ctx)
	if err != nil {
		_ = cm.Close(ctx)
		return nil, err
	}
	if err := m.selfTest(ctx, inst); err != nil {
		_ = inst.mod.Close(ctx)
		_ = cm.Close(ctx)
		return nil, refuse("self-test", err)
	}
	m.idle = append(m.idle, inst)
	return m, nil
}

// checkShape checks imports and exports before anything runs.
func (m *Module) checkShape() error {
	if err := m.checkImports(); err != nil {
		return &RefusedError{Plugin: m.name, Stage: "imports", Err: err}
	}
	defs := m.module.ExportedFunctions()
	for _, e := range exports {
		want := sigString(e.params, e.results)
		def, ok := defs[e.name]
		if !ok {
			return &RefusedError{Plugin: m.name, Stage: "exports", Err: fmt.Errorf("missing export %s %s", e.name, want)}
		}
		if got := sigString(def.ParamTypes(), def.ResultTypes()); got != want {
			return &RefusedError{Plugin: m.name, Stage: "exports", Err: fmt.Errorf("export %s is %s, want %s", e.name, got, want)}
		}
	}
	return nil
}

// checkImports enforces the ABI's import rule (sdk/SAMPLER_ABI.md): a
// sampler's only imports are functions of wasi_snapshot_preview1 that this
// host provides, with the host's signatures (Go guests; C guests import
// nothing). It imports no memory: it must define its own, which the
// runtime caps at Config.MemoryLimitPages.
func (m *Module) checkImports() error {
	var provided map[string]api.FunctionDefinition
	if w := m.rt.rt.Module(wasi_snapshot_preview1.ModuleName); w != nil {
		provided = w.ExportedFunctionDefinitions()
	}
	for _, f := range m.module.ImportedFunctions() {
		mod, fn, _ := f.Import()
		if mod != wasi_snapshot_preview1.ModuleName {
			return fmt.Errorf("imports %s.%s: a sampler may import only %s functions", mod, fn, wasi_snapshot_preview1.ModuleName)
		}
		def, ok := provided[fn]
		if !ok {
			return fmt.Errorf("imports %s.%s, which this host does not provide", mod, fn)
		}
		if got, want := sigString(f.ParamTypes(), f.ResultTypes()), sigString(def.ParamTypes(), def.ResultTypes()); got != want {
			return fmt.Errorf("imports %s.%s as %s, the host's is %s", mod, fn, got, want)
		}
	}
	for _, mem := range m.module.ImportedMemories() {
		mod, name, _ := mem.Import()
		return fmt.Errorf("imports memory %s.%s: a sampler must define its own memory", mod, name)
	}
	return nil
}

// newInstance instantiates, handshakes (first instance: reads the
// descriptor; later ones: checks it is unchanged) and runs init.
func (m *Module) newInstance(ctx context.Context) (*Instance, error) {
	refuse := func(stage string, err error) error { return &RefusedError{Plugin: m.name, Stage: stage, Err: err} }
	cctx, cancel := context.WithTimeout(ctx, m.rt.cfg.Deadline*10)
	defer cancel()
	mod, err := m.rt.rt.InstantiateModule(cctx, m.module, wazero.NewModuleConfig().WithName("").WithStartFunctions(sdk.ExportInitialize))
	if err != nil {
		return nil, refuse("instantiate", err)
	}
	inst := &Instance{m: m, mod: mod, sample: mod.ExportedFunction(sampler.ExportSample), stack: make([]uint64, 2)}
	if m.rt.cfg.Termination == TerminateFuel {
		g, ok := mod.ExportedGlobal(fuel.GlobalName).(api.MutableGlobal)
		if !ok {
			_ = mod.Close(ctx)
			return nil, refuse("instantiate", errors.New("fuel global missing"))
		}
		inst.fuel = g
	}
	if err := inst.handshake(cctx); err != nil {
		_ = mod.Close(ctx)
		return nil, err
	}
	return inst, nil
}

func (inst *Instance) handshake(ctx context.Context) error {
	m := inst.m
	refuse := func(stage string, err error) error { return &RefusedError{Plugin: m.name, Stage: stage, Err: err} }
	res, err := inst.call(ctx, sdk.ExportABIVersion, m.rt.cfg.InitFuel)
	if err != nil {
		return refuse("handshake", err)
	}
	if v := int32(res[0]); v != sampler.ABIVersion {
		return refuse("handshake", fmt.Errorf("abi version %d, this host speaks %d", v, sampler.ABIVersion))
	}
	res, err = inst.call(ctx, sdk.ExportDescribe, m.rt.cfg.InitFuel)
	if err != nil {
		return refuse("describe", err)
	}
	ptr, n := sdk.UnpackPtrLen(res[0])
	if n > sampler.MaxDescriptorSize {
		return refuse("describe", fmt.Errorf("descriptor of %d bytes is over the %d limit", n, sampler.MaxDescriptorSize))
	}
	raw, ok := inst.mod.Memory().Read(ptr, n)
	if !ok {
		return refuse("describe", fmt.Errorf("descriptor (ptr %d, len %d) is outside guest memory", ptr, n))
	}
	desc, err := sampler.ParseDescriptor(raw)
	if err != nil {
		return refuse("describe", err)
	}
	if m.k == 0 {
		m.desc, m.k = desc, desc.Candidates
	} else if desc.Version != m.desc.Version || desc.Candidates != m.k || len(desc.Params) != len(m.desc.Params) {
		return refuse("describe", errors.New("descriptor differs between instances"))
	}
	res, err = inst.call(ctx, sampler.ExportInit, m.rt.cfg.InitFuel, uint64(m.rt.cfg.MaxBatch), uint64(m.k))
	if err != nil {
		return refuse("init", err)
	}
	inst.header = uint32(res[0])
	if err := inst.views(); err != nil {
		return refuse("init", err)
	}
	return nil
}

// call runs a non-hot export with a fuel budget.
func (inst *Instance) call(ctx context.Context, export string, budget int64, params ...uint64) ([]uint64, error) {
	if inst.fuel != nil {
		inst.fuel.Set(uint64(budget))
	}
	res, err := inst.mod.ExportedFunction(export).Call(ctx, params...)
	if err != nil {
		if inst.fuel != nil && int64(inst.fuel.Get()) < 0 {
			return nil, fmt.Errorf("%s: %w (budget %d)", export, ErrOutOfFuel, budget)
		}
		return nil, fmt.Errorf("%s: %w", export, err)
	}
	return res, nil
}

// selfTest runs a synthetic batch: distinct ids, descending logits, the
// schema's defaults, a history; every answer must be a candidate.
func (m *Module) selfTest(ctx context.Context, inst *Instance) error {
	batch := min(8, m.rt.cfg.MaxBatch)
	k := m.k
	io := &inst.IO
	np := len(m.desc.Params)
	ids, nCand := make([]int32, batch*k), make([]int32, batch)
	for b := range batch {
		for j := range k {
			ids[b*k+j] = int32(1000 + 37*j + b)
			io.IDs[b*k+j] = ids[b*k+j]
			io.Logits[b*k+j] = float32(5 - 0.25*float64(j) - 0.01*float64(b))
		}
		fillLogprobs(io.Logits[b*k:b*k+k], io.Logprobs[b*k:b*k+k])
		nCand[b] = int32(max(1, k-b))
		io.NCand[b] = nCand[b]
		for i, p := range m.desc.Params {
			io.Params[b*np+i] = float32(p.Default)
		}
		io.Seed[b], io.Step[b] = uint64(b)*7919+1, uint64(b)
		h := m.desc.History
		for j := range h {
			io.History[b*h+j] = int32(1000 + 37*(j%5))
		}
		io.HistoryLen[b] = int32(h)
		clear(io.State[b*m.desc.State : (b+1)*m.desc.State])
	}
	return inst.Sample(ctx, batch, ids, nCand)
}

// fillLogprobs writes the log-softmax of logits into lp.
func fillLogprobs(logits, lp []float32) {
	mx := math.Inf(-1)
	for _, l := range logits {
		mx = math.Max(mx, float64(l))
	}
	var s float64
	for _, l := range logits {
		s += math.Exp(float64(l) - mx)
	}
	lse := mx + math.Log(s)
	for i, l := range logits {
		lp[i] = float32(float64(l) - lse)
	}
}

// Name is the module's label; SHA256 the hex digest of the bytes loaded
// (before instrumentation); Descriptor what kvhost_describe returned.
func (m *Module) Name() string                   { return m.name }
func (m *Module) SHA256() string                 { return m.sha }
func (m *Module) Descriptor() sampler.Descriptor { return m.desc }

// K is the number of candidates per row.
func (m *Module) K() int { return m.k }

// MaxBatch is the most rows one Sample takes.
func (m *Module) MaxBatch() int { return m.rt.cfg.MaxBatch }

// Stats returns the module's counters.
func (m *Module) Stats() Stats {
	s := Stats{Calls: m.calls.Load(), Failures: m.failures.Load(), Overruns: m.overruns.Load(), Max: time.Duration(m.maxNs.Load())}
	if s.Calls > 0 {
		s.Mean = time.Duration(m.totalNs.Load() / s.Calls)
	}
	return s
}

// Acquire takes an idle instance or instantiates one; its IO views are
// fresh.
func (m *Module) Acquire(ctx context.Context) (*Instance, error) {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil, fmt.Errorf("wasmrt: %s: closed", m.name)
	}
	if n := len(m.idle); n > 0 {
		inst := m.idle[n-1]
		m.idle = m.idle[:n-1]
		m.active++
		m.mu.Unlock()
		if err := inst.views(); err != nil {
			inst.broken = true
			m.Release(inst)
			return nil, err
		}
		return inst, nil
	}
	m.active++
	m.mu.Unlock()
	inst, err := m.newInstance(ctx)
	if err != nil {
		m.mu.Lock()
		m.active--
		last := m.closed && m.active == 0
		m.mu.Unlock()
		if last {
			_ = m.module.Close(context.Background())
		}
		return nil, err
	}
	return inst, nil
}

// Release returns a healthy instance to the pool; a broken one, one over
// MaxIdle or one of a closed module is closed.
func (m *Module) Release(inst *Instance) {
	m.mu.Lock()
	m.active--
	if !inst.broken && !m.closed && len(m.idle) < m.rt.cfg.MaxIdle {
		m.idle = append(m.idle, inst)
		m.mu.Unlock()
		return
	}
	last := m.closed && m.active == 0
	m.mu.Unlock()
	_ = inst.mod.Close(context.Background())
	if last {
		_ = m.module.Close(context.Background())
	}
}

// Close closes idle instances and the compiled module; instances in use
// are closed when released.
func (m *Module) Close(ctx context.Context) error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil
	}
	m.closed = true
	idle := m.idle
	m.idle = nil
	m.mu.Unlock()
	var err error
	for _, inst := range idle {
		err = errors.Join(err, inst.mod.Close(ctx))
	}
	m.mu.Lock()
	last := m.active == 0
	m.mu.Unlock()
	if last {
		err = errors.Join(err, m.module.Close(ctx))
	}
	return err
}
