package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/kvhost/kvhost/host/engine"
	"github.com/kvhost/kvhost/host/model/chat"
	"github.com/kvhost/kvhost/host/sampling"
)

type healthyBackend struct {
	fakeBackend
	err error
}

func (b *healthyBackend) Health(context.Context) error { return b.err }

func TestHealthAndModels(t *testing.T) {
	env := newEnv(t)
	rec := env.do(t, http.MethodGet, "/health", "")
	if rec.Code != 200 || strings.TrimSpace(rec.Body.String()) != `{"status":"ok"}` {
		t.Fatalf("health: %d %s", rec.Code, rec.Body)
	}
	rec = env.do(t, http.MethodGet, "/v1/models", "")
	if rec.Code != 200 {
		t.Fatalf("models: %d %s", rec.Code, rec.Body)
	}
	ml := decode[modelList](t, rec.Body.Bytes())
	if ml.Object != "list" || len(ml.Data) != 1 || ml.Data[0].ID != "fake-model" ||
		ml.Data[0].Object != "model" || ml.Data[0].MaxModelLen != 512 || ml.Data[0].Created == 0 {
		t.Fatalf("models body: %+v", ml)
	}

	tmpl, _ := chat.New("", "", "")
	for _, tc := range []struct {
		err  error
		want int
	}{{nil, 200}, {errors.New("loading weights"), 503}} {
		h := New(&healthyBackend{fakeBackend: fakeBackend{eng: env.eng, tmpl: tmpl}, err: tc.err}, Options{})
		r := (&testEnv{h: h}).do(t, http.MethodGet, "/health", "")
		if r.Code != tc.want {
			t.Errorf("health with err=%v: %d, want %d", tc.err, r.Code, tc.want)
		}
	}
}

func TestNotFoundAndMethod(t *testing.T) {
	env := newEnv(t)
	for _, tc := range []struct {
		method, path string
		want         int
	}{
		{http.MethodGet, "/v1/nope", 404},
		{http.MethodGet, "/v1/completions", 405},
		{http.MethodPost, "/v1/models", 405},
	} {
		rec := env.do(t, tc.method, tc.path, "")
		if rec.Code != tc.want {
			t.Errorf("%s %s: %d, want %d", tc.method, tc.path, rec.Code, tc.want)
		}
		if e := decode[wireError](t, rec.Body.Bytes()); e.Error.Message == "" {
			t.Errorf("%s %s: no error message in %s", tc.method, tc.path, rec.Body)
		}
	}
}

func TestCompletionsNonStream(t *testing.T) {
	env := newEnv(t)
	rec := env.do(t, http.MethodPost, "/v1/completions",
		`{"model":"whatever","prompt":"Hi","temperature":0.5,"top_k":40,"min_p":0.1,"seed":-1,"user":"u","metadata":{"x":"y"},"response_format":{"type":"text"},"best_of":1,"suffix":null}`)
	if rec.Code != 200 {
		t.Fatalf("status %d: %s", rec.Code, rec.Body)
	}
	resp := decode[completionResponse](t, rec.Body.Bytes())
	if !strings.HasPrefix(resp.ID, "cmpl-") || resp.Object != "text_completion" || resp.Model != "fake-model" || resp.Created == 0 {
		t.Errorf("envelope: %+v", resp)
	}
	if len(resp.Choices) != 1 || resp.Choices[0].Text != "Hello" || *resp.Choices[0].FinishReason != "length" ||
		resp.Choices[0].Logprobs != nil {
		t.Errorf("choices: %s", rec.Body)
	}
	u := decode[struct{ Usage usage }](t, rec.Body.Bytes()).Usage
	if u != (usage{PromptTokens: 3, CompletionTokens: 5, TotalTokens: 8}) {
		t.Errorf("usage %+v", u)
	}
	if !strings.Contains(rec.Body.String(), `"logprobs":null`) {
		t.Errorf("logprobs not null: %s", rec.Body)
	}
	reqs := env.eng.requests()
	seed := uint64(1<<64 - 1)
	want := engine.Request{
		Prompt: []int32{tokBOS, 'H', 'i'}, MaxTokens: 512 - 3,
		Sampling: engine.SamplingParams{Temperature: 0.5, TopK: 40, MinP: 0.1, Seed: &seed},
	}
	if len(reqs) != 1 || !reflect.DeepEqual(reqs[0], want) {
		t.Errorf("engine request\n got %+v\nwant %+v", reqs, want)
	}
}

func TestCompletionsPromptForms(t *testing.T) {
	tests := []struct {
		name    string
		prompt  string
		prompts [][]int32
	}{
		{"string", `"ab"`, [][]int32{{tokBOS, 'a', 'b'}}},
		{"strings", `["a","bc"]`, [][]int32{{tokBOS, 'a'}, {tokBOS, 'b', 'c'}}},
		{"token ids", `[5, 6, 7]`, [][]int32{{5, 6, 7}}},
		{"token id batch", `[[1,2],[3]]`, [][]int32{{1, 2}, {3}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			env := newEnv(t)
			rec := env.do(t, http.MethodPost, "/v1/completions", `{"prompt":`+tc.prompt+`,"max_tokens":8}`)
			if rec.Code != 200 {
				t.Fatalf("status %d: %s", rec.Code, rec.Body)
			}
			resp := decode[completionResponse](t, rec.Body.Bytes())
			if len(resp.Choices) != len(tc.prompts) {
				t.Fatalf("%d choices, want %d", len(resp.Choices), len(tc.prompts))
			}
			promptTokens := 0
			for i, c := range resp.Choices {
				if c.Index != i || c.Text != "Hello" {
					t.Errorf("choice %d: %+v", i, c)
				}
				promptTokens += len(tc.prompts[i])
			}
			var got [][]int32
			for _, r := range env.eng.requests() {
				got = append(got, r.Prompt)
			}
			if !reflect.DeepEqual(got, tc.prompts) {
				t.Errorf("engine prompts %v, want %v", got, tc.prompts)
			}
			u := decode[struct{ Usage usage }](t, rec.Body.Bytes()).Usage
			if u.PromptTokens != promptTokens || u.CompletionTokens != 5*len(tc.prompts) {
				t.Errorf("usage %+v", u)
			}
		})
	}
}

func TestChatNonStream(t *testing.T) {
	tests := []struct {
		name     string
		template string
		body     string
		prompt   string // the text the engine must receive, BOS spelled "<s>"
	}{
		{
			name:     "template writes BOS: no second BOS",
			template: llama3Template,
			body:     `{"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":[{"type":"text","text":"Hi "},{"type":"text","text":"there"}]}]}`,
			prompt: "<s><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>" +
				"<|start_header_id|>user<|end_header_id|>\n\nHi there<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n",
		},
		{
			name:     "fallback template: tokenizer adds BOS",
			template: "",
			body:     `{"messages":[{"role":"user","content":"Hi"},{"role":"assistant","content":null},{"role":"user","content":"Go"}]}`,
			prompt:   "<s>user: Hi\nassistant: \nuser: Go\nassistant:",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			env := newEnv(t, withTemplate(tc.template))
			rec := env.do(t, http.MethodPost, "/v1/chat/completions", tc.body)
			if rec.Code != 200 {
				t.Fatalf("status %d: %s", rec.Code, rec.Body)
			}
			resp := decode[chatResponse](t, rec.Body.Bytes())
			if !strings.HasPrefix(resp.ID, "chatcmpl-") || resp.Object != "chat.completion" || len(resp.Choices) != 1 {
				t.Fatalf("envelope: %s", rec.Body)
			}
			c := resp.Choices[0]
			if c.Message == nil || c.Message.Role != "assistant" || *c.Message.Content != "Hello" || *c.FinishReason != "length" || c.Delta != nil {
				t.Errorf("choice: %s", rec.Body)
			}
			want, _ := fakeTokenizer{}.Encode(tc.prompt, false)
			got := env.eng.requests()[0].Prompt
			if !reflect.DeepEqual(got, want) {
				s, _ := fakeTokenizer{}.Decode(got)
				t.Errorf("engine prompt %q, want %q", s, tc.prompt)
			}
			u := decode[struct{ Usage usage }](t, rec.Body.Bytes()).Usage
			if u.PromptTokens != len(want) || u.CompletionTokens != 5 || u.TotalTokens != len(want)+5 {
				t.Errorf("usage %+v", u)
			}
		})
	}
}

func TestMaxTokens(t *testing.T) {
	tests := []struct {
		name string
		cap  int
		body string
		want int // engine MaxTokens; 0 = expect 400
	}{
		{"default is context minus prompt", 0, `{"prompt":"abc"}`, 512 - 4},
		{"default clipped to the cap", 10, `{"prompt":"abc"}`, 10},
		{"explicit", 0, `{"prompt":"abc","max_tokens":7}`, 7},
		{"explicit over cap", 10, `{"prompt":"abc","max_tokens":11}`, 0},
		{"zero", 0, `{"prompt":"abc","max_tokens":0}`, 0},
		{"chat max_completion_tokens wins", 0, `{"messages":[{"role":"user","content":"x"}],"max_tokens":3,"max_completion_tokens":5}`, 5},
		{"chat max_tokens", 0, `{"messages":[{"role":"user","content":"x"}],"max_tokens":3}`, 3},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			env := newEnv(t, withOptions(func(o *Options) { o.MaxTokensCap = tc.cap }))
			path := "/v1/completions"
			if strings.Contains(tc.body, "messages") {
				path = "/v1/chat/completions"
			}
			rec := env.do(t, http.MethodPost, path, tc.body)
			if tc.want == 0 {
				if rec.Code != 400 {
					t.Fatalf("status %d, want 400: %s", rec.Code, rec.Body)
				}
				return
			}
			if rec.Code != 200 {
				t.Fatalf("status %d: %s", rec.Code, rec.Body)
			}
			if got := env.eng.requests()[0].MaxTokens; got != tc.want {
				t.Errorf("engine MaxTokens %d, want %d", got, tc.want)
			}
		})
	}
}

func TestBadBodies(t *testing.T) {
	long := `"` + strings.Repeat("x", 600) + `"`
	tests := []struct {
		name, path, body string
		status           int
		param            string // expected error.param; "" = null
		msg              string // substring of error.message
	}{
		{"invalid json", "/v1/completions", `{"prompt":`, 400, "", "not valid JSON"},
		{"syntax error", "/v1/completions", `{"prompt" "x"}`, 400, "", "not valid JSON"},
		{"empty body", "/v1/completions", ``, 400, "", "empty"},
		{"not an object", "/v1/completions", `[1,2]`, 400, "", "must be a JSON object"},
		{"missing prompt", "/v1/completions", `{}`, 400, "prompt", "required"},
		{"max_tokens string", "/v1/completions", `{"prompt":"a","max_tokens":"5"}`, 400, "max_tokens", "expected an integer, got string"},
		{"max_tokens float", "/v1/completions", `{"prompt":"a","max_tokens":1.5}`, 400, "max_tokens", "integer"},
		{"temperature string", "/v1/completions", `{"prompt":"a","temperature":"hot"}`, 400, "temperature", "expected a number"},
		{"temperature negative", "/v1/completions", `{"prompt":"a","temperature":-1}`, 400, "temperature", "out of range"},
		{"top_p over 1", "/v1/completions", `{"prompt":"a","top_p":1.5}`, 400, "top_p", "out of range"},
		{"top_k -2", "/v1/completions", `{"prompt":"a","top_k":-2}`, 400, "top_k", ">= 0"},
		{"min_p", "/v1/completions", `{"prompt":"a","min_p":2}`, 400, "min_p", "out of range"},
		{"stream string", "/v1/completions", `{"prompt":"a","stream":"yes"}`, 400, "stream", "boolean"},
		{"stream_options without stream", "/v1/completions", `{"prompt":"a","stream_options":{"include_usage":true}}`, 400, "stream_options", "stream"},
		{"prompt number", "/v1/completions", `{"prompt":5}`, 400, "prompt", "expected a string"},
		{"prompt empty array", "/v1/completions", `{"prompt":[]}`, 400, "prompt", "empty"},
		{"prompt mixed", "/v1/completions", `{"prompt":["a",1]}`, 400, "prompt", "element 1"},
		{"prompt negative id", "/v1/completions", `{"prompt":[1,-2]}`, 400, "prompt", "token id 1"},
		{"prompt fractional id", "/v1/completions", `{"prompt":[1.5]}`, 400, "prompt", "token id 0"},
		{"prompt too long", "/v1/completions", `{"prompt":` + long + `}`, 400, "prompt", "context window"},
		{"prompt + max_tokens too long (engine)", "/v1/completions", `{"prompt":"abc","max_tokens":509}`, 400, "max_tokens", "exceeds the context"},
		{"too many prompts", "/v1/completions", `{"prompt":["a","a","a","a","a","a","a","a","a","a","a","a","a","a","a","a","a"]}`, 400, "prompt", "at most 16"},
		{"n=17", "/v1/completions", `{"prompt":"a","n":17}`, 400, "n", "out of range [1, 16]"},
		{"n=0", "/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}],"n":0}`, 400, "n", "out of range [1, 16]"},
		{"n string", "/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}],"n":"2"}`, 400, "n", "integer"},
		{"duplicate key", "/v1/completions", `{"prompt":"a","max_tokens":1,"max_tokens":500}`, 400, "max_tokens", "more than once"},
		{"duplicate nested key", "/v1/chat/completions", `{"messages":[{"role":"user","content":"x"},{"role":"user","role":"system","content":"y"}]}`, 400, "messages[1].role", "more than once"},
		{"nesting too deep", "/v1/completions", `{"prompt":"a","x":` + strings.Repeat("[", 70) + strings.Repeat("]", 70) + `}`, 400, "x" + strings.Repeat("[0]", 63), "deeper than 64"},
		{"max_tokens 0 with echo is not for chat", "/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}],"max_tokens":0}`, 400, "max_tokens", ">= 1"},
		{"stop_token_ids negative", "/v1/completions", `{"prompt":"a","stop_token_ids":[-1]}`, 400, "stop_token_ids", ">= 0"},
		{"sampler without validator", "/v1/completions", `{"prompt":"a","sampler":"mirostat"}`, 400, "sampler", "no selectable sampler"},
		{"sampler_params without validator", "/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}],"sampler_params":{"tau":5}}`, 400, "sampler_params", "no selectable sampler"},
		{"sampler number", "/v1/completions", `{"prompt":"a","sampler":5}`, 400, "sampler", "string"},
		{"too many stops", "/v1/completions", `{"prompt":"a","stop":["a","b","c","d","e"]}`, 400, "stop", "at most 4"},
		{"empty stop", "/v1/completions", `{"prompt":"a","stop":""}`, 400, "stop", "empty"},
		{"stop number", "/v1/completions", `{"prompt":"a","stop":7}`, 400, "stop", "string"},
		{"stop array of numbers", "/v1/completions", `{"prompt":"a","stop":[7]}`, 400, "stop", "string"},
		{"logprobs 6", "/v1/completions", `{"prompt":"a","logprobs":6}`, 400, "logprobs", "out of range"},
		{"logprobs bool on completions", "/v1/completions", `{"prompt":"a","logprobs":true}`, 400, "logprobs", "integer"},
		{"seed string", "/v1/completions", `{"prompt":"a","seed":"1"}`, 400, "seed", "integer"},
		{"no messages", "/v1/chat/completions", `{}`, 400, "messages", "at least one"},
		{"empty messages", "/v1/chat/completions", `{"messages":[]}`, 400, "messages", "at least one"},
		{"messages string", "/v1/chat/completions", `{"messages":"hi"}`, 400, "messages", "array"},
		{"role number", "/v1/chat/completions", `{"messages":[{"role":5,"content":"x"}]}`, 400, "messages.role", "string"},
		{"missing role", "/v1/chat/completions", `{"messages":[{"content":"x"}]}`, 400, "messages[0].role", "required"},
		{"content number", "/v1/chat/completions", `{"messages":[{"role":"user","content":5}]}`, 400, "messages.content", "string"},
		{"image content", "/v1/chat/completions", `{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{}}]}]}`, 400, "messages.content", "only \"text\""},
		{"logprobs string", "/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}],"logprobs":"yes"}`, 400, "logprobs", "boolean"},
		{"top_logprobs 21", "/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}],"logprobs":true,"top_logprobs":21}`, 400, "top_logprobs", "out of range"},
		{"top_logprobs without logprobs", "/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}],"top_logprobs":2}`, 400, "top_logprobs", "requires logprobs"},
		{"max_completion_tokens string", "/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}],"max_completion_tokens":"9"}`, 400, "max_completion_tokens", "integer"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			env := newEnv(t)
			rec := env.do(t, http.MethodPost, tc.path, tc.body)
			if rec.Code != tc.status {
				t.Fatalf("status %d, want %d: %s", rec.Code, tc.status, rec.Body)
			}
			if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type %q", ct)
			}
			e := decode[wireError](t, rec.Body.Bytes())
			if e.Error.Type != "invalid_request_error" {
				t.Errorf("type %q", e.Error.Type)
			}
			gotParam := ""
			if e.Error.Param != nil {
				gotParam = *e.Error.Param
			}
			if gotParam != tc.param {
				t.Errorf("param %q, want %q (message %q)", gotParam, tc.param, e.Error.Message)
			}
			if !strings.Contains(e.Error.Message, tc.msg) {
				t.Errorf("message %q lacks %q", e.Error.Message, tc.msg)
			}
			if !strings.Contains(rec.Body.String(), `"code":`) || !strings.Contains(rec.Body.String(), `"param":`) {
				t.Errorf("error body lacks param/code keys: %s", rec.Body)
			}
		})
	}
}

func TestBodyTooLarge(t *testing.T) {
	env := newEnv(t, withOptions(func(o *Options) { o.MaxBodyBytes = 32 }))
	rec := env.do(t, http.MethodPost, "/v1/completions", `{"prompt":"`+strings.Repeat("a", 64)+`"}`)
	if rec.Code != http.StatusRequestEntityTooLarge {
		t.Fatalf("status %d: %s", rec.Code, rec.Body)
	}
}

func TestChatTemplateRejects(t *testing.T) {
	env := newEnv(t, withTemplate(mistralTemplate))
	rec := env.do(t, http.MethodPost, "/v1/chat/completions", `{"messages":[{"role":"system","content":"x"},{"role":"user","content":"y"}]}`)
	if rec.Code != 400 {
		t.Fatalf("status %d: %s", rec.Code, rec.Body)
	}
	e := decode[wireError](t, rec.Body.Bytes())
	if !strings.Contains(e.Error.Message, "Conversation roles must alternate") || e.Error.Param == nil || *e.Error.Param != "messages" {
		t.Errorf("error %+v", e.Error)
	}
	if len(env.eng.requests()) != 0 {
		t.Error("a rejected chat reached the engine")
	}
}

func TestErrorMapping(t *testing.T) {
	tests := []struct {
		err    error
		status int
		typ    string
		param  string
	}{
		{&engine.InvalidRequestError{Field: "prompt", Problem: "too long"}, 400, "invalid_request_error", "prompt"},
		{fmt.Errorf("wrapped: %w", &engine.InvalidRequestError{Field: "max_tokens", Problem: "x"}), 400, "invalid_request_error", "max_tokens"},
		{engine.ErrQueueFull, 429, "rate_limit_error", ""},
		{fmt.Errorf("admit: %w", engine.ErrQueueFull), 429, "rate_limit_error", ""},
		{engine.ErrShuttingDown, 503, "service_unavailable", ""},
		{&chat.RenderError{Err: errors.New("roles")}, 400, "invalid_request_error", "messages"},
		{&chat.RenderError{Err: errors.New("boom"), Panicked: true}, 500, "server_error", ""},
		{badRequest("stop", "x"), 400, "invalid_request_error", "stop"},
		{fmt.Errorf("x: %w", &sampling.FieldError{Field: "logit_bias", Problem: "x"}), 400, "invalid_request_error", "logit_bias"},
		{&http.MaxBytesError{Limit: 10}, 413, "invalid_request_error", ""},
		{errors.New("cuda: device lost"), 500, "server_error", ""},
	}
	for _, tc := range tests {
		status, body, internal := errorResponse(tc.err)
		if status != tc.status || body.Type != tc.typ || body.Param != tc.param || internal != (status == 500) {
			t.Errorf("errorResponse(%v) = %d %+v internal=%v; want %d %s param=%q", tc.err, status, body, internal, tc.status, tc.typ, tc.param)
		}
	}
}

func TestSubmitErrors(t *testing.T) {
	for _, tc := range []struct {
		err    error
		status int
		code   string
	}{
		{engine.ErrQueueFull, 429, "queue_full"},
		{engine.ErrShuttingDown, 503, "shutting_down"},
		{errors.New("secret internal detail"), 500, "internal_error"},
	} {
		for _, stream := range []bool{false, true} {
			env := newEnv(t, withEngine(func(e *fakeEngine) { e.submitErr = tc.err }))
			rec := env.do(t, http.MethodPost, "/v1/completions", fmt.Sprintf(`{"prompt":"a","stream":%v}`, stream))
			if rec.Code != tc.status {
				t.Errorf("%v stream=%v: status %d, want %d", tc.err, stream, rec.Code, tc.status)
			}
			e := decode[wireError](t, rec.Body.Bytes())
			if e.Error.Code == nil || *e.Error.Code != tc.code || strings.Contains(rec.Body.String(), "secret") {
				t.Errorf("%v: body %s", tc.err, rec.Body)
			}
		}
	}
}

// An error event in the middle of a non-streaming generation becomes the
// response's status.
func TestEngineErrorEventNonStream(t *testing.T) {
	env := newEnv(t, withScript(func(engine.Request) []engine.Event {
		return []engine.Event{{Token: 'a'}, {Err: fmt.Errorf("step: %w", engine.ErrShuttingDown)}}
	}))
	rec := env.do(t, http.MethodPost, "/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}]}`)
	if rec.Code != 503 {
		t.Fatalf("status %d: %s", rec.Code, rec.Body)
	}
}

// A stream that closes without a final event is the engine's bug: 500.
func TestEngineStreamClosedEarly(t *testing.T) {
	env := newEnv(t, withScript(func(engine.Request) []engine.Event { return []engine.Event{{Token: 'a'}} }))
	rec := env.do(t, http.MethodPost, "/v1/completions", `{"prompt":"x"}`)
	if rec.Code != 500 {
		t.Fatalf("status %d: %s", rec.Code, rec.Body)
	}
	if !strings.Contains(env.logs.String(), "closed without a final event") {
		t.Errorf("internal error not logged: %s", env.logs)
	}
}

func TestRequestLogging(t *testing.T) {
	env := newEnv(t)
	req := newRequest(http.MethodPost, "/v1/completions?api_key=sk-query-secret", `{"prompt":"a"}`)
	req.Header.Set("Authorization", "Bearer sk-very-secret")
	req.Header.Set("Cookie", "session=sk-cookie-secret")
	rec := serve(env.h, req)
	if rec.Code != 200 {
		t.Fatalf("status %d", rec.Code)
	}
	logs := env.logs.String()
	for _, want := range []string{"method=POST", "path=/v1/completions", "status=200", "duration="} {
		if !strings.Contains(logs, want) {
			t.Errorf("log lacks %q: %s", want, logs)
		}
	}
	for _, secret := range []string{"sk-very-secret", "sk-query-secret", "sk-cookie-secret", "Authorization"} {
		if strings.Contains(logs, secret) {
			t.Errorf("log leaks %q: %s", secret, logs)
		}
	}
	rec = env.do(t, http.MethodPost, "/v1/completions", `{"prompt":5}`)
	if !strings.Contains(env.logs.String(), "status=400") {
		t.Errorf("400 not logged: %s", env.logs)
	}
}

func TestOptionsValidate(t *testing.T) {
	for _, o := range []Options{{MaxBodyBytes: -1}, {MaxTokensCap: -1}, {MaxPrompts: -1}} {
		if err := o.Validate(); err == nil || !strings.HasPrefix(err.Error(), "server: ") {
			t.Errorf("Validate(%+v) = %v", o, err)
		}
	}
	if err := (Options{}).Validate(); err != nil {
		t.Errorf("zero Options: %v", err)
	}
	defer func() {
		if recover() == nil {
			t.Error("New with invalid options did not panic")
		}
	}()
	New(&fakeBackend{}, Options{MaxPrompts: -1})
}
