package server

import (
	"encoding/json"
	"math"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/kvhost/kvhost/host/engine"
)

// wireGenerate is a /generate object as a client parses it.
type wireGenerate struct {
	Index     *int    `json:"index"`
	Text      string  `json:"text"`
	OutputIDs []int32 `json:"output_ids"`
	MetaInfo  struct {
		ID                  string              `json:"id"`
		PromptTokens        int                 `json:"prompt_tokens"`
		CompletionTokens    int                 `json:"completion_tokens"`
		FinishReason        map[string]any      `json:"finish_reason"`
		InputTokenLogprobs  [][]any             `json:"input_token_logprobs"`
		OutputTokenLogprobs [][]any             `json:"output_token_logprobs"`
		InputTopLogprobs    []json.RawMessage   `json:"input_top_logprobs"`
		OutputTopLogprobs   [][][]any           `json:"output_top_logprobs"`
		Raw                 map[string]struct{} `json:"-"`
	} `json:"meta_info"`
}

func TestGenerateText(t *testing.T) {
	env := newEnv(t)
	rec := env.do(t, http.MethodPost, "/generate",
		`{"text":"Hi","sampling_params":{"max_new_tokens":8,"temperature":0.5,"top_p":0.9,"top_k":40,"min_p":0.1,"seed":7,"stop_token_ids":[9],"ignore_eos":true}}`)
	if rec.Code != 200 {
		t.Fatalf("status %d: %s", rec.Code, rec.Body)
	}
	g := decode[wireGenerate](t, rec.Body.Bytes())
	if g.Text != "Hello" || !reflect.DeepEqual(g.OutputIDs, byteIDs("Hello")) || g.Index != nil {
		t.Errorf("output %+v", g)
	}
	m := g.MetaInfo
	if m.ID == "" || m.PromptTokens != 3 || m.CompletionTokens != 5 || m.FinishReason["type"] != "length" || m.FinishReason["length"] != 5.0 {
		t.Errorf("meta_info %+v", m)
	}
	if strings.Contains(rec.Body.String(), "logprobs") {
		t.Errorf("logprobs without return_logprob: %s", rec.Body)
	}
	seed := uint64(7)
	want := engine.Request{Prompt: []int32{tokBOS, 'H', 'i'}, MaxTokens: 8, StopTokens: []int32{9}, IgnoreEOS: true,
		Sampling: engine.SamplingParams{Temperature: 0.5, TopP: 0.9, TopK: 40, MinP: 0.1, Seed: &seed}}
	if got := env.eng.requests()[0]; !reflect.DeepEqual(got, want) {
		t.Errorf("engine request\n got %+v\nwant %+v", got, want)
	}
}

func TestGenerateDefaults(t *testing.T) {
	for _, tc := range []struct {
		cap, prompt, want int
	}{{0, 3, 128}, {50, 3, 50}, {0, 500, 12}} {
		env := newEnv(t, withOptions(func(o *Options) { o.MaxTokensCap = tc.cap }))
		ids, _ := json.Marshal(make([]int32, tc.prompt))
		rec := env.do(t, http.MethodPost, "/generate", `{"input_ids":`+string(ids)+`}`)
		if rec.Code != 200 {
			t.Fatalf("status %d: %s", rec.Code, rec.Body)
		}
		r := env.eng.requests()[0]
		if r.MaxTokens != tc.want || len(r.Prompt) != tc.prompt || r.Sampling.Temperature != 1 {
			t.Errorf("cap %d prompt %d: engine max_tokens %d temperature %v, want %d", tc.cap, tc.prompt, r.MaxTokens, r.Sampling.Temperature, tc.want)
		}
	}
}

func TestGenerateFinishReasons(t *testing.T) {
	env := newEnv(t, withScript(func(req engine.Request) []engine.Event {
		return events([]int32{tokHello, tokWorld, tokEOS}, "stop", len(req.Prompt))
	}))
	g := decode[wireGenerate](t, env.do(t, http.MethodPost, "/generate", `{"input_ids":[1,2]}`).Body.Bytes())
	if g.Text != "Hello world" || g.MetaInfo.FinishReason["type"] != "stop" || g.MetaInfo.FinishReason["matched"] != float64(tokEOS) ||
		!reflect.DeepEqual(g.OutputIDs, []int32{tokHello, tokWorld}) || g.MetaInfo.CompletionTokens != 3 {
		t.Errorf("EOS: %+v", g)
	}
	g = decode[wireGenerate](t, env.do(t, http.MethodPost, "/generate", `{"input_ids":[1,2],"sampling_params":{"stop":["lo w"]}}`).Body.Bytes())
	if g.Text != "Hel" || g.MetaInfo.FinishReason["matched"] != "lo w" || !reflect.DeepEqual(g.OutputIDs, []int32{tokHello}) {
		t.Errorf("stop string: %+v", g)
	}
}

func TestGenerateLogprobs(t *testing.T) {
	env := newEnv(t, withScript(func(req engine.Request) []engine.Event {
		return events(byteIDs("Hello")[:req.MaxTokens], "length", len(req.Prompt))
	}))
	rec := env.do(t, http.MethodPost, "/generate",
		`{"input_ids":[5,6,7,8],"return_logprob":true,"logprob_start_len":0,"top_logprobs_num":2,"return_text_in_logprobs":true,"sampling_params":{"max_new_tokens":2}}`)
	if rec.Code != 200 {
		t.Fatalf("status %d: %s", rec.Code, rec.Body)
	}
	r := env.eng.requests()[0]
	if !r.PromptLogprobs || r.PromptLogprobStart != 0 || r.PromptTopLogprobs != 2 || !r.Logprobs || r.TopLogprobs != 2 {
		t.Fatalf("engine request %+v", r)
	}
	m := decode[wireGenerate](t, rec.Body.Bytes()).MetaInfo
	// The first prompt token has no logprob; token k scores -k/100.
	wantIn := [][]any{{nil, 5.0, "\x05"}, {-0.01, 6.0, "\x06"}, {-0.02, 7.0, "\x07"}, {-0.03, 8.0, "\x08"}}
	if !approxEntries(m.InputTokenLogprobs, wantIn) {
		t.Errorf("input_token_logprobs %v, want %v", m.InputTokenLogprobs, wantIn)
	}
	wantOut := [][]any{{-0.1, 72.0, "H"}, {-0.2, 101.0, "e"}}
	if !approxEntries(m.OutputTokenLogprobs, wantOut) {
		t.Errorf("output_token_logprobs %v", m.OutputTokenLogprobs)
	}
	if len(m.InputTopLogprobs) != 4 || string(m.InputTopLogprobs[0]) != "null" {
		t.Fatalf("input_top_logprobs %s", rec.Body)
	}
	top1 := decode[[][]any](t, m.InputTopLogprobs[1])
	if !approxEntries(top1, [][]any{{-0.01, 6.0, "\x06"}, {-7.0, float64('z'), "z"}}) {
		t.Errorf("input top 1 %v", top1)
	}
	if len(m.OutputTopLogprobs) != 2 || !approxEntries(m.OutputTopLogprobs[1], [][]any{{-0.2, 101.0, "e"}, {-5.0, float64('z'), "z"}}) {
		t.Errorf("output_top_logprobs %v", m.OutputTopLogprobs)
	}

	// logprob_start_len 2, no text; max_new_tokens 0 only scores.
	rec = env.do(t, http.MethodPost, "/generate", `{"input_ids":[5,6,7,8],"return_logprob":true,"logprob_start_len":2,"sampling_params":{"max_new_tokens":0}}`)
	g := decode[wireGenerate](t, rec.Body.Bytes())
	if !approxEntries(g.MetaInfo.InputTokenLogprobs, [][]any{{-0.02, 7.0}, {-0.03, 8.0}}) || g.Text != "" || len(g.OutputIDs) != 0 ||
		g.MetaInfo.CompletionTokens != 0 || g.MetaInfo.FinishReason["type"] != "length" || strings.Contains(rec.Body.String(), "top_logprobs") {
		t.Errorf("scoring: %s", rec.Body)
	}
	if r := env.eng.requests()[1]; r.MaxTokens != 1 || r.PromptLogprobStart != 2 {
		t.Errorf("engine request %+v", r)
	}
}

// approxEntries compares logprob entries, numbers within 1e-6.
func approxEntries(got [][]any, want [][]any) bool {
	if len(got) != len(want) {
		return false
	}
	for i := range got {
		if len(got[i]) != len(want[i]) {
			return false
		}
		for j := range got[i] {
			g, gok := got[i][j].(float64)
			w, wok := want[i][j].(float64)
			switch {
			case gok && wok:
				if math.Abs(g-w) > 1e-6 {
					return false
				}
			case got[i][j] != want[i][j]:
				return false
			}
		}
	}
	return true
}

func TestGenerateStream(t *testing.T) {
	env := newEnv(t, withScript(scriptText("abcSTOPd", "length")))
	rec := env.do(t, http.MethodPost, "/generate", `{"text":"x","stream":true,"sampling_params":{"stop":"STOP"}}`)
	if rec.Code != 200 || rec.Header().Get("Content-Type") != "text/event-stream" {
		t.Fatalf("status %d: %s", rec.Code, rec.Body)
	}
	data := readSSE(t, rec.Body.String())
	prev := ""
	for i, d := range data {
		g := decode[wireGenerate](t, []byte(d))
		if !strings.HasPrefix(g.Text, prev) || strings.Contains(g.Text, "S") {
			t.Errorf("chunk %d text %q after %q", i, g.Text, prev)
		}
		prev = g.Text
		last := i == len(data)-1
		if (g.MetaInfo.FinishReason != nil) != last || len(g.OutputIDs) != len(g.Text) {
			t.Errorf("chunk %d: %+v", i, g)
		}
	}
	if prev != "abc" || len(data) != 4 {
		t.Errorf("final %q after %d chunks", prev, len(data))
	}
}

func TestGenerateN(t *testing.T) {
	env := newEnv(t, withChoiceScript(perChoice([]string{"one", "two!"}, "length")))
	rec := env.do(t, http.MethodPost, "/generate", `{"text":"x","sampling_params":{"n":2}}`)
	all := decode[[]wireGenerate](t, rec.Body.Bytes())
	if len(all) != 2 || *all[0].Index != 0 || all[0].Text != "one" || *all[1].Index != 1 || all[1].Text != "two!" ||
		all[1].MetaInfo.CompletionTokens != 4 || env.eng.requests()[0].N != 2 {
		t.Errorf("n=2: %s", rec.Body)
	}
	rec = env.do(t, http.MethodPost, "/generate", `{"text":"x","stream":true,"sampling_params":{"n":2}}`)
	final := map[int]string{}
	for _, d := range readSSE(t, rec.Body.String()) {
		g := decode[wireGenerate](t, []byte(d))
		final[*g.Index] = g.Text
	}
	if final[0] != "one" || final[1] != "two!" {
		t.Errorf("streamed n=2: %v", final)
	}
}

func TestGenerateBadBodies(t *testing.T) {
	tests := []struct {
		name, body, param, msg string
	}{
		{"unknown top field", `{"text":"a","rod":"x"}`, "rod", "unknown field"},
		{"unsupported top field", `{"text":"a","rid":"x"}`, "rid", "kvhost does not support rid yet"},
		{"unknown sampling field", `{"text":"a","sampling_params":{"frequency":1}}`, "sampling_params.frequency", "unknown field"},
		{"unsupported sampling field", `{"text":"a","sampling_params":{"min_new_tokens":2}}`, "sampling_params.min_new_tokens", "does not support sampling_params.min_new_tokens yet"},
		{"frequency_penalty", `{"text":"a","sampling_params":{"frequency_penalty":3}}`, "sampling_params.frequency_penalty", "3 is out of range [-2, 2]"},
		{"repetition_penalty", `{"text":"a","sampling_params":{"repetition_penalty":0}}`, "sampling_params.repetition_penalty", "0 is out of range [0.01, 10]"},
		{"logit_bias", `{"text":"a","sampling_params":{"logit_bias":{"5":101}}}`, "sampling_params.logit_bias", "token 5: bias 101 is out of range [-100, 100]"},
		{"logit_bias type", `{"text":"a","sampling_params":{"logit_bias":[1]}}`, "sampling_params.logit_bias", "expected an object"},
		{"neither prompt", `{"sampling_params":{}}`, "text", "exactly one"},
		{"both prompts", `{"text":"a","input_ids":[1]}`, "text", "exactly one"},
		{"text batch", `{"text":["a"]}`, "text", "string"},
		{"input_ids negative", `{"input_ids":[1,-1]}`, "input_ids", "token id 1"},
		{"input_ids empty", `{"input_ids":[]}`, "input_ids", "empty"},
		{"temperature", `{"text":"a","sampling_params":{"temperature":-1}}`, "sampling_params.temperature", "out of range"},
		{"temperature type", `{"text":"a","sampling_params":{"temperature":"x"}}`, "sampling_params.temperature", "number"},
		{"top_p", `{"text":"a","sampling_params":{"top_p":2}}`, "sampling_params.top_p", "out of range"},
		{"n", `{"text":"a","sampling_params":{"n":0}}`, "sampling_params.n", "out of range"},
		{"max_new_tokens", `{"text":"a","sampling_params":{"max_new_tokens":-1}}`, "sampling_params.max_new_tokens", ">= 1"},
		{"stop", `{"text":"a","sampling_params":{"stop":[1]}}`, "sampling_params.stop", "string"},
		{"logprob_start_len", `{"text":"a","return_logprob":true,"logprob_start_len":3}`, "logprob_start_len", "out of range [-1, 2]"},
		{"logprob_start_len -2", `{"text":"a","logprob_start_len":-2}`, "logprob_start_len", "out of range"},
		{"top_logprobs_num", `{"text":"a","return_logprob":true,"top_logprobs_num":21}`, "top_logprobs_num", "out of range [0, 20]"},
		{"sampling_params type", `{"text":"a","sampling_params":[]}`, "sampling_params", "object"},
		{"duplicate", `{"text":"a","text":"b"}`, "text", "more than once"},
		{"sampler", `{"text":"a","sampler":"x"}`, "sampler", "no selectable"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			env := newEnv(t)
			rec := env.do(t, http.MethodPost, "/generate", tc.body)
			if rec.Code != 400 {
				t.Fatalf("status %d: %s", rec.Code, rec.Body)
			}
			e := decode[wireError](t, rec.Body.Bytes())
			if e.Error.Param == nil || *e.Error.Param != tc.param || !strings.Contains(e.Error.Message, tc.msg) {
				t.Errorf("error %s; want param %q, message with %q", rec.Body, tc.param, tc.msg)
			}
			if len(env.eng.requests()) != 0 {
				t.Error("a refused request reached the engine")
			}
		})
	}
}
