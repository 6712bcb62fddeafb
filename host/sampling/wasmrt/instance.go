package wasmrt

import (
	"context"
	"encoding/binary"
	"fmt"
	"time"
	"unsafe"

	"github.com/kvhost/kvhost/sdk/sampler"
	"github.com/tetratelabs/wazero/api"
)

// IO are typed views of one instance's I/O region (sdk/SAMPLER_ABI.md):
// the caller writes rows of stride K (the module's K) and reads OutID and
// OutLogprob after Sample. Valid until the next call into the instance.
type IO struct {
	Params     []float32 // [MaxBatch × len(params)], schema order
	Seed, Step []uint64
	NCand      []int32 // valid candidates per row, 1..K
	IDs        []int32 // [MaxBatch × K], sorted by descending logit
	Logits     []float32
	Logprobs   []float32
	History    []int32 // [MaxBatch × history], oldest first
	HistoryLen []int32
	State      []float32 // [MaxBatch × state], in and out
	OutID      []int32
	OutLogprob []float32
}

// Instance is one module instance with its views; one goroutine at a time.
type Instance struct {
	IO     IO
	m      *Module
	mod    api.Module
	sample api.Function
	fuel   api.MutableGlobal
	stack  []uint64
	header uint32
	broken bool
}

// view returns a typed, bounds- and alignment-checked view of n T at the
// address in header word w.
func view[T any](mem api.Memory, hdr []byte, w int, n int) ([]T, error) {
	off := binary.LittleEndian.Uint32(hdr[4*w:])
	var z T
	size := unsafe.Sizeof(z)
	if uintptr(off)%unsafe.Alignof(z) != 0 {
		return nil, fmt.Errorf("wasmrt: I/O header word %d: address %d is not %d-aligned", w, off, unsafe.Alignof(z))
	}
	if n == 0 {
		return nil, nil
	}
	b, ok := mem.Read(off, uint32(uintptr(n)*size))
	if !ok {
		return nil, fmt.Errorf("wasmrt: I/O header word %d: %d×%d bytes at %d lie outside guest memory (%d bytes)", w, n, size, off, mem.Size())
	}
	return unsafe.Slice((*T)(unsafe.Pointer(&b[0])), n), nil
}

// views re-derives IO from the guest's header, checking it against the
// configuration and descriptor.
func (inst *Instance) views() error {
	mem := inst.mod.Memory()
	if mem == nil {
		return fmt.Errorf("wasmrt: module has no memory")
	}
	if inst.header%4 != 0 {
		return fmt.Errorf("wasmrt: I/O header address %d is not 4-aligned", inst.header)
	}
	hdr, ok := mem.Read(inst.header, 4*sampler.HeaderWords)
	if !ok || inst.header == 0 {
		return fmt.Errorf("wasmrt: I/O header at %d lies outside guest memory", inst.header)
	}
	word := func(i int) int { return int(binary.LittleEndian.Uint32(hdr[4*i:])) }
	d := inst.m.desc
	b, k := inst.m.rt.cfg.MaxBatch, inst.m.k
	want := [...]int{sampler.IOMagic, b, k, len(d.Params), d.State, d.History}
	for i, v := range want {
		if word(i) != v {
			return fmt.Errorf("wasmrt: I/O header word %d is %d, want %d", i, word(i), v)
		}
	}
	var err error
	set := func(dst any, w, n int) {
		if err != nil {
			return
		}
		switch p := dst.(type) {
		case *[]float32:
			*p, err = view[float32](mem, hdr, w, n)
		case *[]int32:
			*p, err = view[int32](mem, hdr, w, n)
		case *[]uint64:
			*p, err = view[uint64](mem, hdr, w, n)
		}
	}
	io := &inst.IO
	set(&io.Params, sampler.HdrParams, b*len(d.Params))
	set(&io.Seed, sampler.HdrSeed, b)
	set(&io.Step, sampler.HdrStep, b)
	set(&io.NCand, sampler.HdrNCand, b)
	set(&io.IDs, sampler.HdrIDs, b*k)
	set(&io.Logits, sampler.HdrLogits, b*k)
	set(&io.Logprobs, sampler.HdrLogprobs, b*k)
	set(&io.History, sampler.HdrHistory, b*d.History)
	set(&io.HistoryLen, sampler.HdrHistoryLen, b)
	set(&io.State, sampler.HdrState, b*d.State)
	set(&io.OutID, sampler.HdrOutID, b)
	set(&io.OutLogprob, sampler.HdrOutLogprob, b)
	return err
}

// Sample runs the policy over the first batch rows of IO (stride K) and
// checks every answer is one of its row's candidates, as given by the
// host's own copies ids (stride K) and nCand, which the guest cannot
// touch. On error the instance is marked broken (Release closes it) and IO
// must not be used.
func (inst *Instance) Sample(ctx context.Context, batch int, ids, nCand []int32) error {
	m := inst.m
	k := m.k
	if batch < 0 || batch > m.rt.cfg.MaxBatch || len(ids) < batch*k || len(nCand) < batch {
		return fmt.Errorf("wasmrt: %s: batch %d outside 0..%d or candidate copies too short", m.name, batch, m.rt.cfg.MaxBatch)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	budget := m.budget(batch)
	if inst.fuel != nil {
		inst.fuel.Set(uint64(budget))
	}
	inst.stack[0], inst.stack[1] = uint64(batch), uint64(k)
	start := time.Now()
	var err error
	if m.rt.cfg.Termination == TerminateContext {
		cctx, cancel := context.WithTimeout(ctx, m.rt.cfg.Deadline)
		err = inst.sample.CallWithStack(cctx, inst.stack)
		cancel()
	} else {
		err = inst.sample.CallWithStack(ctx, inst.stack)
	}
	elapsed := time.Since(start)
	m.calls.Add(1)
	m.totalNs.Add(int64(elapsed))
	for {
		old := m.maxNs.Load()
		if int64(elapsed) <= old || m.maxNs.CompareAndSwap(old, int64(elapsed)) {
			break
		}
	}
	if elapsed > m.rt.cfg.Deadline {
		m.overruns.Add(1)
	}
	if err == nil {
		err = inst.check(batch, elapsed, ids, nCand)
	} else if inst.fuel != nil && int64(inst.fuel.Get()) < 0 {
		err = &StepError{Plugin: m.name, Kind: StepFuel, Elapsed: elapsed,
			Detail: fmt.Sprintf("budget of %d for batch %d × (k %d + history %d) spent", budget, batch, k, m.desc.History)}
	} else {
		err = &StepError{Plugin: m.name, Kind: StepTrap, Elapsed: elapsed, Detail: inst.trapDetail(), Err: err}
	}
	if err != nil {
		inst.broken = true
		m.failures.Add(1)
	}
	return err
}

// trapDetail describes a trap, naming the memory cap when the guest had
// grown its memory to it (a memory bomb: wazero refuses memory.grow past
// Config.MemoryLimitPages, so the guest cannot exceed it, only fail).
func (inst *Instance) trapDetail() string {
	limit := inst.m.rt.cfg.MemoryLimitPages
	if mem := inst.mod.Memory(); mem != nil {
		if pages := mem.Size() / wasmPage; pages >= limit {
			return fmt.Sprintf("guest trapped with its memory at the cap of %d pages (%d MiB, Config.MemoryLimitPages)", limit, limit/16)
		}
	}
	return "guest trapped"
}

// wasmPage is the WebAssembly page size.
const wasmPage = 65536

// budget is a step's fuel: FuelBase + batch × (K + history) ×
// FuelPerCandidate.
func (m *Module) budget(batch int) int64 {
	return m.rt.cfg.FuelBase + int64(batch)*int64(m.k+m.desc.History)*m.rt.cfg.FuelPerCandidate
}

// check validates the status and the answers after a call.
func (inst *Instance) check(batch int, elapsed time.Duration, ids, nCand []int32) error {
	m := inst.m
	if st := int32(inst.stack[0]); st != 0 {
		return &StepError{Plugin: m.name, Kind: StepStatus, Elapsed: elapsed, Detail: fmt.Sprintf("kvhost_sample returned %d", st)}
	}
	if err := inst.views(); err != nil {
		return &StepError{Plugin: m.name, Kind: StepContract, Elapsed: elapsed, Detail: "I/O region changed", Err: err}
	}
	k := m.k
	io := &inst.IO
	for b := range batch {
		id := io.OutID[b]
		n := int(nCand[b])
		ok := false
		for _, c := range ids[b*k : b*k+min(max(n, 0), k)] {
			if c == id {
				ok = true
				break
			}
		}
		if !ok {
			return &StepError{Plugin: m.name, Kind: StepContract, Elapsed: elapsed,
				Detail: fmt.Sprintf("row %d: token %d is not one of its %d candidates", b, id, n)}
		}
		if lp := io.OutLogprob[b]; lp != lp || lp > 1e-3 {
			return &StepError{Plugin: m.name, Kind: StepContract, Elapsed: elapsed,
				Detail: fmt.Sprintf("row %d: logprob %v is not a log-probability", b, lp)}
		}
	}
	return nil
}
