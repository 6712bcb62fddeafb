package server

import "strings"

// sendTools streams what a choice's reader let through: reasoning as
// reasoning_content deltas (held until the reasoning ends with
// stream_reasoning false), content as content deltas, each completed call
// as OpenAI streams one (a delta that names it, then one with its
// arguments). Logprob records wait for the next chunk that goes out.
func (o *responder) sendTools(i int, out readOut, recs []tokenRecord) error {
	o.pending[i] = append(o.pending[i], recs...)
	if out.reasoning != "" {
		if o.p.tools.holdReasoning {
			o.held[i].WriteString(out.reasoning)
		} else if err := o.sendReasoning(i, out.reasoning); err != nil {
			return err
		}
	}
	if out.content != "" || len(out.calls) > 0 {
		if err := o.flushReasoning(i); err != nil {
			return err
		}
	}
	if out.content != "" {
		if err := o.send(o.chatChunk(i, &chatDelta{Content: &out.content}, o.chatLP(o.pending[i]), nil)); err != nil {
			return err
		}
		o.pending[i] = nil
	}
	for _, c := range out.calls {
		k := o.ncalls[i]
		o.ncalls[i]++
		head := chatDelta{ToolCalls: []toolCallDelta{{Index: k, ID: c.ID, Type: "function", Function: toolFunction{Name: c.Name}}}}
		if err := o.send(o.chatChunk(i, &head, o.chatLP(o.pending[i]), nil)); err != nil {
			return err
		}
		o.pending[i] = nil
		args := chatDelta{ToolCalls: []toolCallDelta{{Index: k, Function: toolFunction{Arguments: c.Args}}}}
		if err := o.send(o.chatChunk(i, &args, nil, nil)); err != nil {
			return err
		}
	}
	return nil
}

func (o *responder) sendReasoning(i int, r string) error {
	err := o.send(o.chatChunk(i, &chatDelta{ReasoningContent: &r}, o.chatLP(o.pending[i]), nil))
	o.pending[i] = nil
	return err
}

// flushReasoning sends the reasoning held back (stream_reasoning false).
func (o *responder) flushReasoning(i int) error {
	if o.held[i].Len() == 0 {
		return nil
	}
	r := o.held[i].String()
	o.held[i].Reset()
	return o.sendReasoning(i, r)
}

// finishTools ends a streaming choice with a reader: the last text, what
// the reader held back, and the final chunk, whose finish_reason is
// "tool_calls" when the choice called tools (not for a named function,
// which OpenAI reports as "stop").
func (o *responder) finishTools(i int, text string, recs []tokenRecord, reason string) error {
	if err := o.sendTools(i, o.tools[i].push(text), recs); err != nil {
		return err
	}
	if err := o.sendTools(i, o.tools[i].end(), nil); err != nil {
		return err
	}
	if err := o.flushReasoning(i); err != nil {
		return err
	}
	reason = o.toolReason(reason, o.ncalls[i])
	var lp *chatLogprobs
	if len(o.pending[i]) > 0 {
		lp = o.chatLP(o.pending[i])
		o.pending[i] = nil
	}
	return o.send(o.chatChunk(i, &chatDelta{}, lp, &reason))
}

// ended reports that choice i's reader saw the model's turn end (harmony's
// <|end|> after a final message): generate stops the choice there, as at a
// stop string.
func (o *responder) ended(i int) bool { return o.tools != nil && o.tools[i].done }

func (o *responder) toolReason(reason string, calls int) string {
	if calls > 0 && reason == "stop" && o.p.tools.mode != "named" {
		return "tool_calls"
	}
	return reason
}

// parsedChoice is what a non-streaming choice's reader read.
type parsedChoice struct {
	content, reasoning strings.Builder
	calls              []parsedCall
}

func (c *parsedChoice) add(out readOut) {
	c.content.WriteString(out.content)
	c.reasoning.WriteString(out.reasoning)
	c.calls = append(c.calls, out.calls...)
}

// chatMessage is choice i's non-streaming message and finish reason:
// with a reader, its content, reasoning and calls.
func (o *responder) chatMessage(i int) (*chatMessageOut, string) {
	if o.tools == nil {
		text := o.texts[i].String()
		return &chatMessageOut{Role: "assistant", Content: &text}, o.fins[i]
	}
	pc := &o.parsed[i]
	content := pc.content.String()
	msg := &chatMessageOut{Role: "assistant"}
	if content != "" || len(pc.calls) == 0 {
		msg.Content = &content
	}
	if r := pc.reasoning.String(); r != "" {
		msg.ReasoningContent = &r
	}
	for _, c := range pc.calls {
		msg.ToolCalls = append(msg.ToolCalls, toolCallOut{ID: c.ID, Type: "function", Function: toolFunction{Name: c.Name, Arguments: c.Args}})
	}
	return msg, o.toolReason(o.fins[i], len(pc.calls))
}
