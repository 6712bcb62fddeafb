package engine

import (
	"errors"
	"fmt"

	"github.com/kvhost/kvhost/host/device"
	"github.com/kvhost/kvhost/host/model"
	"github.com/kvhost/kvhost/host/sampling"
)

// run executes the batch; if it fails for lack of memory, each sequence is
// retried alone so only those that cannot run even alone fail.
func (e *Engine) run() {
	e.steps.Add(1)
	if err := e.forward(e.batch, e.owners); err != nil {
		if errors.Is(err, device.ErrOutOfMemory) {
			e.record(e.diagnose(e.batch, e.owners, e.lastEager, err))
		}
		if len(e.batch) == 1 || !errors.Is(err, device.ErrOutOfMemory) {
			for _, s := range e.owners {
				e.finish(s, Event{Done: true, Err: err})
			}
			return
		}
		e.log.Warn("engine: batch forward out of memory; retrying sequences one by one", "seqs", len(e.batch), "err", err)
		for i := range e.batch {
			if err := e.forward(e.batch[i:i+1], e.owners[i:i+1]); err != nil {
				if errors.Is(err, device.ErrOutOfMemory) {
					e.record(e.diagnose(e.batch[i:i+1], e.owners[i:i+1], e.lastEager, err))
				}
				e.finish(e.owners[i], Event{Done: true, Err: err})
			}
		}
	}
}

func (e *Engine) forward(batch []model.Seq, owners []*seq) error {
	rows := 0
	for _, b := range batch {
		rows += b.LogitRows
	}
	if need := rows * e.vocab; cap(e.logits) < need {
		e.logits = make([]float32, need)
	}
	logits := e.logits[:rows*e.vocab]
	ran := false
	e.lastEager = false
	if e.cfg.Graphs != nil && isDecode(batch) {
		var err error
		if ran, err = e.cfg.Graphs.Run(batch, logits); err != nil {
			return err
		}
		if ran {
			e.graphSteps.Add(1)
		} else {
			e.eagerDecode.Add(1)
			e.lastEager = true
		}
	}
	if !ran {
		if err := e.fwd.Forward(e.pools, batch, logits); err != nil {
			return err
		}
	}
	r := 0
	for i, b := range batch {
		s := owners[i]
		first := b.Start + len(b.Tokens) - b.LogitRows
		s.cached += len(b.Tokens)
		if !s.prefilled {
			// Cache the prefill's whole blocks as they are computed (at
			// the latest before the forks share them), so concurrent
			// requests with the same prefix hit them.
			s.prefilled = s.cached == len(s.tokens)
			e.cachePrefix(s)
		}
		if s.req.Embed && s.cached == len(s.tokens) {
			e.finish(s, Event{Done: true, FinishReason: "embed", Hidden: s.hidden, Queue: s.scheduled.Sub(s.submitted)})
			continue
		}
		for j := 0; j < b.LogitRows; j++ {
			pos := first + j
			row := logits[(r+j)*e.vocab : (r+j+1)*e.vocab]
			switch {
			case pos+1 < s.prompt && !s.started:
				e.scorePrompt(s, pos+1, row)
			case pos == len(s.tokens)-1:
				e.pending = append(e.pending, pendingRow{s, row})
			}
		}
		r += b.LogitRows
	}
	return e.sampleAndEmit()
}

// scorePrompt records the logprob of prompt token idx from the row that
// predicts it.
func (e *Engine) scorePrompt(s *seq, idx int, row []float32) {
	if idx < s.req.PromptLogprobStart {
		return
	}
	var lp float32
	lp, s.topBuf = sampling.LogSoftmaxAt(row, s.tokens[idx], s.req.PromptTopLogprobs, s.topBuf)
	pl := PromptLogprob{Index: idx, Token: s.tokens[idx], Logprob: lp}
	for _, c := range s.topBuf {
		pl.Top = append(pl.Top, TokenLogprob{Token: c.Token, Logprob: c.Logprob})
	}
	s.promptLP = append(s.promptLP, pl)
}

// fork creates the other n-1 choices of s after its prompt is cached: they
// share its pages (copy-on-write), take the state slots s reserved for them
// at admission with a copy of its state, and sample from the same last row.
func (e *Engine) fork(s *seq, row []float32) {
	n := max(s.req.N, 1)
	for c := 1; c < n; c++ {
		child := &seq{
			id: s.id, arrival: s.arrival, ctx: s.ctx, req: s.req, grp: s.grp, choice: c, prompt: s.prompt,
			tokens: append(make([]int32, 0, cap(s.tokens)), s.tokens[:s.prompt]...), cached: s.prompt,
			seed: s.seed + uint64(c)*0x9e3779b97f4a7c15, started: true,
			lock: s.lock, prefilled: true, hit: s.hit,
		}
		if e.cache != nil {
			e.cache.Relock(child.lock)
		}
		s.grp.open++
		e.running = append(e.running, child)
		if err := e.forkKV(s, child); err != nil {
			e.finish(child, Event{Done: true, Err: err})
			continue
		}
		if err := e.resolvePolicy(child); err != nil {
			e.finish(child, Event{Done: true, Err: err})
			continue
		}
		if s.con != nil {
			// s has not consumed its first token yet (it does so next
			// step): the fork starts where the children start.
			c, err := s.con.Fork(s.ctx)
			if err != nil {
				e.finish(child, Event{Done: true, Err: fmt.Errorf("engine: constraint: %w", err)})
				continue
			}
			child.con = c
		}
		e.pending = append(e.pending, pendingRow{child, row})
	}
}

// emit streams tok, the token chosen for s from row, and forks the other
// choices after a prompt's first token.
func (e *Engine) emit(s *seq, row []float32, tok int32, version string) {
	if !s.started && max(s.req.N, 1) > 1 {
		defer e.fork(s, row)
	}
	s.step++
	ev := Event{Token: tok, Choice: s.choice, SamplerVersion: version}
	if !s.started {
		s.started = true
		ev.Prompt, s.promptLP = s.promptLP, nil
		ev.Queue = s.scheduled.Sub(s.submitted)
	}
	if s.req.Logprobs {
		var lp float32
		lp, s.topBuf = sampling.LogSoftmaxAt(row, tok, s.req.TopLogprobs, s.topBuf)
		ev.Logprob = lp
		for _, c := range s.topBuf {
			ev.TopLogprobs = append(ev.TopLogprobs, TokenLogprob{Token: c.Token, Logprob: c.Logprob})
		}
	}
	s.tokens = append(s.tokens, tok)
	s.grp.out <- ev
	generated := len(s.tokens) - s.prompt
	switch {
	case !s.req.IgnoreEOS && e.eog(tok), isStop(tok, s.req.StopTokens):
		e.finish(s, Event{Done: true, FinishReason: "stop"})
	case generated >= s.req.MaxTokens || len(s.tokens) >= e.ctxLen:
		e.finish(s, Event{Done: true, FinishReason: "length"})
	}
}

func isDecode(batch []model.Seq) bool {
	for _, b := range batch {
		if len(b.Tokens) != 1 || b.LogitRows != 1 || b.Hidden != nil {
			return false
		}
	}
	return true
}
