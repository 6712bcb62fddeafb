package server

import (
	"encoding/json"
	"net/http"
	"strings"
	"time"
)

type endpoint int

const (
	completionsEndpoint endpoint = iota
	chatEndpoint
)

// responder is the OpenAI sink: SSE chunks while streaming, or one JSON body
// at the end.
type responder struct {
	fp      string // sampler version of the latest token (system_fingerprint)
	s       *server
	w       http.ResponseWriter
	r       *http.Request
	ep      endpoint
	p       genParams
	tok     Tokenizer
	id      string
	model   string
	created int64

	tools   []*toolStream     // chat with tools or harmony: each choice's reader
	pending [][]tokenRecord   // streaming chat with a reader: records held until text goes out
	ncalls  []int             // calls sent per choice
	held    []strings.Builder // stream_reasoning false: reasoning held until it ends
	parsed  []parsedChoice    // non-streaming chat with a reader: what it read
	texts   []strings.Builder // non-streaming: the text of each choice
	recs    [][]tokenRecord   // non-streaming: the logprob records of each choice
	fins    []string          // non-streaming: finish reasons
	offBase []int             // echo: the prompt text's length, added to generated offsets
}

func (s *server) newResponder(w http.ResponseWriter, r *http.Request, ep endpoint, p genParams) *responder {
	o := &responder{s: s, w: w, r: r, ep: ep, p: p, tok: s.b.Tokenizer(), model: s.b.ModelName(), created: time.Now().Unix()}
	if ep == chatEndpoint {
		o.id = newID("chatcmpl-")
	} else {
		o.id = newID("cmpl-")
	}
	return o
}

func (o *responder) begin(n int) error {
	o.fins = make([]string, n)
	o.texts = make([]strings.Builder, n)
	o.recs = make([][]tokenRecord, n)
	o.offBase = make([]int, n)
	if o.ep == chatEndpoint && o.p.tools != nil {
		o.tools, o.pending, o.ncalls = make([]*toolStream, n), make([][]tokenRecord, n), make([]int, n)
		o.held, o.parsed = make([]strings.Builder, n), make([]parsedChoice, n)
		for i := range o.tools {
			o.tools[i] = newToolStream(o.p.tools)
		}
	}
	if !o.p.stream {
		return nil
	}
	startSSE(o.w)
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

// prompt starts an echo choice with the prompt's text (the bytes of its
// tokens) and, with logprobs, the prompt tokens' logprobs (null for the
// first token, which nothing predicts).
func (o *responder) prompt(i int, rn *run) error {
	if !o.p.echo {
		return nil
	}
	text, recs := promptRecords(o.tok, rn.prompt, rn.promptLP, 0)
	if !o.p.logprobs {
		recs = nil
	}
	if err := o.delta(i, text, recs); err != nil {
		return err
	}
	o.offBase[i] = len(text)
	return nil
}

// shift moves generated tokens' offsets behind the echoed prompt.
func (o *responder) shift(i int, recs []tokenRecord) []tokenRecord {
	if o.offBase[i] == 0 || len(recs) == 0 {
		return recs
	}
	out := make([]tokenRecord, len(recs))
	for k, r := range recs {
		r.offset += o.offBase[i]
		out[k] = r
	}
	return out
}

func (o *responder) delta(i int, text string, recs []tokenRecord) error {
	recs = o.shift(i, recs)
	if o.tools != nil {
		out := o.tools[i].push(text)
		if o.p.stream {
			return o.sendTools(i, out, recs)
		}
		o.parsed[i].add(out)
		o.recs[i] = append(o.recs[i], recs...)
		return nil
	}
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

func (o *responder) finish(i int, text string, recs []tokenRecord, st *choiceState) error {
	reason := st.finishReason
	if !o.p.stream {
		o.fins[i] = reason
		err := o.delta(i, text, recs)
		if o.tools != nil {
			o.parsed[i].add(o.tools[i].end())
		}
		return err
	}
	if o.tools != nil {
		return o.finishTools(i, text, recs, reason)
	}
	if text != "" {
		if err := o.delta(i, text, recs); err != nil {
			return err
		}
		recs = nil
	}
	recs = o.shift(i, recs)
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
				chunk = chatResponse{ID: o.id, Object: "chat.completion.chunk", Created: o.created, SystemFingerprint: o.fp,
					Model: o.model, Choices: []chatChoice{}, Usage: u}
			} else {
				chunk = completionResponse{ID: o.id, Object: "text_completion", Created: o.created, SystemFingerprint: o.fp,
					Model: o.model, Choices: []completionChoice{}, Usage: u}
			}
			if o.send(chunk) != nil {
				return
			}
		}
		sendDone(o.w, o.s.opts.StreamWriteTimeout)
		return
	}
	extendWrite(o.w, o.s.opts.StreamWriteTimeout)
	if o.ep == chatEndpoint {
		resp := chatResponse{ID: o.id, Object: "chat.completion", Created: o.created, SystemFingerprint: o.fp, Model: o.model, Usage: u}
		for i := range o.texts {
			msg, reason := o.chatMessage(i)
			resp.Choices = append(resp.Choices, chatChoice{
				Index:        i,
				Message:      msg,
				Logprobs:     o.chatLP(o.recs[i]),
				FinishReason: &reason,
			})
		}
		writeJSON(o.w, http.StatusOK, resp)
		return
	}
	resp := completionResponse{ID: o.id, Object: "text_completion", Created: o.created, SystemFingerprint: o.fp, Model: o.model, Usage: u}
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
	o.s.streamError(o.w, o.r, err)
}

// streamError sends err as an SSE error event, then [DONE].
func (s *server) streamError(w http.ResponseWriter, r *http.Request, err error) {
	status, body, internal := errorResponse(err)
	if internal {
		s.logFor(r).Error("generation failed", "method", r.Method, "path", r.URL.Path, "err", err)
	}
	s.observeError(r, errorKind(status, body))
	noteReason(w, body.Message)
	if sendEvent(w, errorBody{Error: body}, s.opts.StreamWriteTimeout) == nil {
		sendDone(w, s.opts.StreamWriteTimeout)
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
	return chatResponse{ID: o.id, Object: "chat.completion.chunk", Created: o.created, SystemFingerprint: o.fp, Model: o.model,
		Choices: []chatChoice{{Index: i, Delta: d, Logprobs: lp, FinishReason: reason}},
		Usage:   o.chunkUsage()}
}

func (o *responder) completionChunk(i int, text string, lp *completionLogprobs, reason *string) completionResponse {
	return completionResponse{ID: o.id, Object: "text_completion", Created: o.created, SystemFingerprint: o.fp, Model: o.model,
		Choices: []completionChoice{{Index: i, Text: text, Logprobs: lp, FinishReason: reason}},
		Usage:   o.chunkUsage()}
}

func (o *responder) send(v any) error { return sendEvent(o.w, v, o.s.opts.StreamWriteTimeout) }

// startSSE writes the headers of an event stream.
func startSSE(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("Connection", "keep-alive")
	h.Set("X-Accel-Buffering", "no") // no proxy buffering of the stream
	w.WriteHeader(http.StatusOK)
}

// extendWrite gives the next write d to complete (see NewHTTPServer). A
// writer that cannot take deadlines (a test recorder) is left as it is.
func extendWrite(w http.ResponseWriter, d time.Duration) {
	_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(d))
}

// sendEvent writes one SSE event, within a fresh write deadline, and
// flushes it to the client.
func sendEvent(w http.ResponseWriter, v any, d time.Duration) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	buf := make([]byte, 0, len(b)+8)
	buf = append(buf, "data: "...)
	buf = append(buf, b...)
	buf = append(buf, "\n\n"...)
	extendWrite(w, d)
	if _, err := w.Write(buf); err != nil {
		return err
	}
	return http.NewResponseController(w).Flush()
}

func sendDone(w http.ResponseWriter, d time.Duration) {
	extendWrite(w, d)
	if _, err := w.Write([]byte("data: [DONE]\n\n")); err == nil {
		_ = http.NewResponseController(w).Flush()
	}
}

func (o *responder) fingerprint(v string) { o.fp = v }
