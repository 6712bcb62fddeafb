package server

import (
	"net/http"
	"strings"
	"testing"
)

// TestStructuredFieldsBecomeConstraints: each structured-output field
// reaches the engine as a constraint of its type; /generate takes SGLang's
// spellings in sampling_params.
func TestStructuredFieldsBecomeConstraints(t *testing.T) {
	env := newEnv(t)
	cases := []struct {
		path, body, typ string
	}{
		{"/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}],"response_format":{"type":"json_object"}}`, "json_object"},
		{"/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}],"response_format":{"type":"json_schema","json_schema":{"name":"a","strict":true,"schema":{"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]}}}}`, "json_schema"},
		{"/v1/completions", `{"prompt":"x","guided_json":"{\"type\":\"string\"}"}`, "json_schema"},
		{"/v1/completions", `{"prompt":"x","guided_regex":"[a-z]+"}`, "regex"},
		{"/v1/completions", `{"prompt":"x","guided_grammar":"root ::= \"a\"+"}`, "grammar"},
		{"/v1/completions", `{"prompt":"x","guided_choice":["yes","no"]}`, "choice"},
		{"/v1/completions", `{"prompt":"x","structured_outputs":{"regex":"a|b"}}`, "regex"},
		{"/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}],"ebnf":"root ::= \"x\""}`, "grammar"},
		{"/generate", `{"text":"x","sampling_params":{"json_schema":"{\"type\":\"integer\"}"}}`, "json_schema"},
		{"/generate", `{"text":"x","sampling_params":{"regex":"\\d+"}}`, "regex"},
		{"/generate", `{"text":"x","sampling_params":{"ebnf":"root ::= [0-9]"}}`, "grammar"},
	}
	for _, c := range cases {
		before := len(env.eng.requests())
		rec := env.do(t, "POST", c.path, c.body)
		if rec.Code != http.StatusOK {
			t.Fatalf("%s %s: %d %s", c.path, c.body, rec.Code, rec.Body)
		}
		reqs := env.eng.requests()
		if len(reqs) != before+1 || reqs[before].Constraint == nil || reqs[before].Constraint.Type != c.typ {
			t.Fatalf("%s: engine request constraint %+v, want type %s", c.body, reqs[len(reqs)-1].Constraint, c.typ)
		}
	}
	// response_format text asks for nothing.
	env.do(t, "POST", "/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}],"response_format":{"type":"text"}}`)
	if r := env.eng.requests(); r[len(r)-1].Constraint != nil {
		t.Fatal("response_format text constrained the output")
	}
}

func TestStructuredFieldErrors(t *testing.T) {
	env := newEnv(t)
	cases := []struct {
		path, body, param, text string
	}{
		{"/v1/completions", `{"prompt":"x","guided_regex":"a","guided_choice":["b"]}`, "guided_choice", "give at most one"},
		{"/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}],"response_format":{"type":"xml"}}`, "response_format.type", "xml"},
		{"/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}],"response_format":{"type":"json_schema"}}`, "response_format.json_schema.schema", "needs"},
		{"/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}],"response_format":{"type":"json_schema","json_schema":{"name":"a","schema":{"type":"object","properties":{"a":{"not":{}}}}}}}`, "response_format.json_schema.schema", "unsupported not at /properties/a"},
		{"/v1/completions", `{"prompt":"x","guided_json":{"type":"string","format":"hostname"}}`, "guided_json", `format "hostname"`},
		{"/v1/completions", `{"prompt":"x","guided_regex":"(a"}`, "guided_regex", "invalid regex"},
		{"/v1/completions", `{"prompt":"x","guided_grammar":"root ::= x"}`, "guided_grammar", "never defined"},
		{"/v1/completions", `{"prompt":"x","guided_choice":[]}`, "guided_choice", "empty"},
		{"/v1/completions", `{"prompt":"x","structured_outputs":{"structural_tag":"x"}}`, "structured_outputs", "unknown field"},
		{"/v1/completions", `{"prompt":"x","guided_json":42}`, "guided_json", "JSON Schema object"},
		{"/generate", `{"text":"x","sampling_params":{"ebnf":"root ::= <x>"}}`, "sampling_params.ebnf", "token reference"},
	}
	for _, c := range cases {
		rec := env.do(t, "POST", c.path, c.body)
		if rec.Code != http.StatusBadRequest {
			t.Errorf("%s: %d %s", c.body, rec.Code, rec.Body)
			continue
		}
		e := decode[wireError](t, rec.Body.Bytes())
		if e.Error.Param == nil || *e.Error.Param != c.param || !strings.Contains(e.Error.Message, c.text) {
			t.Errorf("%s: param %v message %q, want %s and %q", c.body, e.Error.Param, e.Error.Message, c.param, c.text)
		}
	}
}

const toolsJSON = `[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}},{"type":"function","function":{"name":"now"}}]`

// TestToolCallsResponse: a model that answers with a Hermes call gets
// tool_calls (content null, finish_reason tool_calls), as one body and
// as OpenAI's stream of deltas; the tools reach the prompt through the
// template (kvhost's generic system message for a template without tools).
func TestToolCallsResponse(t *testing.T) {
	reply := "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n</tool_call>"
	env := newEnv(t, withScript(scriptText(reply, "stop")), withEngine(func(e *fakeEngine) { e.ctxLen = 4096 }))
	body := `{"messages":[{"role":"user","content":"Weather?"}],"tools":` + toolsJSON + `}`
	rec := env.do(t, "POST", "/v1/chat/completions", body)
	if rec.Code != 200 {
		t.Fatalf("%d %s", rec.Code, rec.Body)
	}
	r := decode[chatResponse](t, rec.Body.Bytes())
	m := r.Choices[0].Message
	if m.Content != nil || len(m.ToolCalls) != 1 || m.ToolCalls[0].Function.Name != "get_weather" ||
		m.ToolCalls[0].Function.Arguments != `{"city": "Oslo"}` || *r.Choices[0].FinishReason != "tool_calls" {
		t.Fatalf("message %+v finish %s", m, *r.Choices[0].FinishReason)
	}
	req := env.eng.requests()[0]
	if req.Constraint != nil {
		t.Fatal("tool_choice auto constrained the output")
	}
	prompt := string(fakeTokenizer{}.Decode2(req.Prompt))
	if !strings.Contains(prompt, `"name":"get_weather"`) || !strings.Contains(prompt, "<tool_call>") {
		t.Fatalf("the tools are not in the prompt: %q", prompt)
	}

	rec = env.do(t, "POST", "/v1/chat/completions", strings.Replace(body, `"tools"`, `"stream":true,"tools"`, 1))
	var head, args, finish bool
	for _, data := range readSSE(t, rec.Body.String()) {
		c := decode[chatResponse](t, []byte(data))
		for _, ch := range c.Choices {
			if d := ch.Delta; d != nil {
				for _, tc := range d.ToolCalls {
					switch {
					case tc.ID != "" && tc.Function.Name == "get_weather" && tc.Function.Arguments == "":
						head = true
					case tc.ID == "" && tc.Function.Arguments == `{"city": "Oslo"}`:
						args = head
					}
				}
			}
			if ch.FinishReason != nil && *ch.FinishReason == "tool_calls" {
				finish = true
			}
		}
	}
	if !head || !args || !finish {
		t.Fatalf("stream: head %v args %v finish %v:\n%s", head, args, finish, rec.Body)
	}
}

// TestToolChoiceRequiredForcesOpener: required (and a named function)
// constrain the output with a tool-call grammar and put the call opener in
// the prompt; the reply, which starts inside the call, parses.
func TestToolChoiceRequiredForcesOpener(t *testing.T) {
	reply := "{\"name\": \"now\", \"arguments\": {}}\n</tool_call>"
	env := newEnv(t, withScript(scriptText(reply, "stop")), withEngine(func(e *fakeEngine) { e.ctxLen = 4096 }))
	for _, choice := range []string{`"required"`, `{"type":"function","function":{"name":"now"}}`} {
		rec := env.do(t, "POST", "/v1/chat/completions", `{"messages":[{"role":"user","content":"?"}],"tools":`+toolsJSON+`,"tool_choice":`+choice+`}`)
		if rec.Code != 200 {
			t.Fatalf("%s: %d %s", choice, rec.Code, rec.Body)
		}
		r := decode[chatResponse](t, rec.Body.Bytes())
		reqs := env.eng.requests()
		req := reqs[len(reqs)-1]
		if req.Constraint == nil || req.Constraint.Type != "tool_calls" {
			t.Fatalf("%s: constraint %+v", choice, req.Constraint)
		}
		if p := string(fakeTokenizer{}.Decode2(req.Prompt)); !strings.HasSuffix(p, "<tool_call>\n") {
			t.Fatalf("%s: prompt does not end with the opener: %q", choice, p)
		}
		want := "tool_calls"
		if strings.HasPrefix(choice, "{") {
			want = "stop" // OpenAI reports a named function's call as stop
		}
		if tc := r.Choices[0].Message.ToolCalls; len(tc) != 1 || tc[0].Function.Name != "now" || *r.Choices[0].FinishReason != want {
			t.Fatalf("%s: %+v %s", choice, r.Choices[0].Message, *r.Choices[0].FinishReason)
		}
	}
}

func TestToolFieldErrors(t *testing.T) {
	env := newEnv(t)
	msgs := `"messages":[{"role":"user","content":"x"}]`
	cases := []struct{ body, param string }{
		{`{` + msgs + `,"tools":[{"type":"retrieval"}]}`, "tools[0].type"},
		{`{` + msgs + `,"tools":[{"type":"function","function":{"name":"bad name"}}]}`, "tools[0].function.name"},
		{`{` + msgs + `,"tools":` + toolsJSON + `,"tool_choice":"sometimes"}`, "tool_choice"},
		{`{` + msgs + `,"tools":` + toolsJSON + `,"tool_choice":{"type":"function","function":{"name":"other"}}}`, "tool_choice.function.name"},
		{`{` + msgs + `,"tool_choice":"required"}`, "tool_choice"},
		{`{` + msgs + `,"parallel_tool_calls":false}`, "parallel_tool_calls"},
		{`{` + msgs + `,"tools":` + toolsJSON + `,"tool_choice":"required","guided_regex":"a"}`, "guided_regex"},
		{`{"messages":[{"role":"user","content":"x"},{"role":"tool","content":"18C"}]}`, "messages[1].tool_call_id"},
		{`{"messages":[{"role":"assistant","tool_calls":[{"id":"a","type":"function","function":{"name":"f","arguments":"{oops"}}]}]}`, "messages[0].tool_calls[0].function.arguments"},
		{`{` + msgs + `,"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":{"a":{"uniqueItems":true,"type":"array"}}}}}],"tool_choice":"required"}`, "tools"},
	}
	for _, c := range cases {
		rec := env.do(t, "POST", "/v1/chat/completions", c.body)
		e := decode[wireError](t, rec.Body.Bytes())
		if rec.Code != 400 || e.Error.Param == nil || *e.Error.Param != c.param {
			t.Errorf("%s: %d %s, want a 400 on %s", c.body, rec.Code, rec.Body, c.param)
		}
	}
}

// Decode2 is Decode without the error, for prompts in tests.
func (t fakeTokenizer) Decode2(ids []int32) []byte {
	s, _ := t.Decode(ids)
	return []byte(s)
}
