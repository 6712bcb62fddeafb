package engine

import (
	"context"
	"errors"
	"fmt"

	"github.com/kvhost/kvhost/host/constraint"
	"github.com/kvhost/kvhost/host/sampling"
)

// openConstraint starts the constraint state of a request's first
// choice (nil when it has none).
func (e *Engine) openConstraint(ctx context.Context, spec *constraint.Spec) (constraint.Seq, error) {
	if spec == nil {
		return nil, nil
	}
	if e.cfg.Constraints == nil {
		return nil, &InvalidRequestError{Field: "constraint", Problem: "this server runs no output-constraint plugin"}
	}
	c, err := e.cfg.Constraints.Open(ctx, spec)
	if err != nil {
		if errors.Is(err, constraint.ErrSpec) {
			return nil, &InvalidRequestError{Field: "constraint", Problem: err.Error()}
		}
		return nil, fmt.Errorf("engine: constraint %s: %w", e.cfg.Constraints.Name(), err)
	}
	return c, nil
}

// closeConstraint releases s's constraint state.
func (s *seq) closeConstraint() {
	if s.con != nil {
		s.con.Close()
		s.con = nil
	}
}

// constrain runs the constraint step for every pending row whose request
// has a constraint: each sequence first consumes the token it generated
// last step, then its mask is applied to its row in place (-Inf for what
// is refused; end-of-generation only when the output is complete). A
// sequence whose output is complete ends with "stop" before sampling; one
// whose constraint fails ends with the error. It returns the rows left to
// sample.
func (e *Engine) constrain(pend []pendingRow) []pendingRow {
	e.conRows, e.conOwners = e.conRows[:0], e.conOwners[:0]
	for _, p := range pend {
		s := p.s
		if s.con == nil || s.done {
			continue
		}
		generated := len(s.tokens) - s.prompt
		tok := int32(-1)
		if generated > s.conFed {
			tok = s.tokens[s.prompt+s.conFed]
		}
		// The budget keeps one token back for the end of generation, so
		// a value the budget had to close ends with finish_reason "stop"
		// (clients such as the openai SDK refuse a parsed reply that
		// stopped for "length" even when it is complete).
		budget := min(s.req.MaxTokens-generated, e.ctxLen-len(s.tokens)) - 1
		e.conRows = append(e.conRows, constraint.Row{Seq: s.con, Token: tok, Budget: max(budget, 1)})
		e.conOwners = append(e.conOwners, p)
	}
	if len(e.conRows) == 0 {
		return pend
	}
	e.cfg.Constraints.Step(context.Background(), e.conRows)
	eog := e.cfg.Constraints.EOG()
	for i, r := range e.conRows {
		p := e.conOwners[i]
		s := p.s
		if r.Err != nil {
			e.finish(s, Event{Done: true, Err: fmt.Errorf("engine: constraint %s: %w", e.cfg.Constraints.Name(), r.Err)})
			continue
		}
		if r.Token >= 0 {
			s.conFed++
		}
		if r.Complete {
			e.finish(s, Event{Done: true, FinishReason: "stop"})
			continue
		}
		var deny []int32
		if !r.Accept || s.req.IgnoreEOS {
			deny = eog
		}
		if sampling.ApplyMask(p.row, r.Mask, deny) == 0 {
			if r.Accept {
				e.finish(s, Event{Done: true, FinishReason: "stop"})
				continue
			}
			e.finish(s, Event{Done: true, Err: fmt.Errorf("engine: constraint %s: %w", e.cfg.Constraints.Name(), constraint.ErrNoToken)})
		}
	}
	kept := pend[:0]
	for _, p := range pend {
		if !p.s.done {
			kept = append(kept, p)
		}
	}
	return kept
}
