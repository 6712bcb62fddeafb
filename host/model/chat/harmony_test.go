package chat

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

// gptOSSTemplate is gpt-oss's own chat template, the one copy kept in
// host/model/synth (which writes it into generated gpt-oss models; its
// source is noted there and in testdata/SOURCES.md).
const gptOSSTemplate = "../../synth/gpt-oss.jinja"

const harmonyTool = `{"type": "function", "function": {"name": "get_weather", "description": "Get the weather", "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "City name"}, "unit": {"type": "string", "enum": ["c", "f"], "default": "c"}}, "required": ["city"]}}}`

// harmonySystem is the system message gpt-oss's template writes: identity,
// cutoff, today's date, reasoning effort, channels, and with tools the
// line that sends calls to the commentary channel.
func harmonySystem(date, effort string, tools bool) string {
	s := "<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.\n" +
		"Knowledge cutoff: 2024-06\nCurrent date: " + date + "\n\nReasoning: " + effort + "\n\n" +
		"# Valid channels: analysis, commentary, final. Channel must be included for every message."
	if tools {
		s += "\nCalls to these tools must go to the commentary channel: 'functions'."
	}
	return s + "<|end|>"
}

// harmonyFunctions is the developer message's tools section for
// harmonyTool: a TypeScript-like namespace.
const harmonyFunctions = "# Tools\n\n## functions\n\nnamespace functions {\n\n" +
	"// Get the weather\ntype get_weather = (_: {\n// City name\ncity: string,\n" +
	"unit?: \"c\" | \"f\", // default: c,\n}) => any;\n\n} // namespace functions"

// TestRenderHarmony renders gpt-oss's real template for representative
// conversations; the expected texts are written by hand from the
// template's logic (harmony: system, developer, messages with channels).
func TestRenderHarmony(t *testing.T) {
	tmpl := loadTemplate(t, gptOSSTemplate, "<|startoftext|>", "<|return|>")
	if tmpl.ToolFormat() != ToolsHarmony || !tmpl.TakesReasoningEffort() {
		t.Fatalf("gpt-oss template: format %v, reasoning_effort %v; want harmony, true", tmpl.ToolFormat(), tmpl.TakesReasoningEffort())
	}
	tools := []json.RawMessage{json.RawMessage(harmonyTool)}
	call := []ToolCall{{ID: "call_1", Name: "get_weather", Arguments: json.RawMessage(`{"city":"Paris"}`)}}
	tests := []struct {
		name string
		msgs []Message
		opts Options
		want func(date string) string
	}{{
		name: "system, tools, an answered call and a finished turn: earlier reasoning dropped",
		msgs: []Message{
			{Role: "system", Content: "Be brief."},
			{Role: "user", Content: "Weather in Paris?"},
			{Role: "assistant", Reasoning: "Need get_weather.", ToolCalls: call},
			{Role: "tool", Content: "21 C", ToolCallID: "call_1"},
			{Role: "assistant", Reasoning: "Report it.", Content: "21 C in Paris."},
			{Role: "user", Content: "Thanks!"},
		},
		opts: Options{AddGenerationPrompt: true, Tools: tools, ReasoningEffort: "high"},
		want: func(date string) string {
			return harmonySystem(date, "high", true) +
				"<|start|>developer<|message|># Instructions\n\nBe brief.\n\n" + harmonyFunctions + "<|end|>" +
				"<|start|>user<|message|>Weather in Paris?<|end|>" +
				"<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>{\"city\": \"Paris\"}<|call|>" +
				"<|start|>functions.get_weather to=assistant<|channel|>commentary<|message|>\"21 C\"<|end|>" +
				"<|start|>assistant<|channel|>final<|message|>21 C in Paris.<|end|>" +
				"<|start|>user<|message|>Thanks!<|end|>" +
				"<|start|>assistant"
		},
	}, {
		name: "developer message, a pending call: its reasoning kept, default effort",
		msgs: []Message{
			{Role: "developer", Content: "Use tools."},
			{Role: "user", Content: "Weather in Paris?"},
			{Role: "assistant", Reasoning: "Need get_weather.", ToolCalls: call},
			{Role: "tool", Content: "21 C", ToolCallID: "call_1"},
		},
		opts: Options{AddGenerationPrompt: true, Tools: tools},
		want: func(date string) string {
			return harmonySystem(date, "medium", true) +
				"<|start|>developer<|message|># Instructions\n\nUse tools.\n\n" + harmonyFunctions + "<|end|>" +
				"<|start|>user<|message|>Weather in Paris?<|end|>" +
				"<|start|>assistant<|channel|>analysis<|message|>Need get_weather.<|end|>" +
				"<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>{\"city\": \"Paris\"}<|call|>" +
				"<|start|>functions.get_weather to=assistant<|channel|>commentary<|message|>\"21 C\"<|end|>" +
				"<|start|>assistant"
		},
	}, {
		name: "no system, no tools: no developer message",
		msgs: []Message{{Role: "user", Content: "Hi"}},
		opts: Options{AddGenerationPrompt: true, ReasoningEffort: "low"},
		want: func(date string) string {
			return harmonySystem(date, "low", false) + "<|start|>user<|message|>Hi<|end|><|start|>assistant"
		},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := time.Now().Format("2006-01-02")
			got, err := tmpl.RenderWith(tc.msgs, tc.opts)
			after := time.Now().Format("2006-01-02")
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want(before) && got != tc.want(after) {
				t.Errorf("render mismatch\n got: %q\nwant: %q", got, tc.want(before))
			}
		})
	}
}

// TestReasoningEffortRefusals: reasoning_effort reaches only a template
// that reads it, and only with one of gpt-oss's levels.
func TestReasoningEffortRefusals(t *testing.T) {
	msgs := []Message{{Role: "user", Content: "Hi"}}
	oss := loadTemplate(t, gptOSSTemplate, "", "")
	llama := loadTemplate(t, "llama3-instruct.jinja", "", "")
	if llama.TakesReasoningEffort() {
		t.Fatal("Llama 3's template does not read reasoning_effort")
	}
	for _, tc := range []struct {
		tmpl   *Template
		effort string
		want   string
	}{
		{llama, "low", "does not read reasoning_effort"},
		{oss, "extreme", `"extreme" is not one of low, medium, high`},
		{oss, "minimal", `"minimal" is not one of low, medium, high`},
	} {
		_, err := tc.tmpl.RenderWith(msgs, Options{AddGenerationPrompt: true, ReasoningEffort: tc.effort})
		var re *RenderError
		if !errors.As(err, &re) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("effort %q: %v, want a RenderError containing %q", tc.effort, err, tc.want)
		}
	}
}
