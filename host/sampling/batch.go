package sampling

import (
	"context"
	"errors"
	"fmt"

	"github.com/kvhost/kvhost/host/plugin"
)

// SeqState is what a step needs to know about one sequence. Keep it
// across the sequence's steps: SampleBatch caches resolved parameters in
// Params and allocates State on the first step.
type SeqState struct {
	Params Compiled
	// Seed and Step key the sequence's random stream: the same seed, step
	// and parameters give the same token whatever else is in the batch.
	Seed, Step uint64
	// Generated holds the tokens generated so far (penalties; the last
	// History of them go to policies that ask for them).
	Generated []int32
	// Prompt holds the prompt's distinct tokens, sorted (PromptSet): the
	// repetition penalty reads them with Generated. NewSeqState fills it
	// only when a repetition penalty applies.
	Prompt []int32
	// Bias is the logit bias, from NormalizeBias.
	Bias []TokenBias
	// State is the policy's per-sequence state (zeroed when the policy's
	// state size changes); nil before the first step.
	State []float32
}

// Choice is a step's result for one sequence.
type Choice struct {
	Token int32
	// Logprob is the log-probability the policy gave the token among its
	// candidates after the pre-ops (0 for greedy).
	Logprob float32
	// Version is "<version>+<sha256 prefix>" of the policy version that
	// chose it.
	Version string
	// Policy is the policy that chose it: the one asked for, or the
	// default when the one asked for is disabled.
	Policy string
}

// batchScratch is one step's working memory (pooled).
type batchScratch struct {
	rows  []rowScratch
	ids   []int32 // host copy of the candidates, stride K
	nCand []int32
}

// SampleBatch runs one decode step of policy ("" = default) for the rows
// of logits (one per sequence, vocabulary-wide; never copied or modified)
// and writes out[i] for seqs[i]. Rows beyond the runtime's MaxBatch are
// split into several guest calls. It holds the policy version for the
// whole step, so a concurrent Swap never mixes versions within a step.
// It allocates nothing in steady state.
//
// A step that fails (a trap, a spent fuel budget or deadline, a broken
// contract) fails for that step only: it is logged and counted
// (Info.Failures, Info.Fallbacks), and its rows are served at once by the
// default policy (Choice.Policy says which ran; parameters the default
// does not take are ignored, and its pre-ops apply). So are the rows of a
// policy disabled after repeated failures (Options.DisableAfter). When the
// default cannot take over (it is the policy, is disabled, not loaded, or
// fails too) SampleBatch returns an error matching ErrHostFallback
// (*PolicyDisabledError or *StepFailedError), leaves out untouched, and the
// caller samples those rows with the host-native Sampler. Other errors are
// the caller's (mismatched lengths, an empty row, an unknown policy).
func (r *Registry) SampleBatch(ctx context.Context, policy string, rows [][]float32, seqs []SeqState, out []Choice) error {
	if len(rows) != len(seqs) || len(out) < len(rows) {
		return fmt.Errorf("sampling: %d rows, %d sequences, %d outputs", len(rows), len(seqs), len(out))
	}
	if policy == "" {
		policy = r.opts.Default
	}
	asked := r.entry(policy)
	var g *generation
	if asked != nil {
		g = asked.acquire()
	}
	if g == nil {
		return &UnknownPolicyError{Policy: policy, Available: r.names()}
	}
	e := asked
	if d := g.Value.disabled.Load(); d != nil {
		g.Release()
		asked.fallbacks.Add(int64(len(rows)))
		if e, g = r.fallback(policy); g == nil {
			return d
		}
	}
	defer g.Release()
	var s *batchScratch
	select {
	case s = <-r.scratch:
	default:
		s = new(batchScratch)
	}
	defer func() {
		select {
		case r.scratch <- s:
		default:
		}
	}()
	maxB := g.Value.mod.MaxBatch()
	for start := 0; start < len(rows); start += maxB {
		end := min(start+maxB, len(rows))
		e.calls.Add(1)
		err := r.step(ctx, g, s, rows[start:end], seqs[start:end], out[start:end])
		if err == nil {
			succeeded(g)
			continue
		}
		e.failures.Add(1)
		r.failed(g, err)
		if !plugin.IsGuestFault(err) {
			return err
		}
		if err := r.stepFallback(ctx, asked, g, err, s, rows[start:end], seqs[start:end], out[start:end]); err != nil {
			return err
		}
	}
	return nil
}

// stepFallback serves the rows of a failed step with the default policy.
func (r *Registry) stepFallback(ctx context.Context, asked *entry, failed *generation, cause error, s *batchScratch, rows [][]float32, seqs []SeqState, out []Choice) error {
	name := failed.Value.mod.Name()
	asked.fallbacks.Add(int64(len(rows)))
	de, dg := r.fallback(name)
	fallback := r.opts.Default
	if dg == nil {
		fallback = "host sampler"
	}
	r.log.Warn("sampler step failed; its rows fall back", "policy", name, "version", failed.Value.version,
		"rows", len(rows), "fallback", fallback, "err", firstLine(cause))
	if dg == nil {
		return &StepFailedError{Policy: name, Err: cause}
	}
	defer dg.Release()
	de.calls.Add(1)
	if err := r.step(ctx, dg, s, rows, seqs, out); err != nil {
		de.failures.Add(1)
		r.failed(dg, err)
		return &StepFailedError{Policy: name, Err: errors.Join(cause, err)}
	}
	succeeded(dg)
	return nil
}

func (r *Registry) step(ctx context.Context, g *generation, s *batchScratch, rows [][]float32, seqs []SeqState, out []Choice) error {
	p := g.Value
	m := p.mod
	k := m.K()
	d := m.Descriptor()
	np, ns, nh := p.schema.nGuest, d.State, d.History
	batch := len(rows)
	if len(s.rows) < batch {
		s.rows = append(s.rows, make([]rowScratch, batch-len(s.rows))...)
	}
	if cap(s.ids) < batch*k {
		s.ids = make([]int32, batch*k)
	}
	if cap(s.nCand) < batch {
		s.nCand = make([]int32, batch)
	}
	ids, nCand := s.ids[:batch*k], s.nCand[:batch]
	inst, err := m.Acquire(ctx)
	if err != nil {
		return err
	}
	defer m.Release(inst)
	io := &inst.IO
	for b, row := range rows {
		seq := &seqs[b]
		if seq.Params.key != p.schema.key {
			seq.Params.resolve(p.schema)
		}
		if len(row) == 0 {
			return fmt.Errorf("sampling: row %d is empty", b)
		}
		rs := &s.rows[b]
		n := rs.candidates(row, seq, &seq.Params.host, p.schema.ops, k,
			io.IDs[b*k:b*k+k], io.Logits[b*k:b*k+k], io.Logprobs[b*k:b*k+k])
		if n == 0 {
			return fmt.Errorf("sampling: row %d has no finite logit", b)
		}
		copy(ids[b*k:b*k+n], io.IDs[b*k:b*k+n])
		nCand[b] = int32(n)
		io.NCand[b] = int32(n)
		copy(io.Params[b*np:b*np+np], seq.Params.guest)
		io.Seed[b], io.Step[b] = seq.Seed, seq.Step
		if nh > 0 {
			h := seq.Generated[max(0, len(seq.Generated)-nh):]
			copy(io.History[b*nh:], h)
			io.HistoryLen[b] = int32(len(h))
		}
		if ns > 0 {
			if len(seq.State) != ns {
				seq.State = make([]float32, ns)
			}
			copy(io.State[b*ns:b*ns+ns], seq.State)
		}
	}
	if err := inst.Sample(ctx, batch, ids, nCand); err != nil {
		return err
	}
	for b := range batch {
		out[b] = Choice{Token: io.OutID[b], Logprob: io.OutLogprob[b], Version: p.version, Policy: m.Name()}
		if ns > 0 {
			copy(seqs[b].State, io.State[b*ns:b*ns+ns])
		}
	}
	return nil
}
