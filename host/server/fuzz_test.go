package server

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/kvhost/kvhost/host/engine"
)

// fuzzBody posts body and checks the server's promises for arbitrary input:
// a 2xx or 4xx, never a 5xx or a panic (the recover middleware would turn a
// panic into a 500), and a well-formed body either way.
func fuzzBody(t *testing.T, env *testEnv, path string, body []byte) {
	rec := env.do(t, http.MethodPost, path, string(body))
	if rec.Code < 200 || rec.Code >= 500 {
		t.Fatalf("status %d for %q: %s", rec.Code, body, rec.Body)
	}
	out := rec.Body.String()
	switch {
	case rec.Code >= 400:
		var e wireError
		if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || e.Error.Message == "" {
			t.Fatalf("status %d with a malformed error body %q", rec.Code, out)
		}
	case rec.Header().Get("Content-Type") == "text/event-stream":
		for _, d := range readSSE(t, out) {
			if !json.Valid([]byte(d)) {
				t.Fatalf("SSE data is not JSON: %q", d)
			}
		}
	default:
		if !json.Valid(rec.Body.Bytes()) {
			t.Fatalf("response is not JSON: %q", out)
		}
	}
}

func fuzzEnv(t testing.TB) *testEnv {
	return newEnv(t, withScript(func(req engine.Request) []engine.Event {
		ids := []int32{'o', 'k', 0xC3, 0xA9, tokSmile, 'E', 'N', 'D', '.', 0xFF}
		if len(ids) > req.MaxTokens {
			return events(ids[:req.MaxTokens], "length", len(req.Prompt))
		}
		return events(ids, "stop", len(req.Prompt))
	}), withOptions(func(o *Options) { o.MaxBodyBytes = 1 << 16; o.MaxTokensCap = 256 }))
}

func FuzzCompletionsBody(f *testing.F) {
	for _, s := range []string{
		`{"prompt":"Hi"}`,
		`{"prompt":["a","b"],"stream":true,"stream_options":{"include_usage":true},"logprobs":3}`,
		`{"prompt":[1,2,3],"max_tokens":4,"stop":["EN","."],"temperature":0.2,"top_p":0.9,"top_k":5,"min_p":0.05,"seed":42}`,
		`{"prompt":[[1],[2,3]],"n":1,"user":"u","echo":false}`,
		`{"prompt":"x","max_tokens":1e99}`,
		`{"prompt":null,"stop":null}`,
		`{"prompt":"\u00e9","stop":"é","stream":true,"logprobs":0}`,
		`[`, `""`, `{"prompt":{}}`,
	} {
		f.Add([]byte(s))
	}
	env := fuzzEnv(f)
	f.Fuzz(func(t *testing.T, body []byte) {
		fuzzBody(t, env, "/v1/completions", body)
	})
}

func FuzzChatBody(f *testing.F) {
	for _, s := range []string{
		`{"messages":[{"role":"user","content":"Hi"}]}`,
		`{"messages":[{"role":"system","content":"s"},{"role":"user","content":[{"type":"text","text":"x"}]}],"stream":true,"logprobs":true,"top_logprobs":20}`,
		`{"messages":[{"role":"user","content":null}],"max_completion_tokens":3,"stop":"k","stream":true,"stream_options":{"include_usage":true}}`,
		`{"messages":[{"role":"","content":"x"}]}`,
		`{"messages":[null]}`,
		`{"messages":[{"role":"user","content":[{"type":"text"}]}]}`,
		`{"messages":[{"role":"user","content":"` + strings.Repeat("long ", 200) + `"}]}`,
	} {
		f.Add([]byte(s))
	}
	env := fuzzEnv(f)
	f.Fuzz(func(t *testing.T, body []byte) {
		fuzzBody(t, env, "/v1/chat/completions", body)
	})
}
