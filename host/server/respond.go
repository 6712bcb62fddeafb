package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/kvhost/kvhost/host/engine"
)

// statusClientClosed is logged when the client left before a non-streaming
// response was written (nginx's convention; never seen by the client).
const statusClientClosed = 499

// run is one submitted engine request (one prompt) and its choices; cancel
// ends it in the engine.
type run struct {
	ctx     context.Context
	cancel  context.CancelFunc
	events  <-chan engine.Event
	prompt  []int32
	base    int // the response index of the run's choice 0
	choices []*choiceState
	open    int // choices not finished yet
	// promptLP holds the prompt's logprobs once an event carried them (the
	// engine sends them on choice 0's first event, which precedes every
	// other choice's events: those fork from it).
	promptLP []engine.PromptLogprob
	ph       phases
}

type choiceEvent struct {
	idx    int
	ev     engine.Event
	closed bool // the engine closed the channel
}

// sink turns choice progress into a response: OpenAI JSON or SSE, or the
// native /generate shape. i is the choice's index in the response. Methods
// that write return the write error (the client is gone).
type sink interface {
	begin(choices int) error
	// prompt is called once per choice, before its first delta.
	prompt(i int, rn *run) error
	delta(i int, text string, recs []tokenRecord) error
	finish(i int, text string, recs []tokenRecord, st *choiceState) error
	end(u usage)
	// fail reports an error that ended generation.
	fail(err error)
}

// choiceEnder is the optional sink capability of ending a choice early:
// its reader saw the model's turn end (harmony's <|end|> after a final
// message) while the engine would go on.
type choiceEnder interface{ ended(i int) bool }

// fingerprinter is the optional sink capability of reporting which sampler
// version produced the tokens (OpenAI's system_fingerprint).
type fingerprinter interface{ fingerprint(v string) }

// generate submits one engine request per prompt, each with p.n choices,
// and feeds their events to out. Every request context derives from the
// HTTP request's, so a client that disconnects cancels all of them. A choice
// that hits a stop string is finished at once and its later events ignored;
// its engine request is cancelled when all of the request's choices are
// finished (they share one context).
func (s *server) generate(w http.ResponseWriter, r *http.Request, p genParams, prompts [][]int32, out sink) {
	reqs := make([]engine.Request, len(prompts))
	for i, pr := range prompts {
		req, err := s.engineRequest(pr, p)
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		reqs[i] = req
	}
	tok := s.b.Tokenizer()
	var runs []*run
	defer func() {
		for _, rn := range runs {
			rn.cancel()
		}
	}()
	total := 0
	for _, req := range reqs {
		ctx, cancel := context.WithCancel(r.Context())
		st, err := s.b.Submit(ctx, req)
		if err == nil && (st == nil || st.Events == nil) {
			err = errors.New("server: backend returned no event stream")
		}
		if err != nil {
			cancel()
			s.writeError(w, r, err)
			return
		}
		if po, ok := s.opts.Observer.(PromptObserver); ok {
			if ri := infoOf(r.Context()); ri != nil {
				po.TokensIn(ri.route, len(req.Prompt))
			}
		}
		rn := &run{ctx: ctx, cancel: cancel, events: st.Events, prompt: req.Prompt, base: total, open: p.n, ph: phases{submitted: time.Now()}}
		for range p.n {
			rn.choices = append(rn.choices, newChoiceState(tok, p))
		}
		runs = append(runs, rn)
		total += p.n
	}

	if err := out.begin(total); err != nil {
		return
	}
	obs, ri := s.opts.Observer, infoOf(r.Context())
	firstToken := true
	events := merge(runs)
	for active := total; active > 0; {
		var ce choiceEvent
		select {
		case ce = <-events:
		case <-r.Context().Done():
			s.observeError(r, ErrKindClientClosed)
			if !p.stream {
				w.WriteHeader(statusClientClosed)
			}
			return // the deferred cancels reach the engine
		}
		rn := runs[ce.idx]
		if ce.closed {
			if rn.open > 0 {
				out.fail(errStreamEnded)
				return
			}
			continue
		}
		ev := ce.ev
		rn.ph.event(ev, time.Now())
		if ev.Choice < 0 || ev.Choice >= len(rn.choices) {
			out.fail(fmt.Errorf("server: engine sent an event for choice %d of a %d-choice request", ev.Choice, len(rn.choices)))
			return
		}
		if len(ev.Prompt) > 0 && rn.promptLP == nil {
			rn.promptLP = ev.Prompt
		}
		if ev.SamplerVersion != "" {
			if f, ok := out.(fingerprinter); ok {
				f.fingerprint(ev.SamplerVersion)
			}
		}
		st := rn.choices[ev.Choice]
		if st.finished {
			continue // late events of a choice cut short by a stop string
		}
		i := rn.base + ev.Choice
		if !st.started {
			st.started = true
			if ev.Err == nil && out.prompt(i, rn) != nil {
				return
			}
		}
		if obs != nil && ri != nil && ev.Err == nil && !ev.Done {
			now := time.Now()
			if firstToken {
				obs.FirstToken(ri.route, now.Sub(ri.start))
				firstToken = false
			} else if !st.lastToken.IsZero() {
				obs.NextToken(ri.route, now.Sub(st.lastToken))
			}
			st.lastToken = now
		}
		delta, err := st.onEvent(ev)
		if err != nil {
			out.fail(err)
			return
		}
		recs := st.takeLogprobs()
		if !st.finished {
			if out.delta(i, delta, recs) != nil {
				return // the client is gone
			}
			if e, ok := out.(choiceEnder); !ok || !e.ended(i) {
				continue
			}
			// The reader saw the turn end: stop as at a stop string.
			st.finished, st.finishReason, st.stoppedByString = true, "stop", true
			delta, recs = "", nil
		}
		active--
		rn.ph.reasons = append(rn.ph.reasons, st.finishReason)
		if rn.open--; rn.open == 0 {
			rn.cancel() // a no-op unless a stop string cut the request short
			if ri != nil {
				rn.ph.report(obs, ri.route, len(rn.prompt))
			}
		}
		if out.finish(i, delta, recs, st) != nil {
			return // the client is gone
		}
	}
	var u usage
	for _, rn := range runs {
		u.PromptTokens += len(rn.prompt)
		cached := 0 // the choices share the prompt: count it once
		for _, st := range rn.choices {
			u.CompletionTokens += st.completionTokens
			cached = max(cached, st.cachedTokens)
		}
		u.PromptTokensDetails.CachedTokens += cached
	}
	u.TotalTokens = u.PromptTokens + u.CompletionTokens
	out.end(u)
}

// merge forwards every run's events, tagged with the run's index, to one
// channel. A forwarder stops when its run's context ends (then drains the
// engine channel, which the engine closes after cancellation).
func merge(runs []*run) <-chan choiceEvent {
	out := make(chan choiceEvent)
	for i, rn := range runs {
		go func() {
			for ev := range rn.events {
				select {
				case out <- choiceEvent{idx: i, ev: ev}:
				case <-rn.ctx.Done():
					for range rn.events {
					}
					return
				}
			}
			select {
			case out <- choiceEvent{idx: i, closed: true}:
			case <-rn.ctx.Done():
			}
		}()
	}
	return out
}

// promptRecords are the prompt's tokens as logprob records, with offsets
// into the prompt's text (the bytes of its tokens) and the logprobs the
// engine sent; tokens it sent none for (the first) are marked noLogprob.
// from skips the tokens before it. It also returns that text.
func promptRecords(tok Tokenizer, prompt []int32, lps []engine.PromptLogprob, from int) (string, []tokenRecord) {
	byIndex := make(map[int]engine.PromptLogprob, len(lps))
	for _, pl := range lps {
		byIndex[pl.Index] = pl
	}
	var d detokenizer
	var text []byte
	recs := make([]tokenRecord, 0, len(prompt)-min(from, len(prompt)))
	for k, id := range prompt {
		if k >= from {
			rec := tokenRecord{id: id, offset: len(text) + d.pendingLen(), noLogprob: true}
			if pl, ok := byIndex[k]; ok {
				rec.logprob, rec.top, rec.noLogprob = pl.Logprob, pl.Top, false
			}
			recs = append(recs, rec)
		}
		text = append(text, d.push(tok.TokenBytes(id))...)
	}
	text = append(text, d.flush()...)
	return string(text), recs
}
