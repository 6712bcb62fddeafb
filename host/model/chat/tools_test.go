package chat

import (
	"encoding/json"
	"strings"
	"testing"
)

const weatherTool = `{"type": "function", "function": {"name": "get_weather", "description": "Weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}`

func TestToolFormatDetection(t *testing.T) {
	for file, want := range map[string]ToolFormat{
		"qwen2.5-instruct.jinja":   ToolsHermes,
		"llama3.2-instruct.jinja":  ToolsLlama3,
		"mistral-v0.3-tools.jinja": ToolsMistral,
		"mistral-instruct.jinja":   ToolsGeneric,
		"llama2-chat.jinja":        ToolsGeneric,
		"llama3-instruct.jinja":    ToolsGeneric,
	} {
		if got := loadTemplate(t, file, "", "").ToolFormat(); got != want {
			t.Errorf("%s: %v, want %v", file, got, want)
		}
	}
	fb, _ := New("", "<s>", "</s>")
	if fb.ToolFormat() != ToolsGeneric {
		t.Error("the fallback template renders no tools")
	}
}

// The expected renderings are written by hand from the templates' text.
func TestRenderWithTools(t *testing.T) {
	conv := []Message{
		{Role: "user", Content: "Weather in Paris?"},
		{Role: "assistant", ToolCalls: []ToolCall{{ID: "abcDEF123", Name: "get_weather", Arguments: json.RawMessage(`{"city":"Paris"}`)}}},
		{Role: "tool", Content: "18C", ToolCallID: "abcDEF123"},
	}
	tools := []json.RawMessage{json.RawMessage(weatherTool)}
	t.Run("qwen2.5", func(t *testing.T) {
		tmpl := loadTemplate(t, "qwen2.5-instruct.jinja", "", "<|im_end|>")
		got, err := tmpl.RenderWith(conv, Options{AddGenerationPrompt: true, Tools: tools})
		if err != nil {
			t.Fatal(err)
		}
		want := "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.\n\n# Tools\n\n" +
			"You may call one or more functions to assist with the user query.\n\n" +
			"You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n" + weatherTool + "\n</tools>\n\n" +
			"For each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n" +
			"<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n" +
			"<|im_start|>user\nWeather in Paris?<|im_end|>\n" +
			"<|im_start|>assistant\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call><|im_end|>\n" +
			"<|im_start|>user\n<tool_response>\n18C\n</tool_response><|im_end|>\n" +
			"<|im_start|>assistant\n"
		if got != want {
			t.Errorf("got  %q\nwant %q", got, want)
		}
	})
	t.Run("mistral v0.3", func(t *testing.T) {
		tmpl := loadTemplate(t, "mistral-v0.3-tools.jinja", "<s>", "</s>")
		got, err := tmpl.RenderWith(append(conv, Message{Role: "user", Content: "Thanks"}), Options{AddGenerationPrompt: true, Tools: tools})
		if err != nil {
			t.Fatal(err)
		}
		want := "<s>[INST] Weather in Paris?[/INST]" +
			`[TOOL_CALLS] [{"name": "get_weather", "arguments": {"city": "Paris"}, "id": "abcDEF123"}]</s>` +
			`[TOOL_RESULTS] {"content": 18C, "call_id": "abcDEF123"}[/TOOL_RESULTS]` +
			`[AVAILABLE_TOOLS] [{"type": "function", "function": {"name": "get_weather", "description": "Weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}][/AVAILABLE_TOOLS]` +
			"[INST] Thanks[/INST]"
		if got != want {
			t.Errorf("got  %q\nwant %q", got, want)
		}
	})
	t.Run("llama3.2", func(t *testing.T) {
		tmpl := loadTemplate(t, "llama3.2-instruct.jinja", "<|begin_of_text|>", "<|eot_id|>")
		got, err := tmpl.RenderWith(append(conv[:1:1], Message{Role: "user", Content: "x"})[:1], Options{AddGenerationPrompt: true, Tools: tools})
		if err != nil {
			t.Fatal(err)
		}
		for _, part := range []string{"Environment: ipython\n", `"name": "get_weather"`, "Given the following functions",
			"Weather in Paris?<|eot_id|>", "<|start_header_id|>assistant<|end_header_id|>\n\n"} {
			if !strings.Contains(got, part) {
				t.Errorf("rendering lacks %q:\n%s", part, got)
			}
		}
		// The tool-call turn, as the template writes it.
		got, err = tmpl.RenderWith(conv, Options{Tools: tools})
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(got, `<|start_header_id|>assistant<|end_header_id|>`+"\n\n"+`{"name": "get_weather", "parameters": {"city": "Paris"}}<|eot_id|>`) ||
			// A string "is iterable" in Jinja, so the template writes it with tojson.
			!strings.Contains(got, "<|start_header_id|>ipython<|end_header_id|>\n\n\"18C\"<|eot_id|>") {
			t.Errorf("tool turns:\n%s", got)
		}
	})
	t.Run("generic", func(t *testing.T) {
		tmpl, _ := New("", "<s>", "</s>")
		got, err := tmpl.RenderWith(conv, Options{AddGenerationPrompt: true, Tools: tools})
		if err != nil {
			t.Fatal(err)
		}
		compact := `{"type":"function","function":{"name":"get_weather","description":"Weather","parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}}`
		want := "system: " + strings.Replace(genericToolPrompt, "%s", compact+"\n", 1) + "\n" +
			"user: Weather in Paris?\n" +
			"assistant: <tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\":\"Paris\"}}\n</tool_call>\n" +
			"user: <tool_response>\n18C\n</tool_response>\n" +
			"assistant:"
		if got != want {
			t.Errorf("got  %q\nwant %q", got, want)
		}
	})
}
