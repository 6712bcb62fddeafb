package chat

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/ardanlabs/jinja"
)

// Message is one turn of a conversation. Role is passed to the template as is
// ("system", "user", "assistant", "tool", ...); templates decide which roles
// they accept.
type Message struct {
	Role    string
	Content string
	// ToolCalls are an assistant message's function calls.
	ToolCalls []ToolCall
	// ToolCallID and Name identify the call a "tool" message answers.
	ToolCallID string
	Name       string
	// Reasoning is an assistant message's reasoning (OpenAI-compatible
	// servers' reasoning_content), bound to the message's thinking and
	// reasoning_content when set; templates that do not read them drop it.
	Reasoning string
}

// FallbackTemplate is the template used for models that ship none; see the
// package documentation for why it has this shape.
const FallbackTemplate = `{%- for message in messages -%}
{{- message.role }}: {{ message.content }}
{% endfor -%}
{%- if add_generation_prompt -%}
assistant:
{%- endif -%}`

// ErrNoMessages is returned by Render for an empty conversation: every real
// template indexes messages[0].
var ErrNoMessages = errors.New("chat: no messages to render")

// CompileError is a template that does not parse.
type CompileError struct {
	Err error
}

func (e *CompileError) Error() string {
	return fmt.Sprintf("chat: compile template: %v", e.Err)
}

func (e *CompileError) Unwrap() error { return e.Err }

// RenderError is a failure while rendering: most often the template called
// raise_exception because the messages break its rules (roles out of order,
// an unsupported role). Panicked reports a panic inside the template engine
// that Render recovered.
type RenderError struct {
	Err      error
	Panicked bool
}

func (e *RenderError) Error() string {
	if e.Panicked {
		return fmt.Sprintf("chat: render template: template engine panicked: %v", e.Err)
	}
	return fmt.Sprintf("chat: render template: %v", e.Err)
}

func (e *RenderError) Unwrap() error { return e.Err }

// Template is a compiled chat template plus the special-token texts it is
// rendered with. It is immutable and safe for concurrent use.
type Template struct {
	tmpl     *jinja.Template
	bos, eos string
	fallback bool
	tools    ToolFormat
	effort   bool // the template reads reasoning_effort
}

// New compiles template. An empty (or all-whitespace) template selects
// FallbackTemplate. bos and eos are the texts of the model's BOS and EOS
// tokens, bound to bos_token and eos_token.
func New(template string, bos, eos string) (*Template, error) {
	fallback := strings.TrimSpace(template) == ""
	if fallback {
		template = FallbackTemplate
	}
	t, err := jinja.Compile(template)
	if err != nil {
		return nil, &CompileError{Err: err}
	}
	return &Template{tmpl: t, bos: bos, eos: eos, fallback: fallback, tools: detectToolFormat(template),
		effort: strings.Contains(template, "reasoning_effort")}, nil
}

// BOS is the BOS token text the template renders with ("" when the model has
// none). Callers use it to decide whether the rendered prompt already carries
// the BOS token.
func (t *Template) BOS() string { return t.bos }

// EOS is the EOS token text the template renders with.
func (t *Template) EOS() string { return t.eos }

// ReasoningEfforts are the reasoning_effort values a template that reads
// it is given (gpt-oss's three levels; its template defaults to medium).
var ReasoningEfforts = []string{"low", "medium", "high"}

// TakesReasoningEffort reports whether the template reads
// reasoning_effort (Options.ReasoningEffort).
func (t *Template) TakesReasoningEffort() bool { return t.effort }

// IsFallback reports whether t is FallbackTemplate (the model had none).
func (t *Template) IsFallback() bool { return t.fallback }

// Options are Render's knobs beyond the messages.
type Options struct {
	// AddGenerationPrompt asks the template to end with the header of an
	// assistant turn, which is what a server wants before generating.
	AddGenerationPrompt bool
	// Tools are the OpenAI tool objects ({"type":"function","function":
	// {...}}) bound to the template's tools variable, as transformers'
	// apply_chat_template does. A template that has no place for tools
	// (ToolsGeneric) gets them in a system message instead.
	Tools []json.RawMessage
	// ReasoningEffort, when set, is bound to reasoning_effort (one of
	// ReasoningEfforts; RenderWith refuses it for a template that does not
	// read it, and any other value).
	ReasoningEffort string
}

// Render renders msgs. addGenerationPrompt asks the template to end with the
// header of an assistant turn, which is what a server wants before generating.
func (t *Template) Render(msgs []Message, addGenerationPrompt bool) (string, error) {
	return t.RenderWith(msgs, Options{AddGenerationPrompt: addGenerationPrompt})
}

// RenderWith renders msgs with opts.
func (t *Template) RenderWith(msgs []Message, opts Options) (out string, err error) {
	if len(msgs) == 0 {
		return "", ErrNoMessages
	}
	if opts.ReasoningEffort != "" {
		if !t.effort {
			return "", &RenderError{Err: errors.New("the model's chat template does not read reasoning_effort")}
		}
		if !slices.Contains(ReasoningEfforts, opts.ReasoningEffort) {
			return "", &RenderError{Err: fmt.Errorf("reasoning_effort %q is not one of %s", opts.ReasoningEffort, strings.Join(ReasoningEfforts, ", "))}
		}
	}
	if t.tools == ToolsGeneric && len(opts.Tools) > 0 {
		msgs = genericMessages(msgs, opts.Tools)
		opts.Tools = nil
	}
	list := make([]jinja.Value, len(msgs))
	for i, m := range msgs {
		v, err := messageValue(m)
		if err != nil {
			return "", &RenderError{Err: fmt.Errorf("message %d: %w", i, err)}
		}
		list[i] = v
	}
	data := map[string]jinja.Value{
		"messages":              jinja.NewList(list),
		"bos_token":             jinja.NewString(t.bos),
		"eos_token":             jinja.NewString(t.eos),
		"add_generation_prompt": jinja.NewBool(opts.AddGenerationPrompt),
	}
	if opts.ReasoningEffort != "" {
		data["reasoning_effort"] = jinja.NewString(opts.ReasoningEffort)
	}
	if len(opts.Tools) > 0 {
		tools := make([]jinja.Value, len(opts.Tools))
		for i, raw := range opts.Tools {
			v, err := jsonValue(raw)
			if err != nil {
				return "", &RenderError{Err: fmt.Errorf("tool %d: %w", i, err)}
			}
			tools[i] = v
		}
		data["tools"] = jinja.NewList(tools)
	}
	defer func() {
		if r := recover(); r != nil {
			out, err = "", &RenderError{Err: fmt.Errorf("%v", r), Panicked: true}
		}
	}()
	out, err = t.tmpl.RenderValues(data)
	if err != nil {
		return "", &RenderError{Err: err}
	}
	return out, nil
}
