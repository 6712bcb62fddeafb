package engine

import (
	"errors"
	"fmt"
	"runtime/debug"
	"time"

	"github.com/kvhost/kvhost/host/kv"
	"github.com/kvhost/kvhost/host/model"
)

// admit moves waiting requests into the running set, oldest first.
func (e *Engine) admit() {
	e.mu.Lock()
	defer e.mu.Unlock()
	// Admit in arrival order (or longest cached prefix first) while every
	// pool can hold each newcomer: its pages in each token pool (a window
	// pool's at most window + chunk tokens) beyond the cached prefix it
	// shares, out of the free pages and the unlocked cached ones, and its
	// slots in each state pool. Admitting what cannot fit would only
	// preempt it again.
	if e.cfg.Policy == LPM {
		e.orderByPrefix()
	}
	taken := make([]int, len(e.pools.TokenPools()))
	for len(e.waiting) > 0 && len(e.running) < e.cfg.MaxRunning {
		s := e.waiting[0]
		e.attachPrefix(s)
		need := e.pagesToAdmit(s)
		fits := true
		for i, n := range need {
			fits = fits && n <= e.available(i)-taken[i]
		}
		if len(e.running) > 0 && !fits || !e.acquireSlots(s) {
			e.detachPrefix(s)
			break
		}
		for i, n := range need {
			taken[i] += n
		}
		e.countAdmission(s)
		e.waiting = e.waiting[1:]
		e.running = append(e.running, s)
		if s.scheduled.IsZero() {
			s.scheduled = time.Now()
		}
	}
	e.nRunning.Store(int64(len(e.running)))
}

// safeStep turns a panic anywhere in a step into an error for the step's
// sequences, so the engine keeps serving the others.
func (e *Engine) safeStep() {
	defer func() {
		if r := recover(); r != nil {
			e.log.Error("engine: panic in step", "panic", r, "stack", string(debug.Stack()))
			err := fmt.Errorf("engine: internal error: %v", r)
			for _, s := range e.owners {
				e.finish(s, Event{Done: true, Err: err})
			}
			e.compact()
		}
	}()
	e.step()
}

// finish sends the final event, frees pages and slots and closes the
// stream.
func (e *Engine) finish(s *seq, ev Event) {
	if s.done {
		return
	}
	s.done = true
	s.closeConstraint()
	e.uncache(s, soundEnd(ev.Err))
	e.releaseKV(s)
	ev.PromptTokens, ev.CompletionTokens, ev.CachedTokens = s.prompt, len(s.tokens)-s.prompt, s.hit
	ev.Choice = s.choice
	if !s.started && max(s.req.N, 1) > 1 {
		// Failed before the fork: end every choice.
		for c := 0; c < s.req.N; c++ {
			ev.Choice = c
			s.grp.out <- ev
		}
	} else {
		s.grp.out <- ev
	}
	s.grp.open--
	if s.grp.open == 0 {
		close(s.grp.out)
	}
}

// compact drops finished sequences from the running set.
func (e *Engine) compact() {
	kept := e.running[:0]
	for _, s := range e.running {
		if !s.done {
			kept = append(kept, s)
		}
	}
	for i := len(kept); i < len(e.running); i++ {
		e.running[i] = nil
	}
	e.running = kept
	e.nRunning.Store(int64(len(kept)))
}

// evict preempts victim: its pages and state slots return to their pools
// and it waits at the head of the queue to be recomputed from its tokens
// (a state slot is not kept: the recomputation rebuilds the state). With
// the prefix cache its computed blocks are cached first (unlocked, so they
// are the first evicted if the pool stays short) and its lock dropped: it
// hits them when readmitted unless they were evicted meanwhile.
func (e *Engine) evict(victim *seq) {
	e.uncache(victim, true)
	e.releaseKV(victim)
	victim.cached, victim.prefilled = 0, false
	for i, s := range e.running {
		if s == victim {
			e.running = append(e.running[:i], e.running[i+1:]...)
			break
		}
	}
	e.mu.Lock()
	e.waiting = append([]*seq{victim}, e.waiting...)
	e.mu.Unlock()
	e.preemptions.Add(1)
	e.log.Debug("engine: preempted", "seq", victim.id, "tokens", len(victim.tokens))
}

var errCancelled = errors.New("engine: request cancelled")

func (e *Engine) step() {
	for _, s := range e.running {
		if s.ctx.Err() != nil {
			e.finish(s, Event{Done: true, Err: errCancelled})
		}
	}
	e.compact()
	e.batch, e.owners = e.batch[:0], e.owners[:0]
	budget, chunking := e.cfg.ChunkedPrefill, true
	if budget < 0 {
		budget, chunking = e.cfg.MaxPrefillTokens, false
		if budget == 0 {
			budget = DefaultMaxPrefillTokens
		}
	}
	prefills := 0
	// Decodes first: each running sequence with everything cached but its
	// last token contributes that token.
	for i := 0; i < len(e.running); i++ {
		s := e.running[i]
		if s.done || len(s.tokens)-s.cached != 1 {
			continue
		}
		if !e.reserve(s, len(s.tokens)) {
			continue
		}
		if err := e.unshareKV(s, len(s.tokens)-1); err != nil {
			if errors.Is(err, kv.ErrNoPages) && e.preemptOther(s) {
				i--
				continue
			}
			continue
		}
		e.add(s, 1)
		budget--
	}
	// Then prompt chunks in arrival order.
	for i := 0; i < len(e.running) && budget > 0; i++ {
		s := e.running[i]
		rest := len(s.tokens) - s.cached
		if s.done || rest <= 1 && s.cached > 0 || e.inBatch(s) || e.awaitPrefix(s, i) {
			continue
		}
		rest = len(s.tokens) - s.cached // joinPrefix may have grown the hit
		n := min(rest, budget)
		if !chunking {
			// Whole prompts only: one that does not fit the budget waits,
			// unless it is the step's first, which runs alone.
			if rest > budget && prefills > 0 {
				continue
			}
			n = rest
		}
		if !e.reserve(s, s.cached+n) {
			continue
		}
		e.add(s, n)
		budget -= n
		prefills++
	}
	if len(e.batch) == 0 {
		e.compact()
		return
	}
	if e.cache != nil {
		e.cache.Refresh() // the windows trimmed for this step: spare pages for Evictable and Stats
	}
	e.run()
	e.compact()
	if e.cache != nil {
		e.cache.Refresh() // and the prefixes inserted and unlocked by it
	}
}

func (e *Engine) inBatch(s *seq) bool {
	for _, o := range e.owners {
		if o == s {
			return true
		}
	}
	return false
}

// reserve grows s's page tables to cover n tokens in every token pool
// (after giving back what fell out of its windows), preempting newer
// sequences if a pool is full. It fails the request if even empty pools are
// too small.
func (e *Engine) reserve(s *seq, n int) bool {
	e.trimKV(s)
	for {
		err := e.growKV(s, n)
		if err == nil {
			return true
		}
		if !e.preemptOther(s) {
			if len(e.owners) == 0 && len(e.running) == 1 {
				e.finish(s, Event{Done: true, Err: fmt.Errorf("engine: %w", err)})
			}
			return false
		}
	}
}

// preemptOther evicts the newest running sequence that arrived after s and
// is not in this step's batch; older requests are never evicted for newer.
func (e *Engine) preemptOther(s *seq) bool {
	var victim *seq
	for _, r := range e.running {
		if r != s && !r.done && !e.inBatch(r) && (victim == nil || r.arrival > victim.arrival) {
			victim = r
		}
	}
	if victim == nil || victim.arrival < s.arrival {
		return false
	}
	e.evict(victim)
	return true
}

func (e *Engine) add(s *seq, n int) {
	s.fresh = false
	rows := 0
	if s.cached+n == len(s.tokens) {
		rows = 1
	}
	if s.req.PromptLogprobs && !s.started {
		// Position p's logits score prompt token p+1: rows from
		// PromptLogprobStart-1 to the chunk's end are wanted.
		first := max(0, s.req.PromptLogprobStart-1)
		rows = max(rows, min(n, s.cached+n-max(s.cached, first)))
	}
	ms := model.Seq{Tokens: s.tokens[s.cached : s.cached+n], Start: s.cached, Pages: s.kv.tables, Slots: s.kv.slots, LogitRows: rows}
	if s.req.Embed {
		ms.LogitRows, ms.Hidden = 0, s.hidden[s.cached*e.hidden:(s.cached+n)*e.hidden]
	}
	e.batch = append(e.batch, ms)
	e.owners = append(e.owners, s)
}
