package plugin

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"sync"
	"unsafe"

	sdkc "github.com/kvhost/kvhost/sdk/constraint"
	"github.com/tetratelabs/wazero/api"
)

// Constraint is one loaded output-constraint plugin version (constraint
// ABI 1, sdk/CONSTRAINT_ABI.md) — the constraint kind's adapter over the
// runtime core. Unlike the other kinds its instances hold state: each
// keeps the sequences opened on it (and the compiled grammars and mask
// caches they share), so an instance is taken from the pool once, kept,
// and only ever discarded. Sequences of one spec go to the instance that
// already serves that spec; others to the least loaded instance, up to
// Config.MaxConstraintInstances. A failure on an instance (trap, fuel,
// deadline, broken contract) ends that instance's sequences and no
// others; the next Open makes a fresh one. Safe for concurrent use.
type Constraint struct {
	m     *module
	desc  *sdkc.Descriptor
	vocab []byte // KVV1, written into each new instance
	n     int    // vocabulary size
	words int

	mu    sync.Mutex
	insts []*constraintInstance
}

// constraintInstance is one instance with its I/O region; mu serialises
// calls into it.
type constraintInstance struct {
	c      *Constraint
	inst   *instance
	mu     sync.Mutex
	header uint32
	step   api.Function
	stack  []uint64
	seqs   int
	specs  map[string]int // open sequences per spec key
	err    error          // set once the instance failed: it serves nothing more
	io     constraintIO
}

// constraintIO are the views of the I/O region's arrays.
type constraintIO struct {
	handle, token, budget, status []int32
	flags, mask                   []uint32
}

// ConstraintSeq is one sequence opened on a Constraint.
type ConstraintSeq struct {
	ci     *constraintInstance
	h      int32
	key    string
	closed bool
}

// ConstraintRow is one sequence's part of Constraint.Step: Seq, Token
// (-1: none) and Budget in; Mask (a copy-free view of guest memory, valid
// until the next call into its instance), Accept, Complete and Err out.
type ConstraintRow struct {
	Seq              *ConstraintSeq
	Token            int32
	Budget           int
	Mask             []uint32
	Accept, Complete bool
	Err              error
}

var _ interface {
	Name() string
	SHA256() string
	Close(context.Context) error
} = (*Constraint)(nil)

// LoadConstraint loads wasm as a constraint plugin over vocab (the KVV1
// vocabulary, grammar.MarshalVocab): the load pipeline, the handshake, a
// valid descriptor, and kvhost_constraint_init on a first instance
// allocating a consistent I/O region. A refusal is a *RefusedError naming
// the stage.
func (r *Runtime) LoadConstraint(ctx context.Context, name string, wasm, vocab []byte) (*Constraint, error) {
	if len(vocab) < 8 || string(vocab[:4]) != "KVV1" {
		return nil, fmt.Errorf("plugin: %s: the vocabulary is not KVV1", name)
	}
	m, inst, err := r.open(ctx, constraintKind, name, wasm)
	if err != nil {
		return nil, err
	}
	desc, err := sdkc.ParseDescriptor(m.raw)
	if err != nil {
		inst.broken = true
		m.release(inst)
		return nil, m.refuse(ctx, "describe", &ContractError{Plugin: name, Call: "kvhost_describe", Detail: err.Error()})
	}
	n := int(binary.LittleEndian.Uint32(vocab[4:]))
	c := &Constraint{m: m, desc: desc, vocab: vocab, n: n, words: (n + 31) / 32}
	ci, err := c.setup(ctx, inst)
	if err != nil {
		inst.broken = true
		m.release(inst)
		return nil, m.refuse(ctx, "init", err)
	}
	m.accept(nil, false)
	c.insts = append(c.insts, ci)
	return c, nil
}

// Name, SHA256 and Descriptor describe the loaded version.
func (c *Constraint) Name() string                 { return c.m.name }
func (c *Constraint) SHA256() string               { return c.m.sha }
func (c *Constraint) Descriptor() sdkc.Descriptor  { return *c.desc }
func (c *Constraint) Stats() Stats                 { return c.m.stats() }
func (c *Constraint) Accepts(format string) bool   { return c.desc.Accepts(format) }
func (ci *constraintInstance) name() string        { return ci.c.m.name }
func (ci *constraintInstance) fail(err error) bool { ci.err = err; ci.inst.broken = true; return false }

// setup writes the vocabulary into inst and runs kvhost_constraint_init.
func (c *Constraint) setup(ctx context.Context, inst *instance) (*constraintInstance, error) {
	cfg := c.m.rt.cfg
	stack := []uint64{uint64(len(c.vocab))}
	if err := c.m.call(ctx, inst, "kvhost_malloc", cfg.InitFuel, cfg.CallTimeout, stack); err != nil {
		return nil, err
	}
	ptr := uint32(stack[0])
	if ptr == 0 || !inst.mod.Memory().Write(ptr, c.vocab) {
		return nil, &ContractError{Plugin: c.m.name, Call: "kvhost_malloc", Detail: fmt.Sprintf("no room for the %d-byte vocabulary (block at %d)", len(c.vocab), ptr)}
	}
	stack = []uint64{uint64(ptr), uint64(len(c.vocab)), uint64(cfg.MaxBatch)}
	if err := c.m.call(ctx, inst, sdkc.ExportInit, cfg.ConstraintInitFuel, cfg.CallTimeout, stack); err != nil {
		return nil, err
	}
	ci := &constraintInstance{c: c, inst: inst, header: uint32(stack[0]), step: inst.mod.ExportedFunction(sdkc.ExportStep),
		stack: make([]uint64, 1), specs: map[string]int{}}
	if ci.header == 0 {
		return nil, &GuestError{Plugin: c.m.name, Call: sdkc.ExportInit, Msg: c.lastError(inst)}
	}
	if err := ci.views(); err != nil {
		return nil, &ContractError{Plugin: c.m.name, Call: sdkc.ExportInit, Detail: err.Error()}
	}
	return ci, nil
}

// lastError reads kvhost_last_error (best effort).
func (c *Constraint) lastError(inst *instance) string {
	stack := make([]uint64, 1)
	if err := c.m.call(context.Background(), inst, "kvhost_last_error", c.m.rt.cfg.InitFuel, c.m.rt.cfg.CallTimeout, stack); err != nil {
		return "(kvhost_last_error failed: " + err.Error() + ")"
	}
	b, err := c.m.readPacked(inst, stack[0], "kvhost_last_error", 4096)
	if err != nil {
		return "(unreadable error text)"
	}
	return string(b)
}

// views re-derives the I/O views from the header, checking it.
func (ci *constraintInstance) views() error {
	mem := ci.inst.mod.Memory()
	if mem == nil {
		return errors.New("the module has no memory")
	}
	if ci.header%4 != 0 {
		return fmt.Errorf("I/O header address %d is not 4-aligned", ci.header)
	}
	hdr, ok := mem.Read(ci.header, 4*sdkc.HeaderWords)
	if !ok {
		return fmt.Errorf("I/O header at %d lies outside guest memory", ci.header)
	}
	word := func(i int) int { return int(binary.LittleEndian.Uint32(hdr[4*i:])) }
	b := ci.c.m.rt.cfg.MaxBatch
	want := [...]int{sdkc.IOMagic, b, ci.c.n, ci.c.words}
	for i, v := range want {
		if word(i) != v {
			return fmt.Errorf("I/O header word %d is %d, want %d", i, word(i), v)
		}
	}
	var err error
	i32s := func(dst *[]int32, w int) {
		if err == nil {
			*dst, err = view[int32](mem, hdr, w, b)
		}
	}
	u32s := func(dst *[]uint32, w int) {
		if err == nil {
			*dst, err = view[uint32](mem, hdr, w, b)
		}
	}
	io := &ci.io
	i32s(&io.handle, sdkc.HdrHandle)
	i32s(&io.token, sdkc.HdrToken)
	i32s(&io.budget, sdkc.HdrBudget)
	i32s(&io.status, sdkc.HdrStatus)
	u32s(&io.flags, sdkc.HdrFlags)
	u32s(&io.mask, sdkc.HdrMask)
	return err
}

// instanceFor picks the instance for a new sequence of spec key: the
// one already serving the key, else the least loaded if it is idle or no
// more instances may be made; nil means make one. Failed instances are
// skipped, and released once they hold no sequence.
func (c *Constraint) instanceFor(key string) *constraintInstance {
	c.mu.Lock()
	defer c.mu.Unlock()
	kept := c.insts[:0]
	var host, least *constraintInstance
	live, leastSeqs := 0, 0
	for _, ci := range c.insts {
		ci.mu.Lock()
		dead, seqs, hosts := ci.err != nil, ci.seqs, ci.specs[key] > 0
		ci.mu.Unlock()
		if dead && seqs == 0 {
			c.m.release(ci.inst)
			continue
		}
		kept = append(kept, ci)
		if dead {
			continue
		}
		live++
		if hosts {
			host = ci
		}
		if least == nil || seqs < leastSeqs {
			least, leastSeqs = ci, seqs // counts read under each instance's lock
		}
	}
	c.insts = kept
	switch {
	case host != nil:
		return host
	case least != nil && (leastSeqs == 0 || live >= c.m.rt.cfg.MaxConstraintInstances):
		return least
	}
	return nil
}

// Open starts a sequence for spec (constraint.Spec JSON) identified by
// key. A spec the plugin refuses is a *GuestError with its status.
func (c *Constraint) Open(ctx context.Context, key string, spec []byte) (*ConstraintSeq, error) {
	ci := c.instanceFor(key)
	if ci == nil {
		inst, err := c.m.acquire(ctx)
		if err != nil {
			return nil, err
		}
		if ci, err = c.setup(ctx, inst); err != nil {
			inst.broken = true
			c.m.release(inst)
			return nil, err
		}
		c.mu.Lock()
		c.insts = append(c.insts, ci)
		c.mu.Unlock()
	}
	ci.mu.Lock()
	defer ci.mu.Unlock()
	if ci.err != nil {
		return nil, ci.err
	}
	cfg := c.m.rt.cfg
	stack := []uint64{uint64(len(spec))}
	if err := c.m.call(ctx, ci.inst, "kvhost_malloc", cfg.ConstraintInitFuel, cfg.CallTimeout, stack); err != nil {
		ci.fail(err)
		return nil, err
	}
	ptr := uint32(stack[0])
	if ptr == 0 || !ci.inst.mod.Memory().Write(ptr, spec) {
		err := &ContractError{Plugin: c.m.name, Call: "kvhost_malloc", Detail: fmt.Sprintf("no room for a %d-byte spec", len(spec))}
		ci.fail(err)
		return nil, err
	}
	stack = []uint64{uint64(ptr), uint64(len(spec))}
	err := c.m.call(ctx, ci.inst, sdkc.ExportOpen, cfg.ConstraintInitFuel, cfg.CallTimeout, stack)
	if err == nil {
		free := []uint64{uint64(ptr)}
		err = c.m.call(ctx, ci.inst, "kvhost_free", cfg.InitFuel, cfg.CallTimeout, free)
	}
	if err != nil {
		ci.fail(err)
		return nil, err
	}
	h := api.DecodeI32(stack[0])
	if h <= 0 {
		return nil, &GuestError{Plugin: c.m.name, Call: sdkc.ExportOpen, Status: h, Msg: c.lastError(ci.inst)}
	}
	ci.seqs++
	ci.specs[key]++
	return &ConstraintSeq{ci: ci, h: h, key: key}, nil
}

// Fork opens a sequence at q's position on q's instance.
func (q *ConstraintSeq) Fork(ctx context.Context) (*ConstraintSeq, error) {
	ci := q.ci
	ci.mu.Lock()
	defer ci.mu.Unlock()
	if ci.err != nil {
		return nil, ci.err
	}
	c := ci.c
	stack := []uint64{uint64(uint32(q.h))}
	if err := c.m.call(ctx, ci.inst, sdkc.ExportFork, c.m.rt.cfg.ConstraintInitFuel, c.m.rt.cfg.CallTimeout, stack); err != nil {
		ci.fail(err)
		return nil, err
	}
	h := api.DecodeI32(stack[0])
	if h <= 0 {
		return nil, &GuestError{Plugin: c.m.name, Call: sdkc.ExportFork, Status: h, Msg: c.lastError(ci.inst)}
	}
	ci.seqs++
	ci.specs[q.key]++
	return &ConstraintSeq{ci: ci, h: h, key: q.key}, nil
}

// Close ends q; the last sequence of a failed instance releases it.
func (q *ConstraintSeq) Close() {
	ci := q.ci
	ci.mu.Lock()
	defer ci.mu.Unlock()
	if q.closed {
		return
	}
	q.closed = true
	ci.seqs--
	if ci.specs[q.key]--; ci.specs[q.key] <= 0 {
		delete(ci.specs, q.key)
	}
	if ci.err == nil {
		c := ci.c
		stack := []uint64{uint64(uint32(q.h))}
		if err := c.m.call(context.Background(), ci.inst, sdkc.ExportClose, c.m.rt.cfg.ConstraintInitFuel, c.m.rt.cfg.CallTimeout, stack); err != nil {
			ci.fail(err)
		}
	}
}

// Step advances every row's sequence and fills in its mask: one call per
// instance involved (rows beyond MaxBatch split), under a fuel budget of
// ConstraintFuelBase + rows × vocabulary × ConstraintFuelPerToken and the
// ConstraintStepDeadline. Every answer is checked (status, flags, a mask
// inside guest memory with no bit past the vocabulary and at least one
// set); a bad row fails alone with a *ContractError or the plugin's
// *GuestError, a failed call fails every sequence of its instance.
func (c *Constraint) Step(ctx context.Context, rows []ConstraintRow) {
	groups := map[*constraintInstance][]int{}
	for i := range rows {
		groups[rows[i].Seq.ci] = append(groups[rows[i].Seq.ci], i)
	}
	for ci, idx := range groups {
		ci.mu.Lock()
		for start := 0; start < len(idx); start += c.m.rt.cfg.MaxBatch {
			ci.stepRows(ctx, rows, idx[start:min(start+c.m.rt.cfg.MaxBatch, len(idx))])
		}
		ci.mu.Unlock()
	}
}

func (ci *constraintInstance) stepRows(ctx context.Context, rows []ConstraintRow, idx []int) {
	c := ci.c
	failAll := func(err error) {
		for _, i := range idx {
			rows[i].Err = err
		}
	}
	if ci.err != nil {
		failAll(ci.err)
		return
	}
	if err := ci.views(); err != nil {
		failAll(&ContractError{Plugin: ci.name(), Call: sdkc.ExportStep, Detail: "I/O region changed: " + err.Error()})
		ci.fail(rows[idx[0]].Err)
		return
	}
	io := &ci.io
	live := idx[:0:0]
	for _, i := range idx {
		if r := &rows[i]; r.Seq.closed {
			r.Err = fmt.Errorf("plugin: %s: step on a closed sequence", ci.name())
		} else {
			live = append(live, i)
		}
	}
	idx = live
	for k, i := range idx {
		r := &rows[i]
		io.handle[k], io.token[k], io.budget[k] = r.Seq.h, r.Token, int32(min(max(r.Budget, 0), 1<<30))
	}
	cfg := c.m.rt.cfg
	budget := cfg.ConstraintFuelBase + int64(len(idx))*int64(c.n)*cfg.ConstraintFuelPerToken
	ci.stack[0] = uint64(len(idx))
	if err := c.m.callFn(ctx, ci.inst, ci.step, sdkc.ExportStep, budget, cfg.ConstraintStepDeadline, ci.stack); err != nil {
		ci.fail(err)
		failAll(err)
		return
	}
	if st := api.DecodeI32(ci.stack[0]); st != 0 {
		err := &GuestError{Plugin: ci.name(), Call: sdkc.ExportStep, Status: st, Msg: c.lastError(ci.inst)}
		ci.fail(err)
		failAll(err)
		return
	}
	if err := ci.views(); err != nil {
		err := &ContractError{Plugin: ci.name(), Call: sdkc.ExportStep, Detail: "I/O region changed: " + err.Error()}
		ci.fail(err)
		failAll(err)
		return
	}
	mem := ci.inst.mod.Memory()
	lastBits := c.n % 32
	var lastErr string
	for k, i := range idx {
		r := &rows[i]
		if st := io.status[k]; st != 0 {
			if lastErr == "" {
				lastErr = c.lastError(ci.inst)
			}
			r.Err = &GuestError{Plugin: ci.name(), Call: sdkc.ExportStep, Status: st, Msg: lastErr}
			continue
		}
		f := io.flags[k]
		if f&^uint32(sdkc.FlagAccept|sdkc.FlagComplete) != 0 {
			r.Err = &ContractError{Plugin: ci.name(), Call: sdkc.ExportStep, Detail: fmt.Sprintf("row %d: unknown flags %#x", k, f)}
			continue
		}
		r.Accept, r.Complete = f&sdkc.FlagAccept != 0, f&sdkc.FlagComplete != 0
		addr := io.mask[k]
		b, ok := mem.Read(addr, uint32(4*c.words))
		if addr%4 != 0 || !ok {
			r.Err = &ContractError{Plugin: ci.name(), Call: sdkc.ExportStep, Detail: fmt.Sprintf("row %d: mask address %d is unaligned or its %d bytes lie outside guest memory", k, addr, 4*c.words)}
			continue
		}
		mask := unsafeWords(b)
		if lastBits != 0 && mask[len(mask)-1]>>lastBits != 0 {
			bad := c.n + bits.TrailingZeros32(mask[len(mask)-1]>>lastBits)
			r.Err = &ContractError{Plugin: ci.name(), Call: sdkc.ExportStep, Detail: fmt.Sprintf("row %d: the mask allows token id %d, outside the vocabulary of %d", k, bad, c.n)}
			continue
		}
		r.Mask = mask
	}
}

// unsafeWords views guest bytes (4-aligned, checked by the caller) as
// little-endian u32 words without copying: wasm memory is little-endian,
// as are the hosts kvhost runs on.
func unsafeWords(b []byte) []uint32 {
	if len(b) == 0 {
		return nil
	}
	return unsafe.Slice((*uint32)(unsafe.Pointer(&b[0])), len(b)/4)
}

// Close discards every instance (ending what they hold) and the compiled
// module. Sequences still open fail at their next step.
func (c *Constraint) Close(ctx context.Context) error {
	c.mu.Lock()
	insts := c.insts
	c.insts = nil
	c.mu.Unlock()
	for _, ci := range insts {
		ci.mu.Lock()
		if ci.err == nil {
			ci.fail(fmt.Errorf("plugin: %s: closed", c.m.name))
		}
		ci.mu.Unlock()
		c.m.release(ci.inst)
	}
	return c.m.close(ctx)
}
