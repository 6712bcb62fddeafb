package server

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"strings"

	"github.com/kvhost/kvhost/host/model/chat"
	"github.com/kvhost/kvhost/host/model/harmony"
)

// Markers of the tool-call formats.
const (
	hermesOpen   = "<tool_call>"
	hermesClose  = "</tool_call>"
	mistralCalls = "[TOOL_CALLS]"
)

// parsedCall is one function call read from a model's output.
type parsedCall struct {
	ID, Name, Args string
}

// readOut is what a choice's reader let through: content, reasoning
// (harmony's analysis channel), completed calls; done: the model's turn
// ended (harmony's <|end|> after a final message) and later text is
// ignored.
type readOut struct {
	content, reasoning string
	calls              []parsedCall
	done               bool
}

// toolStream reads one choice's text as it streams and separates content
// from tool calls, in the format of the model's template:
//
//   - Hermes/Qwen (and kvhost's generic format): calls in
//     <tool_call>…</tool_call> blocks; content before them streams, text
//     that could begin a block is held back.
//   - Llama 3 JSON: an output that starts with "{" is a call (or several
//     separated by ";"), read at the end; anything else is content.
//   - Mistral: content until [TOOL_CALLS] (a control token the responder
//     spells out), then a JSON list of calls, read at the end.
//   - harmony (gpt-oss): the whole output, its special tokens spelled
//     out, read by host/model/harmony: analysis → reasoning, final and
//     preambles → content, messages to functions.NAME → calls. With
//     separate_reasoning false the reasoning is content.
//
// A call is {"name": …, "arguments"|"parameters": {…}} naming a requested
// tool; a block that is not one is given back as content. When the call
// opener was forced into the prompt (tool_choice required or a function),
// the stream starts inside a call.
type toolStream struct {
	plan    *toolPlan
	inCall  bool
	decided bool // llama3: the first non-blank character was seen
	buf     strings.Builder
	calls   int
	harmony *harmony.Parser
	done    bool
}

func newToolStream(p *toolPlan) *toolStream {
	t := &toolStream{plan: p}
	if p.forced {
		t.inCall, t.decided = true, true
	}
	if p.format == chat.ToolsHarmony {
		t.harmony = harmony.NewParser()
		if p.forced {
			t.harmony.Push(p.prefix) // the call's header, in the prompt
		}
	}
	return t
}

// push consumes text and returns what may be sent now.
func (t *toolStream) push(text string) readOut {
	if t.harmony != nil {
		return t.harmonyOut(t.harmony.Push(text))
	}
	content, calls := t.pushText(text)
	return readOut{content: content, calls: calls}
}

// end flushes what is buffered when the choice finishes.
func (t *toolStream) end() readOut {
	if t.harmony != nil {
		return t.harmonyOut(t.harmony.End())
	}
	content, calls := t.endText()
	return readOut{content: content, calls: calls}
}

// harmonyOut turns a harmony delta into what the response carries: a
// call names one of the request's tools with a JSON object of arguments,
// or its arguments are given back as content, as a malformed Hermes
// block is.
func (t *toolStream) harmonyOut(d harmony.Delta) readOut {
	out := readOut{content: d.Content, reasoning: d.Reasoning, done: d.Done}
	t.done = t.done || d.Done
	for _, c := range d.Calls {
		args := strings.TrimSpace(c.Args)
		if args == "" {
			args = "{}"
		}
		if !t.plan.names[c.Name] || !json.Valid([]byte(args)) || args[0] != '{' {
			out.content += c.Args
			continue
		}
		t.calls++
		out.calls = append(out.calls, parsedCall{ID: t.plan.newID(), Name: c.Name, Args: args})
	}
	if t.plan.inlineReasoning {
		out.content, out.reasoning = out.reasoning+out.content, ""
	}
	return out
}

// pushText consumes text (the text formats) and returns the content that
// may be sent now and the calls completed by it.
func (t *toolStream) pushText(text string) (string, []parsedCall) {
	t.buf.WriteString(text)
	switch t.plan.format {
	case chat.ToolsLlama3:
		if !t.decided {
			s := strings.TrimLeft(t.buf.String(), " \t\r\n")
			if s == "" {
				return "", nil
			}
			t.decided, t.inCall = true, s[0] == '{'
		}
		if t.inCall {
			return "", nil
		}
		out := t.buf.String()
		t.buf.Reset()
		return out, nil
	case chat.ToolsMistral:
		if t.inCall {
			return "", nil
		}
		s := t.buf.String()
		if i := strings.Index(s, mistralCalls); i >= 0 {
			t.buf.Reset()
			t.buf.WriteString(s[i+len(mistralCalls):])
			t.inCall = true
			return s[:i], nil
		}
		return t.holdBack(mistralCalls), nil
	}
	var content strings.Builder
	var calls []parsedCall
	for {
		s := t.buf.String()
		if !t.inCall {
			i := strings.Index(s, hermesOpen)
			if i < 0 {
				content.WriteString(t.contentOut(t.holdBack(hermesOpen)))
				return content.String(), calls
			}
			content.WriteString(t.contentOut(s[:i]))
			t.buf.Reset()
			t.buf.WriteString(s[i+len(hermesOpen):])
			t.inCall = true
			continue
		}
		j := strings.Index(s, hermesClose)
		if j < 0 {
			return content.String(), calls
		}
		body := s[:j]
		t.buf.Reset()
		t.buf.WriteString(s[j+len(hermesClose):])
		t.inCall = false
		if c, ok := t.call(body, false); ok {
			calls = append(calls, c)
		} else {
			content.WriteString(hermesOpen + body + hermesClose)
		}
	}
}

// contentOut drops blank text once calls have started (the newlines
// between blocks).
func (t *toolStream) contentOut(s string) string {
	if t.calls > 0 && strings.TrimSpace(s) == "" {
		return ""
	}
	return s
}

// holdBack returns the buffered text except a suffix that could begin
// marker, which stays buffered.
func (t *toolStream) holdBack(marker string) string {
	s := t.buf.String()
	keep := 0
	for k := min(len(marker)-1, len(s)); k > 0; k-- {
		if strings.HasSuffix(s, marker[:k]) {
			keep = k
			break
		}
	}
	t.buf.Reset()
	t.buf.WriteString(s[len(s)-keep:])
	return s[:len(s)-keep]
}

// endText flushes what the text formats buffered.
func (t *toolStream) endText() (string, []parsedCall) {
	s := t.buf.String()
	t.buf.Reset()
	if !t.inCall {
		return t.contentOut(s), nil
	}
	switch t.plan.format {
	case chat.ToolsLlama3:
		rest := strings.TrimSpace(s)
		var calls []parsedCall
		for rest != "" {
			dec := json.NewDecoder(strings.NewReader(rest))
			var raw json.RawMessage
			if dec.Decode(&raw) != nil {
				return s, nil
			}
			c, ok := t.call(string(raw), true)
			if !ok {
				return s, nil
			}
			calls = append(calls, c)
			rest = strings.TrimLeft(rest[dec.InputOffset():], " \t\r\n;")
		}
		if len(calls) == 0 {
			return s, nil
		}
		return "", calls
	case chat.ToolsMistral:
		var list []json.RawMessage
		if json.Unmarshal([]byte(strings.TrimSpace(s)), &list) != nil || len(list) == 0 {
			return mistralCalls + s, nil
		}
		var calls []parsedCall
		for _, raw := range list {
			c, ok := t.call(string(raw), false)
			if !ok {
				return mistralCalls + s, nil
			}
			calls = append(calls, c)
		}
		return "", calls
	}
	if c, ok := t.call(s, false); ok {
		return "", []parsedCall{c}
	}
	return hermesOpen + s, nil
}

// call reads one call object; parameters is the Llama 3 spelling of
// arguments. Arguments given as a JSON string are taken as its text.
func (t *toolStream) call(text string, parameters bool) (parsedCall, bool) {
	var obj struct {
		Name       string          `json:"name"`
		Arguments  json.RawMessage `json:"arguments"`
		Parameters json.RawMessage `json:"parameters"`
	}
	if err := json.Unmarshal([]byte(strings.TrimSpace(text)), &obj); err != nil || obj.Name == "" {
		return parsedCall{}, false
	}
	if !t.plan.names[obj.Name] {
		return parsedCall{}, false
	}
	args := obj.Arguments
	if parameters && len(args) == 0 {
		args = obj.Parameters
	}
	var asString string
	switch {
	case len(bytes.TrimSpace(args)) == 0 || string(args) == "null":
		args = json.RawMessage("{}")
	case json.Unmarshal(args, &asString) == nil:
		args = json.RawMessage(asString)
	}
	t.calls++
	return parsedCall{ID: t.plan.newID(), Name: obj.Name, Args: string(args)}, true
}

const idAlphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"

// newID is a tool call id: "call_" and 24 characters, or 9 alphanumerics
// for Mistral, whose template refuses any other shape.
func (p *toolPlan) newID() string {
	n, prefix := 24, "call_"
	if p.format == chat.ToolsMistral {
		n, prefix = 9, ""
	}
	b := make([]byte, n)
	_, _ = rand.Read(b)
	for i := range b {
		b[i] = idAlphabet[int(b[i])%len(idAlphabet)]
	}
	return prefix + string(b)
}
