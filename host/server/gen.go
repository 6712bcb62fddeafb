package server

import (
	"errors"
	"time"

	"github.com/kvhost/kvhost/host/engine"
)

// errStreamEnded is an engine stream that closed without a final event.
var errStreamEnded = errors.New("server: engine stream closed without a final event")

// tokenRecord is one token kept for logprobs (or /generate's output_ids).
// offset is where its text starts in the choice's text (bytes). noLogprob
// marks a prompt token the engine gave no logprob (the first: nothing
// predicts it), reported as null.
type tokenRecord struct {
	id        int32
	logprob   float32
	top       []engine.TokenLogprob
	offset    int
	noLogprob bool
}

// choiceState follows one choice of one generation: it turns engine events
// into text deltas (valid UTF-8, stop strings applied) and token records.
type choiceState struct {
	tok       Tokenizer
	detok     detokenizer
	stop      stopMatcher
	keepToks  bool // record tokens (logprobs or output ids wanted)
	discard   bool // drop every generated token (max_tokens 0)
	started   bool // the first event arrived
	lastToken time.Time

	toks   []tokenRecord
	lpSent int // toks[:lpSent] were handed out by takeLogprobs

	// markers are control tokens that stand for text the choice's reader
	// needs (Mistral's [TOOL_CALLS], harmony's special tokens).
	markers map[int32]string

	completionTokens int
	cachedTokens     int   // prompt tokens the prefix cache served (final event)
	lastID           int32 // the last generated token
	finished         bool
	finishReason     string
	stoppedByString  bool
}

func newChoiceState(tok Tokenizer, p genParams) *choiceState {
	c := &choiceState{
		tok:      tok,
		stop:     newStopMatcher(p.stops),
		keepToks: (p.logprobs || p.keepTokens) && !p.discard,
		discard:  p.discard,
	}
	if p.tools != nil {
		c.markers = p.tools.markers
	}
	return c
}

// onEvent consumes one engine event and returns the text that may be sent
// now. After a stop string matched (stoppedByString) the choice is finished
// and ignores later events; an Err event is returned as the error.
func (c *choiceState) onEvent(ev engine.Event) (delta string, err error) {
	if c.finished {
		return "", nil
	}
	switch {
	case ev.Err != nil:
		c.finished = true
		return "", ev.Err
	case ev.Done:
		c.finished = true
		c.finishReason, c.cachedTokens = ev.FinishReason, ev.CachedTokens
		if c.finishReason == "" {
			c.finishReason = "stop"
		}
		if c.discard {
			c.finishReason = "length" // the client asked for 0 tokens and got them
		}
		delta, hit := c.stop.add(c.detok.flush())
		if hit {
			c.finishReason, c.stoppedByString = "stop", true
			return delta, nil
		}
		return delta + c.stop.flush(), nil
	}
	if c.discard {
		return "", nil
	}
	c.completionTokens++
	c.lastID = ev.Token
	var b []byte
	if !c.tok.EOG(ev.Token) {
		b = c.tok.TokenBytes(ev.Token)
	}
	if m, ok := c.markers[ev.Token]; ok {
		b = []byte(m)
	}
	if c.keepToks {
		c.toks = append(c.toks, tokenRecord{
			id: ev.Token, logprob: ev.Logprob, top: ev.TopLogprobs,
			offset: c.stop.length() + c.detok.pendingLen(),
		})
	}
	delta, hit := c.stop.add(c.detok.push(b))
	if hit {
		c.finished, c.finishReason, c.stoppedByString = true, "stop", true
	}
	return delta, nil
}

// takeLogprobs returns the records of tokens whose text starts inside what
// was emitted so far and that were not returned before. Once finished, a
// token that starts at or after the end of the final text (an EOG token,
// or one that lies wholly inside a trimmed stop string) is never returned.
func (c *choiceState) takeLogprobs() []tokenRecord {
	limit := c.stop.sent
	j := c.lpSent
	for j < len(c.toks) && c.toks[j].offset < limit {
		j++
	}
	out := c.toks[c.lpSent:j]
	c.lpSent = j
	return out
}
