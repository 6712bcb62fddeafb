package server

import (
	"time"

	"github.com/kvhost/kvhost/host/engine"
)

// PhaseObserver is the optional Observer capability of timing each engine
// request's phases, for vLLM's per-request histograms: called once per
// engine request (each prompt of a batch) when its last choice ends
// normally, with the time it queued in the engine, its prefill (from
// scheduling to its first token), its decode (first to last token), its
// prompt length, the tokens generated over all choices, and each choice's
// finish reason.
type PhaseObserver interface {
	RequestPhases(route string, queue, prefill, decode time.Duration, promptTokens, generationTokens int, finishReasons []string)
}

// phases follows one engine request's timeline on the server side.
type phases struct {
	submitted time.Time
	queue     time.Duration
	first     time.Time // the first token of any choice
	last      time.Time // the latest token of any choice
	tokens    int
	reasons   []string
}

// event records an engine event as it arrives.
func (p *phases) event(ev engine.Event, now time.Time) {
	if ev.Queue > 0 {
		p.queue = ev.Queue
	}
	if ev.Err == nil && !ev.Done {
		if p.first.IsZero() {
			p.first = now
		}
		p.last = now
		p.tokens++
	}
}

// report hands the finished request to obs, if it observes phases.
func (p *phases) report(obs Observer, route string, promptTokens int) {
	po, ok := obs.(PhaseObserver)
	if !ok || p.first.IsZero() {
		return
	}
	prefill := max(0, p.first.Sub(p.submitted)-p.queue)
	po.RequestPhases(route, p.queue, prefill, p.last.Sub(p.first), promptTokens, p.tokens, p.reasons)
}
