package plugin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvhost/kvhost/host/plugin/fuel"
	"github.com/kvhost/kvhost/sdk"
	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/sys"
)

// module is one loaded plugin version of any kind: its compiled
// (instrumented) code and a pool of instances. Kind adapters wrap it. It is
// safe for concurrent use; an instance serves one caller at a time.
type module struct {
	rt   *Runtime
	kind *kindSpec
	name string
	sha  string // of the original bytes
	size int
	key  string // in Runtime.compiled
	raw  []byte // the descriptor JSON
	// engine compiled the module and instantiates it: the runtime's
	// compiler, or its interpreter (Config.InterpretConfigurators).
	engine wazero.Runtime

	compiled wazero.CompiledModule
	// recMu guards the cache bookkeeping, which accept updates while the
	// version serves.
	recMu sync.Mutex
	files []string // compiled code in the cache
	fresh bool     // compiled now, never accepted before: a refusal deletes files
	rec   *record  // the record of an earlier acceptance (or Describe), if any
	// setup runs on every new instance after the handshake (a sampler's
	// kvhost_sampler_init); its error discards the instance.
	setup func(context.Context, *instance) error

	mu     sync.Mutex
	idle   []*instance
	active int // instances handed out and not yet released
	closed bool

	// counters: calls into the guest, failed ones, ones over their
	// deadline, total and longest time spent, the most fuel a successful
	// call (or an instance's start-up) spent
	calls, failures, overruns, nanos, maxNanos, maxFuel atomic.Int64
}

// instance is one module instance, used by one goroutine at a time.
type instance struct {
	m      *module
	mod    api.Module
	fuel   api.MutableGlobal
	stderr *tailBuffer
	broken bool
	// dl guards the watchdog's view of the call in flight: its deadline
	// (unix ns, 0 when idle) and whether the watchdog drained it.
	dl       sync.Mutex
	deadline int64
	expired  bool
	// kind adapter state: a configurator's last configure input, a
	// sampler's I/O views
	configured string
	smp        *SamplerInstance
}

// Stats are a plugin version's call counters.
type Stats struct {
	Calls, Failures int64
	// Overruns are calls that ran past their deadline.
	Overruns  int64
	Mean, Max time.Duration
	Total     time.Duration
	// MaxFuel is the most fuel one successful call or start-up spent
	// (how close the version runs to its budgets).
	MaxFuel int64
}

func (m *module) stats() Stats {
	s := Stats{Calls: m.calls.Load(), Failures: m.failures.Load(), Overruns: m.overruns.Load(),
		Max: time.Duration(m.maxNanos.Load()), Total: time.Duration(m.nanos.Load()), MaxFuel: m.maxFuel.Load()}
	if s.Calls > 0 {
		s.Mean = s.Total / time.Duration(s.Calls)
	}
	return s
}

// open prepares wasm as kind k, makes its first instance and shakes hands:
// the ABI version, then the descriptor, whose "kind" must be k's. The
// caller (a kind adapter) parses the descriptor, runs its checks and
// self-test, and then calls accept, or refuse with the stage that failed.
func (r *Runtime) open(ctx context.Context, k *kindSpec, name string, wasm []byte) (*module, *instance, error) {
	m, err := r.prepare(ctx, k, name, wasm)
	if err != nil {
		return nil, nil, err
	}
	inst, err := m.instantiate(ctx)
	if err != nil {
		return nil, nil, m.refuse(ctx, "instantiate", err)
	}
	m.mu.Lock()
	m.active++ // handed to the adapter, which releases it
	m.mu.Unlock()
	if err := m.handshake(ctx, inst); err != nil {
		inst.broken = true
		m.release(inst)
		return nil, nil, m.refuse(ctx, "handshake", err)
	}
	return m, inst, nil
}

// handshake reads kvhost_abi_version and kvhost_describe into m.raw.
func (m *module) handshake(ctx context.Context, inst *instance) error {
	stack := make([]uint64, 1)
	if err := m.call(ctx, inst, sdk.ExportABIVersion, m.rt.cfg.InitFuel, m.rt.cfg.CallTimeout, stack); err != nil {
		return err
	}
	if v := int(api.DecodeI32(stack[0])); v != m.kind.abi {
		return &ABIError{Plugin: m.name, Want: m.kind.abi, Found: v}
	}
	for _, want := range append([]exportSig{describeExport}, m.kind.exports...) {
		if err := m.checkExport(want); err != nil {
			return err
		}
	}
	if err := m.call(ctx, inst, sdk.ExportDescribe, m.rt.cfg.InitFuel, m.rt.cfg.CallTimeout, stack); err != nil {
		return err
	}
	raw, err := m.readPacked(inst, stack[0], sdk.ExportDescribe, m.kind.maxDescriptor)
	if err != nil {
		return err
	}
	var head struct {
		Kind string `json:"kind"`
	}
	if err := json.Unmarshal(raw, &head); err != nil {
		return &ContractError{Plugin: m.name, Call: sdk.ExportDescribe, Detail: "descriptor: " + err.Error()}
	}
	if head.Kind != m.kind.name {
		return &ContractError{Plugin: m.name, Call: sdk.ExportDescribe,
			Detail: fmt.Sprintf("descriptor kind %q, but its exports are a %s's", head.Kind, m.kind.name)}
	}
	if m.raw == nil {
		m.raw = raw
	} else if string(raw) != string(m.raw) {
		return &ContractError{Plugin: m.name, Call: sdk.ExportDescribe, Detail: "descriptor differs between instances"}
	}
	return nil
}

// accept records the version as accepted (its descriptor and compiled
// files, for the next start) and pools its first instance.
func (m *module) accept(inst *instance, selfTested bool) {
	m.recMu.Lock()
	defer m.recMu.Unlock()
	if d := m.rt.disk; d != nil && (m.rec == nil || !m.rec.Accepted || !slices.Equal(m.rec.Files, m.files) || selfTested && !m.rec.SelfTested) {
		rec := record{Kind: m.kind.name, Descriptor: m.raw, Accepted: true, SelfTested: selfTested || m.rec != nil && m.rec.SelfTested, Files: m.files}
		d.put(m.sha, rec)
		m.rec = &rec
	}
	m.fresh = false
	if inst != nil {
		m.release(inst)
	}
}

// selfTested reports whether a record says this version passed its
// kind's self-test.
func (m *module) selfTested() bool {
	m.recMu.Lock()
	defer m.recMu.Unlock()
	return m.rec != nil && m.rec.SelfTested
}

// refuse closes a version that was not accepted (its instances released
// first), deletes the compiled code it wrote, and returns the
// *RefusedError.
func (m *module) refuse(ctx context.Context, stage string, err error) error {
	_ = m.close(ctx)
	m.recMu.Lock()
	if m.fresh && m.rt.disk != nil {
		m.rt.disk.remove(m.files)
	}
	m.recMu.Unlock()
	return refused(m.name, stage, err)
}

// instantiate creates an instance; its fuel global starts at
// Config.InitFuel, which bounds the start functions (a Go guest's runtime
// start-up and init functions).
func (m *module) instantiate(ctx context.Context) (*instance, error) {
	stderr := newTailBuffer(4 << 10)
	cfg := wazero.NewModuleConfig().
		WithName("").
		WithStartFunctions(sdk.ExportInitialize).
		WithStderr(stderr).
		WithStdout(stderr)
	start := time.Now()
	mod, err := m.engine.InstantiateModule(ctx, m.compiled, cfg)
	if err != nil {
		inst := &instance{m: m, stderr: stderr}
		return nil, m.classify(inst, "instantiate", err, m.rt.cfg.InitFuel, 0, time.Since(start), false)
	}
	g, ok := mod.ExportedGlobal(fuel.GlobalName).(api.MutableGlobal)
	if !ok {
		_ = mod.Close(ctx)
		return nil, fmt.Errorf("plugin: %s: the fuel global is missing", m.name)
	}
	inst := &instance{m: m, mod: mod, fuel: g, stderr: stderr}
	m.rt.dog.add(inst)
	raiseTo(&m.maxFuel, m.rt.cfg.InitFuel-int64(g.Get()))
	return inst, nil
}

// acquire takes an idle instance or makes a new one (handshake and setup
// included).
func (m *module) acquire(ctx context.Context) (*instance, error) {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil, fmt.Errorf("plugin: %s: closed", m.name)
	}
	m.active++
	if n := len(m.idle); n > 0 {
		inst := m.idle[n-1]
		m.idle = m.idle[:n-1]
		m.mu.Unlock()
		return inst, nil
	}
	m.mu.Unlock()
	inst, err := m.instantiate(ctx)
	if err != nil {
		m.mu.Lock()
		m.active--
		last := m.closed && m.active == 0
		m.mu.Unlock()
		if last {
			m.rt.release(context.Background(), m.key)
		}
		return nil, err
	}
	if err = m.handshake(ctx, inst); err == nil && m.setup != nil {
		err = m.setup(ctx, inst)
	}
	if err != nil {
		inst.broken = true
		m.release(inst)
		return nil, err
	}
	return inst, nil
}

// release returns a healthy instance to the pool; a broken one (a trap, a
// spent budget or deadline, a broken contract), one over MaxIdle or one of
// a closed version is closed.
func (m *module) release(inst *instance) {
	m.mu.Lock()
	m.active--
	if !inst.broken && !m.closed && len(m.idle) < m.rt.cfg.MaxIdle && !inst.mod.IsClosed() {
		inst.stderr.Reset()
		m.idle = append(m.idle, inst)
		m.mu.Unlock()
		return
	}
	last := m.closed && m.active == 0
	m.mu.Unlock()
	m.discard(inst)
	if last {
		m.rt.release(context.Background(), m.key)
	}
}

// discard closes an instance that never joined the pool's accounting.
func (m *module) discard(inst *instance) {
	if inst.mod != nil {
		m.rt.dog.remove(inst)
		_ = inst.mod.Close(context.Background())
	}
}

// close closes idle instances and, once the last instance in use is
// released, drops the compiled module. Calls in flight finish.
func (m *module) close(ctx context.Context) error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil
	}
	m.closed = true
	idle := m.idle
	m.idle = nil
	last := m.active == 0
	m.mu.Unlock()
	for _, inst := range idle {
		m.discard(inst)
	}
	if last {
		m.rt.release(ctx, m.key)
	}
	return nil
}

// call runs export on inst with a fuel budget and a wall-clock deadline (0:
// none); stack holds the parameters and receives the results. Any failure
// marks the instance broken; a kind adapter may forgive a *GuestError.
func (m *module) call(ctx context.Context, inst *instance, export string, budget int64, deadline time.Duration, stack []uint64) error {
	fn := inst.mod.ExportedFunction(export)
	if fn == nil {
		inst.broken = true
		return &MissingExportError{Plugin: m.name, Export: export}
	}
	return m.callFn(ctx, inst, fn, export, budget, deadline, stack)
}

// callFn is call with the function already looked up (the hot path: no
// allocation).
func (m *module) callFn(ctx context.Context, inst *instance, fn api.Function, export string, budget int64, deadline time.Duration, stack []uint64) error {
	inst.fuel.Set(uint64(budget))
	start := time.Now()
	// On the interpreter a guest is ordinary Go code that honours its
	// context (the interpreter runtime closes the instance when it
	// ends): the deadline is the call's context there, and the watchdog,
	// whose fuel write would race with the interpreter's plain reads of
	// the global, stays out of it. Compiled guests get the watchdog.
	interpreted := m.engine != m.rt.rt
	if deadline > 0 && interpreted {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, deadline)
		defer cancel()
	} else if deadline > 0 {
		m.rt.dog.arm(inst, start.Add(deadline))
	}
	err := fn.CallWithStack(ctx, stack)
	expired := deadline > 0 && !interpreted && m.rt.dog.disarm(inst)
	elapsed := time.Since(start)
	m.calls.Add(1)
	m.nanos.Add(int64(elapsed))
	raiseTo(&m.maxNanos, int64(elapsed))
	late := deadline > 0 && elapsed > deadline
	if late || expired {
		m.overruns.Add(1)
	}
	if err == nil && !late && !expired {
		raiseTo(&m.maxFuel, budget-int64(inst.fuel.Get()))
		return nil
	}
	m.failures.Add(1)
	inst.broken = true
	return m.classify(inst, export, err, budget, deadline, elapsed, expired || late)
}

// raiseTo raises a to v if v is larger.
func raiseTo(a *atomic.Int64, v int64) {
	for {
		old := a.Load()
		if v <= old || a.CompareAndSwap(old, v) {
			return
		}
	}
}

// classify turns a failed call into its typed error.
func (m *module) classify(inst *instance, call string, err error, budget int64, deadline, elapsed time.Duration, overdue bool) error {
	if overdue {
		return &DeadlineError{Plugin: m.name, Call: call, Timeout: deadline, Elapsed: elapsed}
	}
	var exit *sys.ExitError
	if errors.As(err, &exit) {
		switch exit.ExitCode() {
		case sys.ExitCodeDeadlineExceeded:
			return &DeadlineError{Plugin: m.name, Call: call, Timeout: deadline, Elapsed: elapsed}
		case sys.ExitCodeContextCanceled:
			return fmt.Errorf("plugin: %s: %s canceled: %w", m.name, call, context.Canceled)
		}
	}
	out := inst.stderr.String()
	reason := guestReason(out)
	switch {
	case reason != "":
	case inst.fuel == nil:
		// Instantiation failed: wazero closed the instance, so its fuel
		// cannot be read; its start functions ran under budget.
		reason = fmt.Sprintf("start-up trapped (a guest trap, or its start-up budget of %d fuel ran out)", budget)
	case int64(inst.fuel.Get()) < 0:
		// The trap is the instrumentation's unreachable.
		return &FuelError{Plugin: m.name, Call: call, Budget: budget, Elapsed: elapsed}
	default:
		reason = m.memoryNote(inst)
	}
	return &TrapError{Plugin: m.name, Call: call, Reason: reason, Stderr: out, Err: err}
}

// memoryNote names the memory cap when a trapping guest had grown its
// memory to it (a memory bomb cannot exceed the cap, only fail).
func (m *module) memoryNote(inst *instance) string {
	if inst.mod == nil {
		return ""
	}
	limit := m.kind.pages(m.rt.cfg)
	if mem := inst.mod.Memory(); mem != nil {
		if pages := mem.Size() / 65536; pages >= limit {
			return fmt.Sprintf("guest trapped with its memory at the cap of %d pages (%d MiB)", limit, limit/16)
		}
	}
	return ""
}

// readPacked copies the (ptr<<32|len) region an export returned out of
// guest memory.
func (m *module) readPacked(inst *instance, packed uint64, what string, limit uint32) ([]byte, error) {
	ptr, n := sdk.UnpackPtrLen(packed)
	if n > limit {
		return nil, &ContractError{Plugin: m.name, Call: what, Detail: fmt.Sprintf("%d bytes is over the %d limit", n, limit)}
	}
	b, ok := inst.mod.Memory().Read(ptr, n)
	if !ok {
		return nil, &ContractError{Plugin: m.name, Call: what, Detail: fmt.Sprintf("(ptr %d, len %d) is outside guest memory", ptr, n)}
	}
	return append([]byte(nil), b...), nil
}

// checkExport checks one required export's presence and signature.
func (m *module) checkExport(want exportSig) error {
	def, ok := m.compiled.ExportedFunctions()[want.name]
	wantSig := signature(want.params, want.results)
	if !ok {
		return &MissingExportError{Plugin: m.name, Export: want.name, Want: wantSig}
	}
	if got := signature(def.ParamTypes(), def.ResultTypes()); got != wantSig {
		return &MissingExportError{Plugin: m.name, Export: want.name, Want: wantSig, Found: got}
	}
	return nil
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
