package server

import (
	"net/http"
	"strings"
)

// native is the /generate sink, SGLang's response shape:
//
//	{"text", "output_ids", "meta_info": {"id", "prompt_tokens",
//	 "completion_tokens", "finish_reason", and with return_logprob
//	 "input_token_logprobs", "output_token_logprobs", "input_top_logprobs",
//	 "output_top_logprobs"}}
//
// A logprob entry is [logprob, token_id] or, with return_text_in_logprobs,
// [logprob, token_id, text]; the first prompt token's logprob is null. A top
// list holds top_logprobs_num such entries per position (null for the first
// prompt token). finish_reason is null until the choice ends, then
// {"type":"length","length":N} or {"type":"stop","matched":STRING|TOKEN_ID}.
// With n > 1 the objects carry "index" and a non-streaming answer is an
// array. Streaming sends the whole object so far (cumulative, as SGLang does)
// after each change, then data: [DONE].
type native struct {
	s        *server
	w        http.ResponseWriter
	r        *http.Request
	p        genParams
	tok      Tokenizer
	id       string
	withText bool

	outs []*nativeChoice
}

type nativeChoice struct {
	text         strings.Builder
	recs         []tokenRecord
	inRecs       []tokenRecord
	promptTokens int
	cached       int // prompt tokens the prefix cache served (SGLang's meta_info.cached_tokens)
	completion   int
	finish       map[string]any
}

func (s *server) newNative(w http.ResponseWriter, r *http.Request, p genParams, req *generateRequest) *native {
	return &native{s: s, w: w, r: r, p: p, tok: s.b.Tokenizer(), id: newID(""), withText: req.ReturnTextInLogprobs}
}

func (o *native) begin(n int) error {
	o.outs = make([]*nativeChoice, n)
	for i := range o.outs {
		o.outs[i] = &nativeChoice{}
	}
	if o.p.stream {
		startSSE(o.w)
	}
	return nil
}

func (o *native) prompt(i int, rn *run) error {
	c := o.outs[i]
	c.promptTokens = len(rn.prompt)
	if o.p.promptLogprobs {
		_, c.inRecs = promptRecords(o.tok, rn.prompt, rn.promptLP, o.p.promptLogprobStart)
	}
	return nil
}

func (o *native) delta(i int, text string, recs []tokenRecord) error {
	c := o.outs[i]
	c.text.WriteString(text)
	c.recs = append(c.recs, recs...)
	c.completion += len(recs)
	if !o.p.stream || (text == "" && len(recs) == 0) {
		return nil
	}
	return sendEvent(o.w, o.object(i), o.s.opts.StreamWriteTimeout)
}

func (o *native) finish(i int, text string, recs []tokenRecord, st *choiceState) error {
	c := o.outs[i]
	c.text.WriteString(text)
	c.recs = append(c.recs, recs...)
	c.completion, c.cached = st.completionTokens, st.cachedTokens
	switch {
	case st.finishReason == "length":
		c.finish = map[string]any{"type": "length", "length": st.completionTokens}
	case st.stoppedByString:
		c.finish = map[string]any{"type": "stop", "matched": st.stop.matched}
	case st.completionTokens > 0:
		c.finish = map[string]any{"type": "stop", "matched": st.lastID}
	default:
		c.finish = map[string]any{"type": "stop"}
	}
	if !o.p.stream {
		return nil
	}
	return sendEvent(o.w, o.object(i), o.s.opts.StreamWriteTimeout)
}

func (o *native) end(usage) {
	if o.p.stream {
		sendDone(o.w, o.s.opts.StreamWriteTimeout)
		return
	}
	extendWrite(o.w, o.s.opts.StreamWriteTimeout)
	if len(o.outs) == 1 {
		writeJSON(o.w, http.StatusOK, o.object(0))
		return
	}
	all := make([]map[string]any, len(o.outs))
	for i := range o.outs {
		all[i] = o.object(i)
	}
	writeJSON(o.w, http.StatusOK, all)
}

func (o *native) fail(err error) {
	if !o.p.stream {
		o.s.writeError(o.w, o.r, err)
		return
	}
	o.s.streamError(o.w, o.r, err)
}

// object is choice i's response object as it stands.
func (o *native) object(i int) map[string]any {
	c := o.outs[i]
	ids := make([]int32, len(c.recs))
	for k, r := range c.recs {
		ids[k] = r.id
	}
	meta := map[string]any{
		"id":                o.id,
		"prompt_tokens":     c.promptTokens,
		"completion_tokens": c.completion,
		"cached_tokens":     c.cached,
		"finish_reason":     c.finish,
	}
	if o.p.logprobs {
		meta["output_token_logprobs"] = o.entries(c.recs)
		meta["input_token_logprobs"] = o.entries(c.inRecs)
		if o.p.topLogprobs > 0 {
			meta["output_top_logprobs"] = o.tops(c.recs)
			meta["input_top_logprobs"] = o.tops(c.inRecs)
		}
	}
	obj := map[string]any{"text": c.text.String(), "output_ids": ids, "meta_info": meta}
	if len(o.outs) > 1 {
		obj["index"] = i
	}
	return obj
}

// entry is [logprob, id] or [logprob, id, text]; logprob nil is null.
func (o *native) entry(lp *float64, id int32) []any {
	if o.withText {
		return []any{lp, id, o.tok.TokenText(id)}
	}
	return []any{lp, id}
}

func (o *native) entries(recs []tokenRecord) [][]any {
	out := make([][]any, len(recs))
	for k, r := range recs {
		var lp *float64
		if !r.noLogprob {
			v := finiteLogprob(r.logprob)
			lp = &v
		}
		out[k] = o.entry(lp, r.id)
	}
	return out
}

func (o *native) tops(recs []tokenRecord) [][][]any {
	out := make([][][]any, len(recs))
	for k, r := range recs {
		if r.noLogprob {
			continue // null
		}
		top := r.top[:min(o.p.topLogprobs, len(r.top))]
		list := make([][]any, len(top))
		for j, t := range top {
			v := finiteLogprob(t.Logprob)
			list[j] = o.entry(&v, t.Token)
		}
		out[k] = list
	}
	return out
}
