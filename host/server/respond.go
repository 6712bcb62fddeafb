package server

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/kvhost/kvhost/host/engine"
)

type endpoint int

const (
	completionsEndpoint endpoint = iota
	chatEndpoint
)

// statusClientClosed is logged when the client left before a non-streaming
// response was written (nginx's convention; never seen by the client).
const statusClientClosed = 499

// run is one submitted generation; cancel ends it in the engine.
type run struct {
	ctx    context.Context
	cancel context.CancelFunc
	events <-chan engine.Event
	state  *choiceState
}

type choiceEvent struct {
	idx    int
	ev     engine.Event
	closed bool // the engine closed the channel
}

// generate submits one engine request per prompt and answers with their
// outputs as choices, streamed or not. Every request context derives from the
// HTTP request's, so a client that disconnects cancels all of them; a choice
// that hits a stop string is cancelled on its own.
func (s *server) generate(w http.ResponseWriter, r *http.Request, ep endpoint, p genParams, prompts [][]int32) {
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
		runs = append(runs, &run{ctx: ctx, cancel: cancel, events: st.Events,
			state: newChoiceState(tok, p, len(req.Prompt))})
	}

	out := &responder{s: s, w: w, r: r, ep: ep, p: p, tok: tok, model: s.b.ModelName(),
		created: time.Now().Unix(), texts: make([]strings.Builder, len(runs)), recs: make([][]tokenRecord, len(runs))}
	if ep == chatEndpoint {
		out.id = newID("chatcmpl-")
	} else {
		out.id = newID("cmpl-")
	}
	if err := out.begin(len(runs)); err != nil {
		return
	}
	events := merge(runs)
	active := len(runs)
	for active > 0 {
		var ce choiceEvent
		select {
		case ce = <-events:
		case <-r.Context().Done():
			if !p.stream {
				w.WriteHeader(statusClientClosed)
			}
			return // the deferred cancels reach the engine
		}
		st := runs[ce.idx].state
		if st.finished {
			continue // late events of a choice cut short by a stop string
		}
		var delta string
		var err error
		if ce.closed {
			st.finished, err = true, errStreamEnded
		} else {
			delta, err = st.onEvent(ce.ev)
		}
		if err != nil {
			out.fail(err)
			return
		}
		if st.stoppedByString {
			runs[ce.idx].cancel()
		}
		recs := st.takeLogprobs()
		if st.finished {
			active--
			err = out.finish(ce.idx, delta, recs, st.finishReason)
		} else {
			err = out.delta(ce.idx, delta, recs)
		}
		if err != nil {
			return // the client is gone
		}
	}
	var u usage
	for _, rn := range runs {
		u.PromptTokens += rn.state.promptTokens
		u.CompletionTokens += rn.state.completionTokens
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

// responder writes one response: OpenAI SSE chunks while streaming, or one
// JSON body at the end.
type responder struct {
	s       *server
	w       http.ResponseWriter
	r       *http.Request
	ep      endpoint
	p       genParams
	tok     Tokenizer
	id      string
	model   string
	created int64

	texts []strings.Builder // non-streaming: the text of each choice
	recs  [][]tokenRecord   // non-streaming: the logprob records of each choice
	fins  []string          // non-streaming: finish reasons
}

func (o *responder) begin(n int) error {
	o.fins = make([]string, n)
	if !o.p.stream {
		return nil
	}
	h := o.w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("Connection", "keep-alive")
	h.Set("X-Accel-Buffering", "no") // no proxy buffering of the stream
	o.w.WriteHeader(http.StatusOK)
	if o.ep == chatEndpoint {
		empty := ""
		for i := 0; i < n; i++ {
			if err := o.send(o.chatChunk(i, &chatDelta{Role: "assistant", Content: &empty}, nil, nil)); err != nil {
				return err
			}
		}
	}
	return nil
}

func (o *responder) delta(i int, text string, recs []tokenRecord) error {
	if !o.p.stream {
		o.texts[i].WriteString(text)
		o.recs[i] = append(o.recs[i], recs...)
		return nil
	}
	if text == "" && len(recs) == 0 {
		return nil
	}
	if o.ep == chatEndpoint {
		return o.send(o.chatChunk(i, &chatDelta{Content: &text}, o.chatLP(recs), nil))
	}
	return o.send(o.completionChunk(i, text, o.completionLP(recs), nil))
}

func (o *responder) finish(i int, text string, recs []tokenRecord, reason string) error {
	if !o.p.stream {
		o.fins[i] = reason
		return o.delta(i, text, recs)
	}
	if text != "" {
		if err := o.delta(i, text, recs); err != nil {
			return err
		}
		recs = nil
	}
	if o.ep == chatEndpoint {
		var lp *chatLogprobs
		if len(recs) > 0 {
			lp = o.chatLP(recs)
		}
		return o.send(o.chatChunk(i, &chatDelta{}, lp, &reason))
	}
	var lp *completionLogprobs
	if len(recs) > 0 {
		lp = o.completionLP(recs)
	}
	return o.send(o.completionChunk(i, "", lp, &reason))
}

func (o *responder) end(u usage) {
	if o.p.stream {
		if o.p.includeUsage {
			var chunk any
			if o.ep == chatEndpoint {
				chunk = chatResponse{ID: o.id, Object: "chat.completion.chunk", Created: o.created,
					Model: o.model, Choices: []chatChoice{}, Usage: u}
			} else {
				chunk = completionResponse{ID: o.id, Object: "text_completion", Created: o.created,
					Model: o.model, Choices: []completionChoice{}, Usage: u}
			}
			if o.send(chunk) != nil {
				return
			}
		}
		o.sendDone()
		return
	}
	if o.ep == chatEndpoint {
		resp := chatResponse{ID: o.id, Object: "chat.completion", Created: o.created, Model: o.model, Usage: u}
		for i := range o.texts {
			resp.Choices = append(resp.Choices, chatChoice{
				Index:        i,
				Message:      &chatMessageOut{Role: "assistant", Content: o.texts[i].String()},
				Logprobs:     o.chatLP(o.recs[i]),
				FinishReason: &o.fins[i],
			})
		}
		writeJSON(o.w, http.StatusOK, resp)
		return
	}
	resp := completionResponse{ID: o.id, Object: "text_completion", Created: o.created, Model: o.model, Usage: u}
	for i := range o.texts {
		resp.Choices = append(resp.Choices, completionChoice{
			Index: i, Text: o.texts[i].String(),
			Logprobs: o.completionLP(o.recs[i]), FinishReason: &o.fins[i],
		})
	}
	writeJSON(o.w, http.StatusOK, resp)
}

// fail reports an error that ended generation. Before streaming began it is
// an ordinary error response; once SSE headers are out it becomes an error
// event followed by [DONE].
func (o *responder) fail(err error) {
	if !o.p.stream {
		o.s.writeError(o.w, o.r, err)
		return
	}
	_, body, internal := errorResponse(err)
	if internal {
		o.s.log.Error("generation failed", "method", o.r.Method, "path", o.r.URL.Path, "err", err)
	}
	if o.send(errorBody{Error: body}) == nil {
		o.sendDone()
	}
}

func (o *responder) chatLP(recs []tokenRecord) *chatLogprobs {
	if !o.p.logprobs {
		return nil
	}
	return chatLogprobsFor(o.tok, recs, o.p.topLogprobs)
}

func (o *responder) completionLP(recs []tokenRecord) *completionLogprobs {
	if !o.p.logprobs {
		return nil
	}
	return completionLogprobsFor(o.tok, recs, o.p.topLogprobs)
}

func (o *responder) chunkUsage() any {
	if o.p.includeUsage {
		return jsonNull
	}
	return nil
}

func (o *responder) chatChunk(i int, d *chatDelta, lp *chatLogprobs, reason *string) chatResponse {
	return chatResponse{ID: o.id, Object: "chat.completion.chunk", Created: o.created, Model: o.model,
		Choices: []chatChoice{{Index: i, Delta: d, Logprobs: lp, FinishReason: reason}},
		Usage:   o.chunkUsage()}
}

func (o *responder) completionChunk(i int, text string, lp *completionLogprobs, reason *string) completionResponse {
	return completionResponse{ID: o.id, Object: "text_completion", Created: o.created, Model: o.model,
		Choices: []completionChoice{{Index: i, Text: text, Logprobs: lp, FinishReason: reason}},
		Usage:   o.chunkUsage()}
}

// send writes one SSE event and flushes it to the client.
func (o *responder) send(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	buf := make([]byte, 0, len(b)+8)
	buf = append(buf, "data: "...)
	buf = append(buf, b...)
	buf = append(buf, "\n\n"...)
	if _, err := o.w.Write(buf); err != nil {
		return err
	}
	return http.NewResponseController(o.w).Flush()
}

func (o *responder) sendDone() {
	if _, err := o.w.Write([]byte("data: [DONE]\n\n")); err == nil {
		_ = http.NewResponseController(o.w).Flush()
	}
}
