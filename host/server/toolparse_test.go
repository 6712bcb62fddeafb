package server

import (
	"strings"
	"testing"

	"github.com/kvhost/kvhost/host/model/chat"
)

// feed pushes text in pieces of n bytes and collects what comes out.
func feed(t *toolStream, text string, n int) (string, []parsedCall) {
	var content strings.Builder
	var calls []parsedCall
	for i := 0; i < len(text); i += n {
		out := t.push(text[i:min(i+n, len(text))])
		content.WriteString(out.content)
		calls = append(calls, out.calls...)
	}
	out := t.end()
	content.WriteString(out.content)
	return content.String(), append(calls, out.calls...)
}

func TestToolStreamFormats(t *testing.T) {
	names := map[string]bool{"get_weather": true, "now": true}
	cases := []struct {
		name    string
		format  chat.ToolFormat
		forced  bool
		text    string
		content string
		calls   []string // name + " " + args
	}{
		{"hermes two calls", chat.ToolsHermes, false,
			"Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>",
			"Let me check.\n", []string{`get_weather {"city": "Oslo"}`, `now {}`}},
		{"hermes unterminated call at the end", chat.ToolsHermes, false,
			"<tool_call>\n{\"name\": \"now\", \"arguments\": {\"tz\": \"UTC\"}}", "", []string{`now {"tz": "UTC"}`}},
		{"hermes unknown function stays content", chat.ToolsHermes, false,
			"<tool_call>{\"name\": \"rm_rf\", \"arguments\": {}}</tool_call>", "<tool_call>{\"name\": \"rm_rf\", \"arguments\": {}}</tool_call>", nil},
		{"hermes text with a lone <", chat.ToolsHermes, false, "a < b <tool and <tool_", "a < b <tool and <tool_", nil},
		{"hermes forced (required)", chat.ToolsHermes, true,
			"{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\"}}\n</tool_call>", "", []string{`get_weather {"city": "Rome"}`}},
		{"generic is hermes", chat.ToolsGeneric, false,
			"<tool_call>{\"name\":\"now\",\"arguments\":\"{\\\"tz\\\":1}\"}</tool_call>", "", []string{`now {"tz":1}`}},
		{"llama3 call", chat.ToolsLlama3, false,
			` {"name": "get_weather", "parameters": {"city": "Lima"}}`, "", []string{`get_weather {"city": "Lima"}`}},
		{"llama3 two calls", chat.ToolsLlama3, false,
			`{"name": "now", "parameters": {}}; {"name": "get_weather", "parameters": {"city": "Oslo"}}`, "", []string{`now {}`, `get_weather {"city": "Oslo"}`}},
		{"llama3 JSON that is not a call", chat.ToolsLlama3, false, `{"answer": 42}`, `{"answer": 42}`, nil},
		{"llama3 prose", chat.ToolsLlama3, false, "It is sunny.", "It is sunny.", nil},
		{"mistral", chat.ToolsMistral, false,
			`Sure.[TOOL_CALLS] [{"name": "now", "arguments": {}}, {"name": "get_weather", "arguments": {"city": "Oslo"}}]`,
			"Sure.", []string{`now {}`, `get_weather {"city": "Oslo"}`}},
		{"mistral forced", chat.ToolsMistral, true, ` [{"name": "now", "arguments": {"a": [1]}}]`, "", []string{`now {"a": [1]}`}},
	}
	for _, c := range cases {
		for _, n := range []int{1, 3, 1000} {
			ts := newToolStream(&toolPlan{format: c.format, names: names, forced: c.forced})
			content, calls := feed(ts, c.text, n)
			if content != c.content {
				t.Errorf("%s (pieces of %d): content %q, want %q", c.name, n, content, c.content)
			}
			var got []string
			for _, call := range calls {
				got = append(got, call.Name+" "+call.Args)
				if !strings.HasPrefix(call.ID, "call_") && c.format != chat.ToolsMistral || c.format == chat.ToolsMistral && len(call.ID) != 9 {
					t.Errorf("%s: call id %q", c.name, call.ID)
				}
			}
			if strings.Join(got, "|") != strings.Join(c.calls, "|") {
				t.Errorf("%s (pieces of %d): calls %q, want %q", c.name, n, got, c.calls)
			}
		}
	}
}

// TestToolStreamHoldsBackMarker: content that might begin "<tool_call>"
// is not sent until it is known not to.
func TestToolStreamHoldsBackMarker(t *testing.T) {
	ts := newToolStream(&toolPlan{format: chat.ToolsHermes, names: map[string]bool{"now": true}})
	if c := ts.push("Hi <tool_c").content; c != "Hi " {
		t.Fatalf("sent %q", c)
	}
	if c := ts.push("at").content; c != "<tool_cat" {
		t.Fatalf("after the marker failed to match, sent %q", c)
	}
}
