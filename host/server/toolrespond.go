package server

// sendTools streams what a choice's tool reader let through: content as
// content deltas, each completed call as OpenAI streams one (a delta that
// names it, then one with its arguments). Logprob records wait for the
// next chunk that goes out.
func (o *responder) sendTools(i int, content string, calls []parsedCall, recs []tokenRecord) error {
	o.pending[i] = append(o.pending[i], recs...)
	if content != "" {
		if err := o.send(o.chatChunk(i, &chatDelta{Content: &content}, o.chatLP(o.pending[i]), nil)); err != nil {
			return err
		}
		o.pending[i] = nil
	}
	for _, c := range calls {
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

// finishTools ends a streaming choice with tools: the last text, what the
// reader held back, and the final chunk, whose finish_reason is
// "tool_calls" when the choice called tools (not for a named function,
// which OpenAI reports as "stop").
func (o *responder) finishTools(i int, text string, recs []tokenRecord, reason string) error {
	content, calls := o.tools[i].push(text)
	if err := o.sendTools(i, content, calls, recs); err != nil {
		return err
	}
	content, calls = o.tools[i].end()
	if err := o.sendTools(i, content, calls, nil); err != nil {
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

func (o *responder) toolReason(reason string, calls int) string {
	if calls > 0 && reason == "stop" && o.p.tools.mode != "named" {
		return "tool_calls"
	}
	return reason
}

// chatMessage is choice i's non-streaming message and finish reason:
// with tools, its text read into content and calls.
func (o *responder) chatMessage(i int) (*chatMessageOut, string) {
	text := o.texts[i].String()
	if o.tools == nil {
		return &chatMessageOut{Role: "assistant", Content: &text}, o.fins[i]
	}
	t := o.tools[i]
	c1, calls := t.push(text)
	c2, more := t.end()
	calls = append(calls, more...)
	content := c1 + c2
	msg := &chatMessageOut{Role: "assistant"}
	if content != "" || len(calls) == 0 {
		msg.Content = &content
	}
	for _, c := range calls {
		msg.ToolCalls = append(msg.ToolCalls, toolCallOut{ID: c.ID, Type: "function", Function: toolFunction{Name: c.Name, Arguments: c.Args}})
	}
	return msg, o.toolReason(o.fins[i], len(calls))
}
