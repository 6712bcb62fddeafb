package server

import (
	"bytes"
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
		`{"prompt":"a","frequency_penalty":0.5,"presence_penalty":-1,"repetition_penalty":1.3,"logit_bias":{"104":-100,"300":100}}`,
		`{"prompt":"a","frequency_penalty":"abc","logit_bias":{"05":1}}`,
		`{"prompt":"a","logit_bias":{"1":1e400},"repetition_penalty":-0}`,
		`{"prompt":"a","response_format":{"type":"text"},"best_of":1,"suffix":null,"user":"u","metadata":{"k":"v"}}`,
		`{"prompt":"a","best_of":3,"stream":true,"stream_options":{"include_obfuscation":false}}`,
		`{"prompt":"a","foo":1,"min_tokens":0,"skip_special_tokens":true}`,
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
		`{"messages":[{"role":"user","content":"x"}],"temperature":0,"frequency_penalty":2,"logit_bias":{"120":-100}}`,
		`{"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function"}],"tool_choice":"auto","parallel_tool_calls":true}`,
		`{"messages":[{"role":"user","content":"x"}],"response_format":{"type":"json_object"},"store":false,"service_tier":"auto"}`,
		`{"messages":[{"role":"user","content":"x"}],"repetition_penalty":1e-9,"presence_penalty":null,"logit_bias":null}`,
	} {
		f.Add([]byte(s))
	}
	env := fuzzEnv(f)
	f.Fuzz(func(t *testing.T, body []byte) {
		fuzzBody(t, env, "/v1/chat/completions", body)
	})
}

func FuzzGenerateBody(f *testing.F) {
	for _, s := range []string{
		`{"text":"Hi"}`,
		`{"input_ids":[1,2,3],"sampling_params":{"max_new_tokens":4,"temperature":0,"stop":["EN","."],"stop_token_ids":[5],"n":2},"stream":true}`,
		`{"text":"abc","return_logprob":true,"logprob_start_len":0,"top_logprobs_num":3,"return_text_in_logprobs":true}`,
		`{"text":"abc","return_logprob":true,"logprob_start_len":2,"sampling_params":{"max_new_tokens":0}}`,
		`{"text":"x","sampling_params":{"top_p":0.5,"top_k":-1,"min_p":0.1,"seed":-3,"ignore_eos":true}}`,
		`{"text":"x","sampler":"greedy","sampler_params":{"a":[1,{"b":null}]}}`,
		`{"text":"x","text":"y"}`, `{"text":"x","rid":1}`, `{"input_ids":[[1]]}`, `[`, `{}`,
		`{"text":"x","sampling_params":{"frequency_penalty":1,"presence_penalty":0.5,"repetition_penalty":1.1,"logit_bias":{"7":-100}}}`,
		`{"text":"x","sampling_params":{"min_new_tokens":0,"skip_special_tokens":true,"json_schema":null,"regex":"a+"}}`,
		`{"text":"x","rid":null,"log_metrics":true,"sampling_params":{"logit_bias":{"x":1}}}`,
	} {
		f.Add([]byte(s))
	}
	env := fuzzEnv(f)
	f.Fuzz(func(t *testing.T, body []byte) {
		fuzzBody(t, env, "/generate", body)
	})
}

// FuzzCheckJSON compares the duplicate-key check with a reference: a
// valid body passes exactly when re-encoding its generic decoding loses no
// key, i.e. when no object repeats a key.
func FuzzCheckJSON(f *testing.F) {
	for _, s := range []string{`{"a":1,"b":{"a":2}}`, `{"a":1,"a":2}`, `[{"x":[{"y":1,"y":2}]}]`, `{"":1,"":2}`, `"s"`, `{"a":{"b":1},"c":{"b":1}}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		if !json.Valid(body) {
			return
		}
		err := checkJSON(body)
		dup := hasDuplicateKey(t, body)
		deep := depth(body) > maxJSONDepth
		if (err != nil) != (dup || deep) {
			t.Fatalf("checkJSON(%q) = %v; duplicate %v, too deep %v", body, err, dup, deep)
		}
	})
}

// hasDuplicateKey counts every object key in body with a plain scan of the
// decoded value tree against the raw key count: a repeated key is lost in
// the decoded map.
func hasDuplicateKey(t *testing.T, body []byte) bool {
	// UseNumber: valid JSON such as 1e700 overflows float64.
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("valid JSON did not decode: %v", err)
	}
	return rawKeys(json.RawMessage(body)) != treeKeys(v)
}

func treeKeys(v any) int {
	n := 0
	switch x := v.(type) {
	case map[string]any:
		n += len(x)
		for _, e := range x {
			n += treeKeys(e)
		}
	case []any:
		for _, e := range x {
			n += treeKeys(e)
		}
	}
	return n
}

// rawKeys counts keys as written, duplicates included, by decoding objects
// into ordered key/value pairs.
func rawKeys(raw json.RawMessage) int {
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	n := 0
	var walk func()
	walk = func() {
		tok, err := dec.Token()
		if err != nil {
			return
		}
		switch tok {
		case json.Delim('{'):
			for dec.More() {
				if _, err := dec.Token(); err != nil {
					return
				}
				n++
				walk()
			}
			_, _ = dec.Token()
		case json.Delim('['):
			for dec.More() {
				walk()
			}
			_, _ = dec.Token()
		}
	}
	walk()
	return n
}

func depth(body []byte) int {
	d, best := 0, 0
	inStr, esc := false, false
	for _, c := range body {
		switch {
		case esc:
			esc = false
		case inStr && c == '\\':
			esc = true
		case c == '"':
			inStr = !inStr
		case !inStr && (c == '{' || c == '['):
			d++
			best = max(best, d)
		case !inStr && (c == '}' || c == ']'):
			d--
		}
	}
	return best
}
