package chat

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/ardanlabs/jinja"
)

// ToolCall is one function call of an assistant message.
type ToolCall struct {
	ID   string
	Name string
	// Arguments is the call's arguments as JSON (an object, as templates
	// expect: transformers passes a dict).
	Arguments json.RawMessage
}

// ToolFormat is how a model writes tool calls, chosen by its template.
type ToolFormat int

const (
	// ToolsGeneric: the template does not render tools; kvhost describes
	// them in a system message and asks for Hermes-style calls.
	ToolsGeneric ToolFormat = iota
	// ToolsHermes: <tool_call>{"name": ..., "arguments": ...}</tool_call>
	// (Hermes, Qwen 2/2.5/3).
	ToolsHermes
	// ToolsLlama3: a bare {"name": ..., "parameters": ...} object (Llama
	// 3.1 and later, JSON tool calling).
	ToolsLlama3
	// ToolsMistral: [TOOL_CALLS] [{"name": ..., "arguments": ...}, ...]
	// (Mistral v0.3 and later).
	ToolsMistral
	// ToolsHarmony: OpenAI's harmony format (gpt-oss): the whole output is
	// channelled messages, calls are commentary messages to
	// functions.NAME (host/model/harmony reads them).
	ToolsHarmony
)

func (f ToolFormat) String() string {
	return [...]string{"generic", "hermes", "llama3-json", "mistral", "harmony"}[f]
}

// detectToolFormat reads the template source: the markers each family's
// template writes in its tool-call turns.
func detectToolFormat(src string) ToolFormat {
	switch {
	case strings.Contains(src, "<|channel|>") && strings.Contains(src, "<|message|>"):
		return ToolsHarmony // with or without tools: the output is harmony
	case !strings.Contains(src, "tools"):
		return ToolsGeneric
	case strings.Contains(src, "[TOOL_CALLS]"):
		return ToolsMistral
	case strings.Contains(src, "<tool_call>"):
		return ToolsHermes
	case strings.Contains(src, `"parameters"`) && (strings.Contains(src, "ipython") || strings.Contains(src, "<|python_tag|>")):
		return ToolsLlama3
	}
	return ToolsGeneric
}

// ToolFormat is the tool-call format of the model, from its template.
func (t *Template) ToolFormat() ToolFormat { return t.tools }

// genericToolPrompt introduces the tools to a model whose template has no
// place for them (base models, the fallback template), in the Hermes
// format that ToolsGeneric parses.
const genericToolPrompt = "You may call one or more functions to assist with the user query.\n\n" +
	"You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n%s</tools>\n\n" +
	"For each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n" +
	"<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call>"

// genericMessages rewrites a conversation for ToolsGeneric: the tools in
// the system message, assistant tool calls as <tool_call> blocks, tool
// results as user turns in <tool_response> blocks.
func genericMessages(msgs []Message, tools []json.RawMessage) []Message {
	out := make([]Message, 0, len(msgs)+1)
	if len(tools) > 0 {
		var sb strings.Builder
		for _, t := range tools {
			var c bytes.Buffer
			if json.Compact(&c, t) == nil {
				sb.Write(c.Bytes())
			} else {
				sb.Write(t)
			}
			sb.WriteByte('\n')
		}
		sys := fmt.Sprintf(genericToolPrompt, sb.String())
		if len(msgs) > 0 && msgs[0].Role == "system" {
			sys = msgs[0].Content + "\n\n" + sys
			msgs = msgs[1:]
		}
		out = append(out, Message{Role: "system", Content: sys})
	}
	for _, m := range msgs {
		switch {
		case m.Role == "assistant" && len(m.ToolCalls) > 0:
			var sb strings.Builder
			sb.WriteString(m.Content)
			for _, c := range m.ToolCalls {
				if sb.Len() > 0 {
					sb.WriteByte('\n')
				}
				name, _ := json.Marshal(c.Name)
				fmt.Fprintf(&sb, "<tool_call>\n{\"name\": %s, \"arguments\": %s}\n</tool_call>", name, compactJSON(c.Arguments))
			}
			out = append(out, Message{Role: "assistant", Content: sb.String()})
		case m.Role == "tool":
			out = append(out, Message{Role: "user", Content: "<tool_response>\n" + m.Content + "\n</tool_response>"})
		default:
			out = append(out, Message{Role: m.Role, Content: m.Content})
		}
	}
	return out
}

func compactJSON(b json.RawMessage) string {
	var c bytes.Buffer
	if len(b) == 0 || json.Compact(&c, b) != nil {
		return "{}"
	}
	return c.String()
}

// jsonValue converts JSON text to a template value, keeping object key
// order (tools render with tojson; their parameters read best in the
// order their author wrote).
func jsonValue(b []byte) (jinja.Value, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	v, err := decodeValue(dec)
	if err != nil {
		return jinja.Value{}, err
	}
	if dec.More() {
		return jinja.Value{}, fmt.Errorf("chat: trailing data after JSON value")
	}
	return v, nil
}

func decodeValue(dec *json.Decoder) (jinja.Value, error) {
	tok, err := dec.Token()
	if err != nil {
		return jinja.Value{}, err
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			d := jinja.NewDict()
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return jinja.Value{}, err
				}
				k, _ := kt.(string)
				v, err := decodeValue(dec)
				if err != nil {
					return jinja.Value{}, err
				}
				d.AsDict().Set(k, v)
			}
			_, err = dec.Token()
			return d, err
		case '[':
			var items []jinja.Value
			for dec.More() {
				v, err := decodeValue(dec)
				if err != nil {
					return jinja.Value{}, err
				}
				items = append(items, v)
			}
			_, err = dec.Token()
			return jinja.NewList(items), err
		}
	case string:
		return jinja.NewString(t), nil
	case json.Number:
		if i, err := t.Int64(); err == nil {
			return jinja.NewInt(i), nil
		}
		f, err := t.Float64()
		return jinja.NewFloat(f), err
	case bool:
		return jinja.NewBool(t), nil
	case nil:
		return jinja.None(), nil
	}
	return jinja.Value{}, fmt.Errorf("chat: unexpected JSON token %v", tok)
}

// messageValue is m as a template sees it: role and content, and, only
// when present, tool_calls (a list of {id, type, function: {name,
// arguments}}), tool_call_id and name — templates test `'tool_calls' in
// message` and `is defined`.
func messageValue(m Message) (jinja.Value, error) {
	d := jinja.NewDict()
	dict := d.AsDict()
	dict.Set("role", jinja.NewString(m.Role))
	dict.Set("content", jinja.NewString(m.Content))
	if len(m.ToolCalls) > 0 {
		calls := make([]jinja.Value, len(m.ToolCalls))
		for i, c := range m.ToolCalls {
			args := c.Arguments
			if len(bytes.TrimSpace(args)) == 0 {
				args = json.RawMessage("{}")
			}
			av, err := jsonValue(args)
			if err != nil {
				return jinja.Value{}, fmt.Errorf("chat: tool call %d arguments: %w", i, err)
			}
			fn := jinja.NewDict()
			fn.AsDict().Set("name", jinja.NewString(c.Name))
			fn.AsDict().Set("arguments", av)
			call := jinja.NewDict()
			call.AsDict().Set("id", jinja.NewString(c.ID))
			call.AsDict().Set("type", jinja.NewString("function"))
			call.AsDict().Set("function", fn)
			calls[i] = call
		}
		dict.Set("tool_calls", jinja.NewList(calls))
	}
	if m.Reasoning != "" {
		// gpt-oss's template reads "thinking", Qwen 3's and DeepSeek's
		// "reasoning_content".
		dict.Set("thinking", jinja.NewString(m.Reasoning))
		dict.Set("reasoning_content", jinja.NewString(m.Reasoning))
	}
	if m.ToolCallID != "" {
		dict.Set("tool_call_id", jinja.NewString(m.ToolCallID))
	}
	if m.Name != "" {
		dict.Set("name", jinja.NewString(m.Name))
	}
	return d, nil
}
