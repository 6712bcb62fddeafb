package engine

import (
	"context"
	"errors"
	"fmt"

	"github.com/kvhost/kvhost/host/sampling"
)

// resolvePolicy decides how s samples (sampling.UsesPolicy): the host's
// sampler, or the named (or default) plugin policy when the engine has a
// registry, with the parameters the server compiled or, when it did not,
// compiled here by the same sampling.Registry.Compile.
func (e *Engine) resolvePolicy(s *seq) error {
	r := s.req
	s.host = sampling.NewSeqState(r.Sampling, nil, r.Prompt, s.seed)
	if e.cfg.Samplers == nil || r.SamplerParams == nil && !sampling.UsesPolicy(r.Sampler, nil, r.Sampling) {
		return nil
	}
	c := r.SamplerParams
	if c == nil {
		cc, err := e.cfg.Samplers.Compile(r.Sampler, nil, r.Sampling)
		if err != nil {
			var pe *sampling.ParamError
			if errors.As(err, &pe) && pe.FromRequest {
				return &InvalidRequestError{Field: pe.Param, Problem: fmt.Sprintf("%s (sampler %q)", pe.Problem, pe.Policy)}
			}
			return &InvalidRequestError{Field: "sampler", Problem: err.Error()}
		}
		c = &cc
	}
	s.policy = c.Policy()
	s.state = sampling.NewSeqState(r.Sampling, c, r.Prompt, s.seed)
	return nil
}

// sampleAndEmit chooses the next token of every pending row — host argmax
// or sampler, or one plugin call per policy for the whole step — and
// streams them. Output constraints mask the rows first. A policy whose step
// fails is served by the default policy (the sampling registry) or, when no
// plugin policy can, by the host sampler: its requests carry on and the
// rest of the batch never notices.
func (e *Engine) sampleAndEmit() error {
	pend := append(e.work[:0], e.pending...)
	e.pending = e.pending[:0]
	defer func() { e.work = pend[:0] }()
	if e.cfg.Constraints != nil {
		pend = e.constrain(pend)
	}
	for i := 0; i < len(pend); i++ {
		p := pend[i]
		if p.s.policy != "" {
			continue
		}
		e.emit(p.s, p.row, e.sampleHost(p), "")
		pend = append(pend, e.pending...) // forks of this row
		e.pending = e.pending[:0]
	}
	for {
		e.group = e.group[:0]
		policy := ""
		for _, p := range pend {
			if p.s.policy != "" && !p.s.done && (policy == "" || p.s.policy == policy) && !p.s.sampled {
				policy = p.s.policy
				e.group = append(e.group, p)
			}
		}
		if len(e.group) == 0 {
			break
		}
		e.rows, e.states = e.rows[:0], e.states[:0]
		for _, p := range e.group {
			st := &p.s.state
			st.Step, st.Generated = p.s.step, p.s.tokens[p.s.prompt:]
			e.rows = append(e.rows, p.row)
			e.states = append(e.states, *st)
		}
		if cap(e.choices) < len(e.group) {
			e.choices = make([]sampling.Choice, len(e.group))
		}
		out := e.choices[:len(e.group)]
		err := e.cfg.Samplers.SampleBatch(context.Background(), policy, e.rows, e.states, out)
		if err != nil {
			e.hostFallback(policy, len(e.group), err)
		}
		for i, p := range e.group {
			p.s.sampled = true
			if err != nil {
				// No plugin policy could serve the rows (the registry
				// already fell back to the default and logged it): the
				// host's own sampler takes over, so a plugin never fails
				// a request.
				e.emit(p.s, p.row, e.sampleHost(p), "host")
				continue
			}
			p.s.state.State = e.states[i].State
			e.emit(p.s, p.row, out[i].Token, out[i].Policy+"@"+out[i].Version)
		}
		pend = append(pend, e.pending...)
		e.pending = e.pending[:0]
	}
	for _, p := range pend {
		p.s.sampled = false
	}
	return nil
}

// sampleHost picks p's next token with the host's sampler.
func (e *Engine) sampleHost(p pendingRow) int32 {
	st := &p.s.host
	st.Step, st.Generated = p.s.step, p.s.tokens[p.s.prompt:]
	return e.sampler.SampleSeq(p.row, st)
}

// hostFallback logs rows the host sampler serves because no plugin policy
// could. The registry logs and counts (Info.Fallbacks, the
// kvhost_sampler_fallbacks_total metric) the plugin failures itself; what is
// left to log here is any other cause (a policy removed while its
// requests ran).
func (e *Engine) hostFallback(policy string, rows int, err error) {
	if !errors.Is(err, sampling.ErrHostFallback) {
		e.log.Warn("engine: sampling policy unavailable; the host sampler serves its rows", "policy", policy, "rows", rows, "err", err)
	}
}
