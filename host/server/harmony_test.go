package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/kvhost/kvhost/host/engine"
	"github.com/kvhost/kvhost/host/model/harmony"
	"github.com/kvhost/kvhost/host/model/synth"
)

// Harmony turns as gpt-oss writes them after the prompt's
// "<|start|>assistant" (the fake tokenizer reads the special tokens as
// their control ids, the rest one byte a token).
const (
	harmonyAnswer  = "<|channel|>analysis<|message|>User greets.<|end|><|start|>assistant<|channel|>final<|message|>Hi there!<|return|>"
	harmonyCall    = "<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\":\"Paris\"}<|call|>"
	harmonyEndThen = "<|channel|>final<|message|>Short.<|end|><|start|>assistant<|channel|>final<|message|>never sent<|return|>"
)

// harmonyScript answers with transcript's tokens; a turn that ends in
// <|return|> or <|call|> finishes "stop" there (the engine stops on EOG),
// else with reason.
func harmonyScript(transcript, reason string) func(engine.Request, int) []engine.Event {
	return func(req engine.Request, _ int) []engine.Event {
		ids, _ := fakeTokenizer{}.Encode(transcript, false)
		if len(ids) > req.MaxTokens {
			ids, reason = ids[:req.MaxTokens], "length"
		}
		return events(ids, reason, len(req.Prompt))
	}
}

// harmonyChoice is what a client reads of one choice, streamed or not.
type harmonyChoice struct {
	Content   *string
	Reasoning *string
	Calls     []string // name + " " + arguments
	Finish    string
	// ReasoningChunks counts the chunks that carried reasoning.
	ReasoningChunks int
}

func str(s string) *string { return &s }

// harmonyChat posts a chat completion to a server fronting a harmony
// model (gpt-oss's real template) and reads each choice.
func harmonyChat(t *testing.T, env *testEnv, body string, stream bool) []harmonyChoice {
	t.Helper()
	if stream {
		body = strings.Replace(body, "{", `{"stream":true,`, 1)
	}
	rec := env.do(t, http.MethodPost, "/v1/chat/completions", body)
	if rec.Code != 200 {
		t.Fatalf("status %d: %s", rec.Code, rec.Body)
	}
	for _, m := range harmony.Tokens {
		if strings.Contains(rec.Body.String(), m) {
			t.Fatalf("%s leaked into the response: %s", m, rec.Body)
		}
	}
	type call struct {
		Index    int
		ID       string
		Function struct{ Name, Arguments string }
	}
	type msg struct {
		Content          *string
		ReasoningContent *string `json:"reasoning_content"`
		ToolCalls        []call  `json:"tool_calls"`
	}
	type choice struct {
		Index        int
		Message      *msg
		Delta        *msg
		FinishReason *string `json:"finish_reason"`
	}
	var resp struct{ Choices []choice }
	if !stream {
		resp = decode[struct{ Choices []choice }](t, rec.Body.Bytes())
		var out []harmonyChoice
		for _, c := range resp.Choices {
			h := harmonyChoice{Content: c.Message.Content, Reasoning: c.Message.ReasoningContent, Finish: *c.FinishReason}
			if h.Reasoning != nil {
				h.ReasoningChunks = 1
			}
			for _, tc := range c.Message.ToolCalls {
				if !strings.HasPrefix(tc.ID, "call_") {
					t.Errorf("call id %q", tc.ID)
				}
				h.Calls = append(h.Calls, tc.Function.Name+" "+tc.Function.Arguments)
			}
			out = append(out, h)
		}
		return out
	}
	var out []harmonyChoice
	var started []bool
	for _, data := range readSSE(t, rec.Body.String()) {
		chunk := decode[struct{ Choices []choice }](t, []byte(data))
		for _, c := range chunk.Choices {
			for len(out) <= c.Index {
				out, started = append(out, harmonyChoice{}), append(started, false)
			}
			h := &out[c.Index]
			if h.Finish != "" {
				t.Fatalf("choice %d: a chunk after its finish: %s", c.Index, data)
			}
			d := c.Delta
			if d.Content != nil && (*d.Content != "" || started[c.Index]) {
				h.Content = str(deref(h.Content) + *d.Content)
			}
			started[c.Index] = true
			if d.ReasoningContent != nil {
				h.Reasoning = str(deref(h.Reasoning) + *d.ReasoningContent)
				h.ReasoningChunks++
				if h.Content != nil && *h.Content != "" {
					t.Fatalf("choice %d: reasoning after content: %s", c.Index, data)
				}
			}
			for _, tc := range d.ToolCalls {
				if tc.Function.Name != "" {
					h.Calls = append(h.Calls, tc.Function.Name+" ")
				}
				if tc.Function.Arguments != "" {
					h.Calls[tc.Index] += tc.Function.Arguments
				}
			}
			if c.FinishReason != nil {
				h.Finish = *c.FinishReason
			}
		}
	}
	return out
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func harmonyEnv(t *testing.T, transcripts ...string) *testEnv {
	t.Helper()
	return newEnv(t, withTemplate(synth.GptOSSTemplate), withEngine(func(e *fakeEngine) { e.ctxLen = 4096 }),
		withChoiceScript(func(req engine.Request, c int) []engine.Event {
			return harmonyScript(transcripts[c%len(transcripts)], "stop")(req, c)
		}))
}

const weatherTools = `"tools":[{"type":"function","function":{"name":"get_weather","description":"Weather","parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}}]`

// TestHarmonyChatCompletions serves a gpt-oss-style model (its real
// template, harmony's control tokens) and checks what clients get, streamed
// and not, through the server's one reader seam: reasoning in
// reasoning_content, the answer in content, calls in tool_calls with
// finish_reason tool_calls, a cut answer with length, an end of turn
// (<|end|> after final) that stops the choice, n = 2 with different turns,
// separate_reasoning false and stream_reasoning false.
func TestHarmonyChatCompletions(t *testing.T) {
	user := `"messages":[{"role":"user","content":"Hi"}]`
	tests := []struct {
		name        string
		transcripts []string
		body        string
		want        []harmonyChoice
		// streamWant differs from want where streaming does (reasoning
		// chunks); nil: the same apart from ReasoningChunks > 0.
		streamChunks int
	}{
		{"reasoning and answer", []string{harmonyAnswer}, `{` + user + `}`,
			[]harmonyChoice{{Content: str("Hi there!"), Reasoning: str("User greets."), Finish: "stop"}}, 0},
		{"a tool call", []string{harmonyCall}, `{` + user + `,` + weatherTools + `}`,
			[]harmonyChoice{{Reasoning: str("Need weather."), Calls: []string{`get_weather {"city":"Paris"}`}, Finish: "tool_calls"}}, 0},
		{"a call to a tool not offered is content", []string{harmonyCall}, `{` + user + `}`,
			[]harmonyChoice{{Content: str(`{"city":"Paris"}`), Reasoning: str("Need weather."), Finish: "stop"}}, 0},
		{"cut by max_tokens mid-answer", []string{harmonyAnswer}, `{` + user + `,"max_tokens":42}`,
			[]harmonyChoice{{Content: str("Hi"), Reasoning: str("User greets."), Finish: "length"}}, 0},
		{"cut mid-reasoning", []string{harmonyAnswer}, `{` + user + `,"max_tokens":14}`,
			[]harmonyChoice{{Content: str(""), Reasoning: str("User"), Finish: "length"}}, 0},
		{"<|end|> after a final message ends the turn", []string{harmonyEndThen}, `{` + user + `}`,
			[]harmonyChoice{{Content: str("Short."), Finish: "stop"}}, 0},
		{"n = 2, an answer and a call", []string{harmonyAnswer, harmonyCall}, `{` + user + `,` + weatherTools + `,"n":2}`,
			[]harmonyChoice{
				{Content: str("Hi there!"), Reasoning: str("User greets."), Finish: "stop"},
				{Reasoning: str("Need weather."), Calls: []string{`get_weather {"city":"Paris"}`}, Finish: "tool_calls"},
			}, 0},
		{"separate_reasoning false: the reasoning is content", []string{harmonyAnswer}, `{` + user + `,"separate_reasoning":false}`,
			[]harmonyChoice{{Content: str("User greets.Hi there!"), Finish: "stop"}}, 0},
		{"stream_reasoning false: one reasoning chunk", []string{harmonyAnswer}, `{` + user + `,"stream_reasoning":false}`,
			[]harmonyChoice{{Content: str("Hi there!"), Reasoning: str("User greets."), Finish: "stop"}}, 1},
	}
	for _, tc := range tests {
		for _, stream := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/stream=%v", tc.name, stream), func(t *testing.T) {
				env := harmonyEnv(t, tc.transcripts...)
				got := harmonyChat(t, env, tc.body, stream)
				want := append([]harmonyChoice(nil), tc.want...)
				for i := range want {
					if i < len(got) {
						switch {
						case !stream && want[i].Reasoning != nil:
							want[i].ReasoningChunks = 1
						case tc.streamChunks > 0:
							want[i].ReasoningChunks = tc.streamChunks
						case want[i].Reasoning != nil && got[i].ReasoningChunks > 1:
							want[i].ReasoningChunks = got[i].ReasoningChunks // streamed as it came
						}
					}
				}
				for _, cs := range [][]harmonyChoice{got, want} {
					for i := range cs {
						if deref(cs[i].Content) == "" {
							cs[i].Content = nil // no content: null, "" or never streamed
						}
					}
				}
				if !reflect.DeepEqual(got, want) {
					t.Fatalf("\n got %s\nwant %s", show(got), show(want))
				}
			})
		}
	}
}

func show(cs []harmonyChoice) string {
	b, _ := json.Marshal(cs)
	return string(b)
}

// TestHarmonyEndOfTurnStopsTheEngine: a choice that ends with <|end|>
// after its final message is finished there, and its engine request is
// cancelled rather than left generating.
func TestHarmonyEndOfTurnStopsTheEngine(t *testing.T) {
	env := newEnv(t, withTemplate(synth.GptOSSTemplate), withEngine(func(e *fakeEngine) {
		e.ctxLen = 4096
		ids, _ := fakeTokenizer{}.Encode("<|channel|>final<|message|>Short.<|end|>", false)
		e.blockAfter = len(ids) // then the engine would go on until cancelled
		e.script = func(req engine.Request) []engine.Event { return events(append(ids, 'x'), "stop", len(req.Prompt)) }
	}))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rec := serve(env.h, newRequest(http.MethodPost, "/v1/chat/completions", `{"messages":[{"role":"user","content":"Hi"}]}`).WithContext(ctx))
	if ctx.Err() != nil {
		t.Fatal("the choice went on past the end of its turn")
	}
	var resp struct {
		Choices []struct {
			Message      struct{ Content string }
			FinishReason string `json:"finish_reason"`
		}
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &resp); err != nil || len(resp.Choices) != 1 ||
		resp.Choices[0].Message.Content != "Short." || resp.Choices[0].FinishReason != "stop" {
		t.Fatalf("got %d %s", rec.Code, rec.Body)
	}
	waitInterrupted(t, env.eng)
}

// TestHarmonyPrompt: the prompt is gpt-oss's template, rendered with the
// request's reasoning_effort, developer message, tools and earlier
// reasoning, tokenized with harmony's control tokens.
func TestHarmonyPrompt(t *testing.T) {
	env := harmonyEnv(t, harmonyAnswer)
	body := `{"reasoning_effort":"low",` + weatherTools + `,"messages":[` +
		`{"role":"developer","content":"Be brief."},{"role":"user","content":"Weather?"},` +
		`{"role":"assistant","reasoning_content":"Need weather.","tool_calls":[{"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}}]},` +
		`{"role":"tool","tool_call_id":"call_1","content":"21 C"}]}`
	harmonyChat(t, env, body, false)
	reqs := env.eng.requests()
	if len(reqs) != 1 {
		t.Fatalf("%d engine requests", len(reqs))
	}
	var text strings.Builder
	for _, id := range reqs[0].Prompt {
		if id >= tokHarmony && id < tokHarmony+int32(len(harmony.Tokens)) {
			text.WriteString(harmony.Tokens[id-tokHarmony])
			continue
		}
		text.Write(fakeTokenizer{}.TokenBytes(id))
	}
	p := text.String()
	for _, want := range []string{
		"<|start|>system<|message|>", "Reasoning: low\n\n",
		"<|start|>developer<|message|># Instructions\n\nBe brief.\n\n# Tools\n\n## functions\n\nnamespace functions {",
		"<|start|>user<|message|>Weather?<|end|><|start|>assistant<|channel|>analysis<|message|>Need weather.<|end|>" +
			"<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>{\"city\": \"Paris\"}<|call|>" +
			"<|start|>functions.get_weather to=assistant<|channel|>commentary<|message|>\"21 C\"<|end|><|start|>assistant",
	} {
		if !strings.Contains(p, want) {
			t.Errorf("prompt lacks %q:\n%s", want, p)
		}
	}
	if !strings.HasSuffix(p, "<|start|>assistant") {
		t.Errorf("prompt does not end with the generation prompt: %q", p[max(0, len(p)-40):])
	}
}

const twoTools = `"tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}},{"type":"function","function":{"name":"now"}}]`

// TestHarmonyForcedCall: a named function (or required with one tool) is
// forced as gpt-oss writes a call: its header ends the prompt, the
// function's schema constrains the arguments, and the reader starts inside
// the call.
func TestHarmonyForcedCall(t *testing.T) {
	user := `"messages":[{"role":"user","content":"Hi"}]`
	for _, tc := range []struct{ choice, finish string }{
		{`{"type":"function","function":{"name":"get_weather"}}`, "stop"},
		{`"required"`, "tool_calls"},
	} {
		for _, stream := range []bool{false, true} {
			env := newEnv(t, withTemplate(synth.GptOSSTemplate), withEngine(func(e *fakeEngine) { e.ctxLen = 4096 }),
				withChoiceScript(func(req engine.Request, c int) []engine.Event {
					return harmonyScript(`{"city":"Paris"}<|call|>`, "stop")(req, c)
				}))
			got := harmonyChat(t, env, `{`+user+`,`+weatherTools+`,"tool_choice":`+tc.choice+`}`, stream)
			want := []harmonyChoice{{Calls: []string{`get_weather {"city":"Paris"}`}, Finish: tc.finish}}
			if stream {
				want[0].Content = nil
			}
			for i := range got {
				if deref(got[i].Content) == "" {
					got[i].Content = nil
				}
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("tool_choice %s stream=%v:\n got %s\nwant %s", tc.choice, stream, show(got), show(want))
			}
			req := env.eng.requests()[0]
			var tail strings.Builder
			for _, id := range req.Prompt[len(req.Prompt)-80:] {
				if id >= tokHarmony && id < tokHarmony+int32(len(harmony.Tokens)) {
					tail.WriteString(harmony.Tokens[id-tokHarmony])
				} else {
					tail.Write(fakeTokenizer{}.TokenBytes(id))
				}
			}
			if !strings.HasSuffix(tail.String(), "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>") {
				t.Fatalf("the prompt does not end with the call's header: %q", tail.String())
			}
			if req.Constraint == nil {
				t.Fatal("the arguments are not constrained")
			}
		}
	}
}

// TestHarmonyRefusals: what kvhost cannot do for a harmony model is a 400
// naming the field.
func TestHarmonyRefusals(t *testing.T) {
	env := harmonyEnv(t, harmonyAnswer)
	user := `"messages":[{"role":"user","content":"Hi"}]`
	for _, tc := range []struct{ body, param, msg string }{
		{`{` + user + `,"reasoning_effort":"extreme"}`, "reasoning_effort", `"extreme" is not one of low, medium, high`},
		{`{` + user + `,"reasoning_effort":"minimal"}`, "reasoning_effort", `"minimal" is not one of low, medium, high`},
		{`{` + user + `,` + twoTools + `,"tool_choice":"required"}`, "tool_choice", "tool_choice required with 2 tools cannot be enforced for this model"},
		{`{` + user + `,` + weatherTools + `,"tool_choice":{"type":"function","function":{"name":"get_weather"}},"response_format":{"type":"json_object"}}`, "response_format", "cannot be combined with tool_choice named"},
		{`{` + user + `,` + weatherTools + `,"response_format":{"type":"json_object"}}`, "response_format", "cannot be combined with tools for this model"},
	} {
		rec := env.do(t, http.MethodPost, "/v1/chat/completions", tc.body)
		e := decode[wireError](t, rec.Body.Bytes())
		if rec.Code != 400 || e.Error.Param == nil || *e.Error.Param != tc.param || !strings.Contains(e.Error.Message, tc.msg) {
			t.Errorf("%s:\n got %d %s\nwant 400 on %s: %s", tc.body, rec.Code, rec.Body, tc.param, tc.msg)
		}
	}
	if n := len(env.eng.requests()); n != 0 {
		t.Errorf("%d refused requests reached the engine", n)
	}
}
