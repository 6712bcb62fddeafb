package plugin

import (
	"context"
	"fmt"
	"math"

	"github.com/kvhost/kvhost/sdk/sampler"
	"github.com/tetratelabs/wazero/api"
)

// Sampler is one loaded sampling-policy version (sampler ABI 1,
// sdk/SAMPLER_ABI.md) — the sampler kind's adapter over the runtime core —
// and its pool of instances, each with its I/O region. It is safe for
// concurrent use; a SamplerInstance serves one goroutine at a time.
type Sampler struct {
	m    *module
	desc sampler.Descriptor
	k    int
}

var _ interface {
	Name() string
	SHA256() string
	Close(context.Context) error
} = (*Sampler)(nil)

// LoadSampler loads wasm as a sampling policy (a plugin of another kind is
// a *KindError, found before anything is compiled): the load pipeline,
// the handshake, a valid descriptor, kvhost_sampler_init allocating a
// consistent I/O region, and a self-test — a synthetic batch whose every
// answer must be one of its row's candidates. A refusal is a *RefusedError
// naming the stage. name labels the plugin in errors.
func (r *Runtime) LoadSampler(ctx context.Context, name string, wasm []byte) (*Sampler, error) {
	m, inst, err := r.open(ctx, samplerKind, name, wasm)
	if err != nil {
		return nil, err
	}
	desc, err := sampler.ParseDescriptor(m.raw)
	if err != nil {
		inst.broken = true
		m.release(inst)
		return nil, m.refuse(ctx, "describe", &ContractError{Plugin: name, Call: "kvhost_describe", Detail: err.Error()})
	}
	s := &Sampler{m: m, desc: desc, k: desc.Candidates}
	m.setup = s.setup
	if err := s.setup(ctx, inst); err != nil {
		inst.broken = true
		m.release(inst)
		return nil, m.refuse(ctx, "init", err)
	}
	if err := s.selfTest(ctx, inst.smp); err != nil {
		inst.broken = true
		m.release(inst)
		return nil, m.refuse(ctx, "self-test", err)
	}
	m.accept(inst, true)
	return s, nil
}

// setup runs kvhost_sampler_init on a new instance and derives its views.
func (s *Sampler) setup(ctx context.Context, inst *instance) error {
	c := s.m.rt.cfg
	stack := []uint64{uint64(c.MaxBatch), uint64(s.k)}
	if err := s.m.call(ctx, inst, sampler.ExportInit, c.InitFuel, c.CallTimeout, stack); err != nil {
		return err
	}
	si := &SamplerInstance{s: s, inst: inst, sample: inst.mod.ExportedFunction(sampler.ExportSample),
		stack: make([]uint64, 2), header: uint32(stack[0])}
	if err := si.views(); err != nil {
		return &ContractError{Plugin: s.m.name, Call: sampler.ExportInit, Detail: err.Error()}
	}
	inst.smp = si
	return nil
}

// selfTest runs a synthetic batch: distinct ids, descending logits, the
// schema's defaults, a history; every answer must be a candidate.
func (s *Sampler) selfTest(ctx context.Context, si *SamplerInstance) error {
	batch := min(8, s.m.rt.cfg.MaxBatch)
	k := s.k
	io := &si.IO
	np := len(s.desc.Params)
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
		for i, p := range s.desc.Params {
			io.Params[b*np+i] = float32(p.Default)
		}
		io.Seed[b], io.Step[b] = uint64(b)*7919+1, uint64(b)
		h := s.desc.History
		for j := range h {
			io.History[b*h+j] = int32(1000 + 37*(j%5))
		}
		io.HistoryLen[b] = int32(h)
		clear(io.State[b*s.desc.State : (b+1)*s.desc.State])
	}
	return si.Sample(ctx, batch, ids, nCand)
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

// Name is the policy's label; SHA256 the hex digest of the bytes loaded
// (before instrumentation); Descriptor what kvhost_describe returned.
func (s *Sampler) Name() string                   { return s.m.name }
func (s *Sampler) SHA256() string                 { return s.m.sha }
func (s *Sampler) Descriptor() sampler.Descriptor { return s.desc }

// K is the number of candidates per row.
func (s *Sampler) K() int { return s.k }

// MaxBatch is the most rows one Sample takes.
func (s *Sampler) MaxBatch() int { return s.m.rt.cfg.MaxBatch }

// Stats returns the version's step counters (the self-test included).
func (s *Sampler) Stats() Stats { return s.m.stats() }

// Close closes idle instances and the compiled module; instances in use
// are closed when released.
func (s *Sampler) Close(ctx context.Context) error { return s.m.close(ctx) }

// Acquire takes an idle instance or makes one; its views are fresh.
func (s *Sampler) Acquire(ctx context.Context) (*SamplerInstance, error) {
	inst, err := s.m.acquire(ctx)
	if err != nil {
		return nil, err
	}
	if err := inst.smp.views(); err != nil {
		inst.broken = true
		s.m.release(inst)
		return nil, &ContractError{Plugin: s.m.name, Call: sampler.ExportSample, Detail: err.Error()}
	}
	return inst.smp, nil
}

// Release returns an instance; one whose step failed is closed.
func (s *Sampler) Release(si *SamplerInstance) { s.m.release(si.inst) }

// budget is a step's fuel: FuelBase + batch × (K + history) ×
// FuelPerCandidate.
func (s *Sampler) budget(batch int) int64 {
	c := s.m.rt.cfg
	return c.FuelBase + int64(batch)*int64(s.k+s.desc.History)*c.FuelPerCandidate
}

// Sample runs the policy over the first batch rows of IO (stride K) under
// the step's fuel budget and deadline, and checks every answer is one of
// its row's candidates, as given by the host's own copies ids (stride K)
// and nCand, which the guest cannot touch. On error the instance is marked
// broken (Release closes it) and IO must not be used; the error is a
// *FuelError, *DeadlineError, *TrapError, *GuestError (negative status) or
// *ContractError.
func (si *SamplerInstance) Sample(ctx context.Context, batch int, ids, nCand []int32) error {
	s := si.s
	k := s.k
	if batch < 0 || batch > s.m.rt.cfg.MaxBatch || len(ids) < batch*k || len(nCand) < batch {
		return fmt.Errorf("plugin: %s: batch %d outside 0..%d or candidate copies too short", s.m.name, batch, s.m.rt.cfg.MaxBatch)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	si.stack[0], si.stack[1] = uint64(batch), uint64(k)
	err := s.m.callFn(ctx, si.inst, si.sample, sampler.ExportSample, s.budget(batch), s.m.rt.cfg.StepDeadline, si.stack)
	if err == nil {
		if err = si.check(batch, ids, nCand); err != nil {
			si.inst.broken = true
			s.m.failures.Add(1)
		}
	}
	return err
}

// check validates the status and the answers after a call.
func (si *SamplerInstance) check(batch int, ids, nCand []int32) error {
	s := si.s
	if st := api.DecodeI32(si.stack[0]); st != 0 {
		return &GuestError{Plugin: s.m.name, Call: sampler.ExportSample, Status: st, Msg: "the step failed"}
	}
	if err := si.views(); err != nil {
		return &ContractError{Plugin: s.m.name, Call: sampler.ExportSample, Detail: "I/O region changed: " + err.Error()}
	}
	k := s.k
	io := &si.IO
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
			return &ContractError{Plugin: s.m.name, Call: sampler.ExportSample,
				Detail: fmt.Sprintf("row %d: token %d is not one of its %d candidates", b, id, n)}
		}
		if lp := io.OutLogprob[b]; lp != lp || lp > 1e-3 {
			return &ContractError{Plugin: s.m.name, Call: sampler.ExportSample,
				Detail: fmt.Sprintf("row %d: logprob %v is not a log-probability", b, lp)}
		}
	}
	return nil
}
