package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"

	"github.com/kvhost/kvhost/host/constraint"
	"github.com/kvhost/kvhost/host/constraint/compile"
	"github.com/kvhost/kvhost/host/model/chat"
	"github.com/kvhost/kvhost/host/model/harmony"
	"github.com/kvhost/kvhost/sdk/constraint/grammar"
)

// toolFields are the tool-calling fields of a chat request.
type toolFields struct {
	Tools             []json.RawMessage `json:"tools"`
	ToolChoice        json.RawMessage   `json:"tool_choice"`
	ParallelToolCalls *bool             `json:"parallel_tool_calls"`
}

// chatToolCall is an assistant message's call, as OpenAI sends it back.
type chatToolCall struct {
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name string `json:"name"`
		// Arguments is a string holding JSON (OpenAI), or JSON itself.
		Arguments json.RawMessage `json:"arguments"`
	} `json:"function"`
}

type toolDef struct {
	Type     string `json:"type"`
	Function *struct {
		Name        string          `json:"name"`
		Description string          `json:"description"`
		Parameters  json.RawMessage `json:"parameters"`
		Strict      *bool           `json:"strict"`
	} `json:"function"`
}

var toolNameRE = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)

// maxTools bounds the tools of one request.
const maxTools = 128

// toolPlan is how one chat request uses tools.
type toolPlan struct {
	format chat.ToolFormat
	// mode is auto, required or named ("none" makes no plan).
	mode     string
	names    map[string]bool
	parallel bool
	// forced: the call opener was appended to the prompt (required,
	// named); prefix is that text.
	forced bool
	prefix string
	// markers are control tokens the reader needs as text (Mistral's
	// [TOOL_CALLS], harmony's special tokens), by id: choiceState spells
	// them out.
	markers map[int32]string
	// inlineReasoning (separate_reasoning false) reads reasoning as
	// content; holdReasoning (stream_reasoning false) streams it in one
	// chunk when it ends.
	inlineReasoning, holdReasoning bool
}

// planTools validates tools, tool_choice and parallel_tool_calls. It
// returns nil for a request without tools or with tool_choice "none"
// (then the tools are not rendered either), the tools to render and the
// tools a constraint may call.
func (s *server) planTools(f *toolFields) (*toolPlan, []json.RawMessage, []compile.Tool, error) {
	if len(f.Tools) > maxTools {
		return nil, nil, nil, badRequest("tools", "%d tools given, at most %d are allowed", len(f.Tools), maxTools)
	}
	var tools []compile.Tool
	names := map[string]bool{}
	for i, raw := range f.Tools {
		var d toolDef
		param := fmt.Sprintf("tools[%d]", i)
		if err := json.Unmarshal(raw, &d); err != nil {
			return nil, nil, nil, badRequest(param, "expected {\"type\": \"function\", \"function\": {...}}: %v", err)
		}
		if d.Type != "function" || d.Function == nil {
			return nil, nil, nil, badRequest(param+".type", "only function tools are supported (type %q)", d.Type)
		}
		if !toolNameRE.MatchString(d.Function.Name) {
			return nil, nil, nil, badRequest(param+".function.name", "%q must be 1-64 letters, digits, _ or -", d.Function.Name)
		}
		if names[d.Function.Name] {
			return nil, nil, nil, badRequest(param+".function.name", "%q is given twice", d.Function.Name)
		}
		if p := bytes.TrimSpace(d.Function.Parameters); len(p) > 0 && string(p) != "null" && p[0] != '{' {
			return nil, nil, nil, badRequest(param+".function.parameters", "expected a JSON Schema object")
		}
		names[d.Function.Name] = true
		tools = append(tools, compile.Tool{Name: d.Function.Name, Parameters: d.Function.Parameters})
	}
	mode, named := "auto", ""
	if len(f.Tools) == 0 {
		mode = "none"
	}
	if present(f.ToolChoice) {
		var choice string
		var fn struct {
			Type     string `json:"type"`
			Function *struct {
				Name string `json:"name"`
			} `json:"function"`
		}
		switch {
		case json.Unmarshal(f.ToolChoice, &choice) == nil:
			if choice != "none" && choice != "auto" && choice != "required" {
				return nil, nil, nil, badRequest("tool_choice", "%q is not one of none, auto, required (or {\"type\": \"function\", \"function\": {\"name\": ...}})", choice)
			}
			mode = choice
		case json.Unmarshal(f.ToolChoice, &fn) == nil && fn.Type == "function" && fn.Function != nil:
			mode, named = "named", fn.Function.Name
			if !names[named] {
				return nil, nil, nil, badRequest("tool_choice.function.name", "%q is not among the request's tools", named)
			}
		default:
			return nil, nil, nil, badRequest("tool_choice", "expected none, auto, required or {\"type\": \"function\", \"function\": {\"name\": ...}}")
		}
		if mode != "none" && len(f.Tools) == 0 {
			return nil, nil, nil, badRequest("tool_choice", "tool_choice %s needs tools", mode)
		}
	}
	if f.ParallelToolCalls != nil && len(f.Tools) == 0 {
		return nil, nil, nil, badRequest("parallel_tool_calls", "parallel_tool_calls needs tools")
	}
	format := s.b.Chat().ToolFormat()
	if mode == "none" {
		if format == chat.ToolsHarmony {
			// The output is read for its channels all the same; no tool
			// is offered, so no call is one.
			return &toolPlan{format: format, mode: mode, names: map[string]bool{}, markers: s.markers(harmony.Tokens)}, nil, nil, nil
		}
		return nil, nil, nil, nil
	}
	p := &toolPlan{format: format, mode: mode, names: names, parallel: f.ParallelToolCalls == nil || *f.ParallelToolCalls}
	if named != "" {
		for _, t := range tools {
			if t.Name == named {
				tools = []compile.Tool{t}
				break
			}
		}
		p.names = map[string]bool{named: true}
	}
	switch p.format {
	case chat.ToolsMistral:
		p.markers = s.markers([]string{mistralCalls})
	case chat.ToolsHarmony:
		p.markers = s.markers(harmony.Tokens)
	}
	return p, f.Tools, tools, nil
}

// markers are the ids of texts that are control tokens (one id, no
// bytes of their own) and do not end generation: the tokens a reader
// needs spelled out.
func (s *server) markers(texts []string) map[int32]string {
	tok := s.b.Tokenizer()
	out := map[int32]string{}
	for _, text := range texts {
		if ids, err := tok.Encode(text, false); err == nil && len(ids) == 1 && len(tok.TokenBytes(ids[0])) == 0 && !tok.EOG(ids[0]) {
			out[ids[0]] = text
		}
	}
	return out
}

// callShape is how p's format writes calls, for the constraint: the text
// forced into the prompt, and the grammar of what follows it.
func (p *toolPlan) callShape(tools []compile.Tool, forced bool) (string, compile.ToolCalls) {
	max := 1
	if p.parallel && p.mode != "named" {
		max = -1
	}
	tc := compile.ToolCalls{Tools: tools, ArgsKey: "arguments", Min: 1, Max: max}
	switch p.format {
	case chat.ToolsLlama3:
		tc.ArgsKey, tc.Max = "parameters", 1 // one call per turn: the template refuses more
		return "", tc
	case chat.ToolsMistral:
		tc.ListOpen, tc.Sep, tc.ListClose = " [", ", ", "]"
		return mistralCalls, tc
	}
	tc.Close, tc.Sep = "\n"+hermesClose, "\n"+hermesOpen+"\n"
	if !forced {
		tc.ListOpen = hermesOpen + "\n"
	}
	return hermesOpen + "\n", tc
}

// toolConstraint is the constraint of a chat request with tools: for
// required and named, the calls (their opener forced into the prompt);
// for auto, nothing, or, with a structured-output field, either a reply
// in that shape or calls.
func (p *toolPlan) toolConstraint(tools []compile.Tool, reply *structuredSpec) (*constraint.Spec, error) {
	switch {
	case p.format == chat.ToolsHarmony && (p.mode == "required" || p.mode == "named"):
		return p.harmonyConstraint(tools, reply)
	case p.format == chat.ToolsHarmony && reply != nil:
		return nil, badRequest(reply.param, "%s cannot be combined with tools for this model: it writes harmony (gpt-oss), whose calls kvhost does not constrain yet", reply.param)
	case p.mode == "required" || p.mode == "named":
		if reply != nil {
			return nil, badRequest(reply.param, "%s cannot be combined with tool_choice %s: the reply must be a tool call", reply.param, p.mode)
		}
		prefix, tc := p.callShape(tools, true)
		g, err := compile.ToolCallGrammar(tc)
		if err != nil {
			return nil, compileError("tools", err)
		}
		p.forced, p.prefix = true, prefix
		return constraint.NewSpec("tool_calls", nil, g)
	case reply == nil:
		return nil, nil
	}
	if p.format == chat.ToolsMistral {
		return nil, badRequest(reply.param, "with tool_choice auto, %s cannot be enforced for this model: its tool calls begin with a control token", reply.param)
	}
	_, tc := p.callShape(tools, false)
	calls, err := compile.ToolCallGrammar(tc)
	if err != nil {
		return nil, compileError("tools", err)
	}
	g, err := grammar.Union(reply.grammar, calls)
	if err != nil {
		return nil, compileError(reply.param, err)
	}
	return constraint.NewSpec(reply.typ+"+tool_calls", reply.source, g)
}

// harmonyConstraint forces a harmony call to one function: the call's
// header ("<|channel|>commentary to=functions.NAME <|constrain|>json
// <|message|>", as gpt-oss writes it) goes into the prompt and the
// function's parameter schema constrains the arguments. The header holds
// control tokens a text grammar cannot produce, so the function must be
// known before generation: a named one, or required with one tool.
func (p *toolPlan) harmonyConstraint(tools []compile.Tool, reply *structuredSpec) (*constraint.Spec, error) {
	if reply != nil {
		return nil, badRequest(reply.param, "%s cannot be combined with tool_choice %s: the reply must be a tool call", reply.param, p.mode)
	}
	if len(tools) != 1 {
		return nil, badRequest("tool_choice", "tool_choice required with %d tools cannot be enforced for this model: it writes harmony (gpt-oss), whose call header (control tokens) must name the function before generation; name one function or use auto", len(tools))
	}
	params := tools[0].Parameters
	if len(bytes.TrimSpace(params)) == 0 || string(bytes.TrimSpace(params)) == "null" {
		params = json.RawMessage(`{"type":"object"}`)
	}
	g, err := compile.JSONSchema(params)
	if err != nil {
		return nil, compileError("tools", err)
	}
	p.forced = true
	p.prefix = harmony.Channel + "commentary to=functions." + tools[0].Name + " " + harmony.Constrain + "json" + harmony.Message
	return constraint.NewSpec("tool_calls", nil, g)
}

// chatToolMessage converts a request message's tool fields for the
// template.
func chatToolMessage(i int, m *chatMessage) (chat.Message, error) {
	out := chat.Message{Role: m.Role, Content: m.Content.Text, ToolCallID: m.ToolCallID, Name: m.Name, Reasoning: m.ReasoningContent}
	for j, c := range m.ToolCalls {
		param := fmt.Sprintf("messages[%d].tool_calls[%d]", i, j)
		if c.Function.Name == "" {
			return out, badRequest(param+".function.name", "the called function's name is required")
		}
		args := bytes.TrimSpace(c.Function.Arguments)
		var s string
		if len(args) > 0 && args[0] == '"' {
			if err := json.Unmarshal(args, &s); err != nil {
				return out, badRequest(param+".function.arguments", "%v", err)
			}
			args = bytes.TrimSpace([]byte(s))
		}
		if len(args) == 0 {
			args = []byte("{}")
		}
		if !json.Valid(args) {
			return out, badRequest(param+".function.arguments", "the arguments are not JSON")
		}
		out.ToolCalls = append(out.ToolCalls, chat.ToolCall{ID: c.ID, Name: c.Function.Name, Arguments: json.RawMessage(args)})
	}
	if m.Role == "tool" && m.ToolCallID == "" {
		return out, badRequest(fmt.Sprintf("messages[%d].tool_call_id", i), "a tool message must name the call it answers")
	}
	return out, nil
}
