package server

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/kvhost/kvhost/host/sampling"
)

// body builds a request body for route with one extra field (raw JSON
// value); /generate's sampling_params fields go inside sampling_params.
func bodyWith(scope fieldScope, field, value string) (path, body string) {
	switch scope {
	case inCompletions:
		return "/v1/completions", fmt.Sprintf(`{"prompt":"a","%s":%s}`, field, value)
	case inChat:
		return "/v1/chat/completions", fmt.Sprintf(`{"messages":[{"role":"user","content":"x"}],"%s":%s}`, field, value)
	case inGenerate:
		return "/generate", fmt.Sprintf(`{"text":"a","%s":%s}`, field, value)
	case inSamplingParams:
		return "/generate", fmt.Sprintf(`{"text":"a","sampling_params":{"%s":%s}}`, field, value)
	case inStreamOptions:
		return "/v1/completions", fmt.Sprintf(`{"prompt":"a","stream":true,"stream_options":{"%s":%s}}`, field, value)
	}
	panic("scope")
}

// TestRequestFieldErrors: the exact 400 bodies for the new sampling fields
// and for fields kvhost does not implement.
func TestRequestFieldErrors(t *testing.T) {
	env := newEnv(t)
	chat := func(extra string) string { return `{"messages":[{"role":"user","content":"x"}],` + extra + `}` }
	for _, tc := range []struct {
		path, body, want string
	}{
		{"/v1/completions", `{"prompt":"a","frequency_penalty":"abc"}`,
			`{"error":{"message":"invalid frequency_penalty: expected a number, got string","type":"invalid_request_error","param":"frequency_penalty","code":null}}`},
		{"/v1/completions", `{"prompt":"a","frequency_penalty":2.5}`,
			`{"error":{"message":"invalid frequency_penalty: 2.5 is out of range [-2, 2]","type":"invalid_request_error","param":"frequency_penalty","code":null}}`},
		{"/v1/chat/completions", chat(`"presence_penalty":-2.5`),
			`{"error":{"message":"invalid presence_penalty: -2.5 is out of range [-2, 2]","type":"invalid_request_error","param":"presence_penalty","code":null}}`},
		{"/v1/completions", `{"prompt":"a","repetition_penalty":0}`,
			`{"error":{"message":"invalid repetition_penalty: 0 is out of range [0.01, 10]","type":"invalid_request_error","param":"repetition_penalty","code":null}}`},
		{"/v1/completions", `{"prompt":"a","repetition_penalty":true}`,
			`{"error":{"message":"invalid repetition_penalty: expected a number, got bool","type":"invalid_request_error","param":"repetition_penalty","code":null}}`},
		{"/v1/completions", `{"prompt":"a","temperature":3}`,
			`{"error":{"message":"invalid temperature: 3 is out of range [0, 2] (0 is greedy)","type":"invalid_request_error","param":"temperature","code":null}}`},
		{"/v1/chat/completions", chat(`"logit_bias":{"50256":-101}`),
			`{"error":{"message":"invalid logit_bias: token 50256: bias -101 is out of range [-100, 100]","type":"invalid_request_error","param":"logit_bias","code":null}}`},
		{"/v1/chat/completions", chat(`"logit_bias":{"abc":1}`),
			`{"error":{"message":"invalid logit_bias: key \"abc\" is not a token id (a decimal integer in [0, 2147483647])","type":"invalid_request_error","param":"logit_bias","code":null}}`},
		{"/v1/completions", `{"prompt":"a","logit_bias":"x"}`,
			`{"error":{"message":"invalid logit_bias: expected an object mapping token ids to biases, like {\"50256\": -100}","type":"invalid_request_error","param":"logit_bias","code":null}}`},
		{"/v1/completions", `{"prompt":"a","logit_bias":` + manyBias(301) + `}`,
			`{"error":{"message":"invalid logit_bias: 301 entries given, at most 300 are allowed","type":"invalid_request_error","param":"logit_bias","code":null}}`},
		{"/v1/chat/completions", chat(`"functions":[{"name":"f"}]`),
			`{"error":{"message":"invalid functions: kvhost does not support functions yet (function calling); omit it or send null","type":"invalid_request_error","param":"functions","code":"unsupported_parameter"}}`},
		{"/v1/chat/completions", chat(`"reasoning_effort":"high"`),
			`{"error":{"message":"invalid reasoning_effort: this model's chat template has no reasoning effort; omit reasoning_effort","type":"invalid_request_error","param":"reasoning_effort","code":null}}`},
		{"/v1/chat/completions", chat(`"separate_reasoning":false`),
			`{"error":{"message":"invalid separate_reasoning: separate_reasoning false applies to models whose reasoning kvhost reads (harmony: gpt-oss); this model's output is not split, omit it or send true","type":"invalid_request_error","param":"separate_reasoning","code":null}}`},
		{"/v1/chat/completions", chat(`"stream_reasoning":false`),
			`{"error":{"message":"invalid stream_reasoning: stream_reasoning false applies to models whose reasoning kvhost reads (harmony: gpt-oss); this model's output is not split, omit it or send true","type":"invalid_request_error","param":"stream_reasoning","code":null}}`},
		{"/v1/chat/completions", chat(`"verbosity":"high"`),
			`{"error":{"message":"invalid verbosity: kvhost does not support verbosity yet (output verbosity); omit it or send null or \"medium\"","type":"invalid_request_error","param":"verbosity","code":"unsupported_parameter"}}`},
		{"/v1/completions", `{"prompt":"a","best_of":3}`,
			`{"error":{"message":"invalid best_of: kvhost does not support best_of yet (best-of-n ranking); omit it or send null or 1","type":"invalid_request_error","param":"best_of","code":"unsupported_parameter"}}`},
		{"/v1/chat/completions", chat(`"store":true`),
			`{"error":{"message":"invalid store: kvhost does not support store yet (storing completions); omit it or send null or false","type":"invalid_request_error","param":"store","code":"unsupported_parameter"}}`},
		{"/v1/completions", `{"prompt":"a","min_tokens":4}`,
			`{"error":{"message":"invalid min_tokens: kvhost does not support min_tokens yet (a minimum length: end-of-sequence suppression); omit it or send null or 0","type":"invalid_request_error","param":"min_tokens","code":"unsupported_parameter"}}`},
		{"/v1/completions", `{"prompt":"a","stream":true,"stream_options":{"include_usage":true,"include_obfuscation":true}}`,
			`{"error":{"message":"invalid stream_options.include_obfuscation: kvhost does not support stream_options.include_obfuscation yet (stream obfuscation padding); omit it or send null or false","type":"invalid_request_error","param":"stream_options.include_obfuscation","code":"unsupported_parameter"}}`},
		{"/generate", `{"text":"a","sampling_params":{"structural_tag":"{}"}}`,
			`{"error":{"message":"invalid sampling_params.structural_tag: kvhost does not support sampling_params.structural_tag yet (structured output); omit it or send null","type":"invalid_request_error","param":"sampling_params.structural_tag","code":"unsupported_parameter"}}`},
		{"/generate", `{"text":"a","sampling_params":{"frequency_penalty":"abc"}}`,
			`{"error":{"message":"invalid sampling_params.frequency_penalty: expected a number, got string","type":"invalid_request_error","param":"sampling_params.frequency_penalty","code":null}}`},
		{"/generate", `{"text":"a","sampling_params":{"logit_bias":{"1":1000}}}`,
			`{"error":{"message":"invalid sampling_params.logit_bias: token 1: bias 1000 is out of range [-100, 100]","type":"invalid_request_error","param":"sampling_params.logit_bias","code":null}}`},
		{"/v1/completions", `{"prompt":"a","foo":1}`,
			`{"error":{"message":"invalid foo: unknown field \"foo\" (known: ebnf, echo, frequency_penalty, guided_choice, guided_grammar, guided_json, guided_regex, ignore_eos, json_schema, logit_bias, logprobs, max_tokens, metadata, min_p, model, n, presence_penalty, prompt, prompt_cache_key, regex, repetition_penalty, response_format, safety_identifier, sampler, sampler_params, seed, stop, stop_token_ids, stream, stream_options, structured_outputs, temperature, top_k, top_p, user)","type":"invalid_request_error","param":"foo","code":"unknown_parameter"}}`},
	} {
		rec := env.do(t, http.MethodPost, tc.path, tc.body)
		if got := strings.TrimSpace(rec.Body.String()); rec.Code != 400 || got != tc.want {
			t.Errorf("%s %.80s:\n got %d %s\nwant 400 %s", tc.path, tc.body, rec.Code, got, tc.want)
		}
	}
	if n := len(env.eng.requests()); n != 0 {
		t.Errorf("%d refused requests reached the engine", n)
	}
}

// TestUnsupportedFieldTable: every row of the table is refused with a
// value that asks for something, and accepted with null and with each of
// its neutral values, on every route it names; informational fields are
// accepted with any value.
func TestUnsupportedFieldTable(t *testing.T) {
	env := newEnv(t)
	scopes := []fieldScope{inCompletions, inChat, inGenerate, inSamplingParams, inStreamOptions}
	for _, f := range unsupportedFields {
		for _, sc := range scopes {
			if f.scope&sc == 0 {
				continue
			}
			param := f.name
			switch sc {
			case inSamplingParams:
				param = "sampling_params." + f.name
			case inStreamOptions:
				param = "stream_options." + f.name
			}
			path, body := bodyWith(sc, f.name, `12345`)
			rec := env.do(t, http.MethodPost, path, body)
			e := decode[wireError](t, rec.Body.Bytes())
			if rec.Code != 400 || e.Error.Param == nil || *e.Error.Param != param || e.Error.Code == nil || *e.Error.Code != "unsupported_parameter" ||
				!strings.Contains(e.Error.Message, "kvhost does not support "+param+" yet") {
				t.Errorf("%s %s: %d %s", path, body, rec.Code, rec.Body)
			}
			for _, v := range append([]string{"null"}, f.neutral...) {
				path, body := bodyWith(sc, f.name, v)
				if rec := env.do(t, http.MethodPost, path, body); rec.Code != 200 {
					t.Errorf("%s %s (a neutral value): %d %s", path, body, rec.Code, rec.Body)
				}
			}
		}
	}
	for _, f := range informationalFields {
		for _, sc := range scopes {
			if f.scope&sc == 0 {
				continue
			}
			path, body := bodyWith(sc, f.name, `{"any":["thing"]}`)
			if rec := env.do(t, http.MethodPost, path, body); rec.Code != 200 {
				t.Errorf("%s %s (informational): %d %s", path, body, rec.Code, rec.Body)
			}
		}
	}
}

// TestSamplingFieldsReachTheEngine: penalties and logit_bias, as each route
// spells them, arrive in the engine request.
func TestSamplingFieldsReachTheEngine(t *testing.T) {
	env := newEnv(t)
	want := sampling.Request{Temperature: 0.5, FrequencyPenalty: 0.5, PresencePenalty: -0.25, RepetitionPenalty: 1.5,
		LogitBias: []sampling.TokenBias{{Token: 7, Bias: -100}, {Token: 300, Bias: 2.5}}}
	fields := `"temperature":0.5,"frequency_penalty":0.5,"presence_penalty":-0.25,"repetition_penalty":1.5,"logit_bias":{"300":2.5,"7":-100}`
	for _, tc := range []struct{ path, body string }{
		{"/v1/completions", `{"prompt":"a",` + fields + `}`},
		{"/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}],` + fields + `}`},
		{"/generate", `{"text":"a","sampling_params":{` + fields + `}}`},
	} {
		if rec := env.do(t, http.MethodPost, tc.path, tc.body); rec.Code != 200 {
			t.Fatalf("%s: %d %s", tc.path, rec.Code, rec.Body)
		}
	}
	for i, r := range env.eng.requests() {
		if fmt.Sprintf("%+v", r.Sampling) != fmt.Sprintf("%+v", want) {
			t.Errorf("request %d: sampling %+v, want %+v", i, r.Sampling, want)
		}
	}
}

func manyBias(n int) string {
	var b strings.Builder
	b.WriteByte('{')
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `"%d":1`, i)
	}
	b.WriteByte('}')
	return b.String()
}
