package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvhost/kvhost/host/boot"
	check "github.com/kvhost/kvhost/host/constraint/constrainttest"
	"github.com/kvhost/kvhost/host/model/synth"
	"github.com/kvhost/kvhost/host/server"
)

var tinyOnce struct {
	sync.Once
	path string
	err  error
}

// tinyModel writes gen-model's tiny preset (random weights) once.
func tinyModel(t testing.TB) string {
	tinyOnce.Do(func() {
		spec, err := synth.Preset("tiny", "f32")
		if err != nil {
			tinyOnce.err = err
			return
		}
		dir, err := os.MkdirTemp("", "kvhost-structured")
		if err != nil {
			tinyOnce.err = err
			return
		}
		var buf bytes.Buffer
		if tinyOnce.err = synth.Write(&buf, spec, nil); tinyOnce.err == nil {
			tinyOnce.path = filepath.Join(dir, "tiny.gguf")
			tinyOnce.err = os.WriteFile(tinyOnce.path, buf.Bytes(), 0o644)
		}
	})
	if tinyOnce.err != nil {
		t.Fatal(tinyOnce.err)
	}
	return tinyOnce.path
}

// constrainedServer serves model with output constraints, as serve does.
func constrainedServer(t testing.TB, model string) *httptest.Server {
	t.Helper()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	s, err := boot.Build(boot.Config{Model: model, Device: "cpu", DeviceMemory: 512 << 20, Threads: 2,
		MaxRunning: 32, MaxQueue: 64, ChunkedPrefill: 256, PageSize: 16, Constraints: constraintRunner(context.Background(), nil, log)}, log, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(server.New(backend{s}, server.Options{Logger: log, MaxN: 64}))
	t.Cleanup(func() {
		ts.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		s.Close(ctx)
	})
	return ts
}

func postJSON(t testing.TB, url string, body any) (int, []byte) {
	t.Helper()
	b, _ := json.Marshal(body)
	resp, err := http.Post(url, "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, out
}

type chatReply struct {
	Choices []struct {
		Message struct {
			Content   *string `json:"content"`
			ToolCalls []struct {
				ID       string `json:"id"`
				Type     string `json:"type"`
				Function struct {
					Name      string `json:"name"`
					Arguments string `json:"arguments"`
				} `json:"function"`
			} `json:"tool_calls"`
		} `json:"message"`
		FinishReason string `json:"finish_reason"`
	} `json:"choices"`
}

// TestStructuredOutputHTTP drives each structured-output field through
// the HTTP API on a random-weight model at temperature 1: every output
// satisfies its constraint.
func TestStructuredOutputHTTP(t *testing.T) {
	ts := constrainedServer(t, tinyModel(t))
	doc, err := os.ReadFile("../../constraint/testdata/schemas/20-complex.json")
	if err != nil {
		t.Fatal(err)
	}
	chk, err := check.NewSchema(doc)
	if err != nil {
		t.Fatal(err)
	}
	msgs := []map[string]any{{"role": "user", "content": "Describe a paper."}}
	code, body := postJSON(t, ts.URL+"/v1/chat/completions", map[string]any{"messages": msgs, "n": 6, "temperature": 1, "max_tokens": 300,
		"response_format": map[string]any{"type": "json_schema", "json_schema": map[string]any{"name": "paper", "strict": true, "schema": json.RawMessage(doc)}}})
	if code != 200 {
		t.Fatalf("%d %s", code, body)
	}
	var r chatReply
	if err := json.Unmarshal(body, &r); err != nil || len(r.Choices) != 6 {
		t.Fatalf("%v %s", err, body)
	}
	for i, c := range r.Choices {
		if err := chk.Check(*c.Message.Content); err != nil {
			t.Errorf("choice %d (%s) %q: %v", i, c.FinishReason, *c.Message.Content, err)
		}
	}
	// Regex, choice and json_object on completions; ebnf on /generate.
	re := `[a-z]{2,6}-\d{3}( ok)?`
	code, body = postJSON(t, ts.URL+"/v1/completions", map[string]any{"prompt": "Code:", "n": 5, "temperature": 1, "max_tokens": 40, "guided_regex": re})
	var cr struct {
		Choices []struct {
			Text string `json:"text"`
		} `json:"choices"`
	}
	if json.Unmarshal(body, &cr); code != 200 || len(cr.Choices) != 5 {
		t.Fatalf("regex: %d %s", code, body)
	}
	for _, c := range cr.Choices {
		if !regexp.MustCompile(`^(?:` + re + `)$`).MatchString(c.Text) {
			t.Errorf("regex output %q", c.Text)
		}
	}
	code, body = postJSON(t, ts.URL+"/v1/completions", map[string]any{"prompt": "Pick:", "temperature": 1, "max_tokens": 20,
		"structured_outputs": map[string]any{"choice": []string{"left", "right", "up"}}})
	if json.Unmarshal(body, &cr); code != 200 || (cr.Choices[0].Text != "left" && cr.Choices[0].Text != "right" && cr.Choices[0].Text != "up") {
		t.Fatalf("choice: %d %s", code, body)
	}
	code, body = postJSON(t, ts.URL+"/v1/chat/completions", map[string]any{"messages": msgs, "temperature": 1, "max_tokens": 60,
		"response_format": map[string]any{"type": "json_object"}})
	if json.Unmarshal(body, &r); code != 200 || !json.Valid([]byte(strings.TrimSpace(*r.Choices[0].Message.Content))) {
		t.Fatalf("json_object: %d %s", code, body)
	}
	code, body = postJSON(t, ts.URL+"/generate", map[string]any{"text": "Sum:", "sampling_params": map[string]any{"temperature": 1, "max_new_tokens": 30,
		"ebnf": "root ::= num (\"+\" num)*\nnum ::= [1-9] [0-9]?\n"}})
	var gr struct {
		Text string `json:"text"`
	}
	if json.Unmarshal(body, &gr); code != 200 || !regexp.MustCompile(`^[1-9][0-9]?(\+[1-9][0-9]?)*$`).MatchString(gr.Text) {
		t.Fatalf("ebnf: %d %s", code, body)
	}
	// A schema kvhost cannot enforce is a 400 naming the keyword.
	code, body = postJSON(t, ts.URL+"/v1/chat/completions", map[string]any{"messages": msgs,
		"guided_json": map[string]any{"type": "array", "uniqueItems": true}})
	if code != 400 || !strings.Contains(string(body), "uniqueItems") || !strings.Contains(string(body), `"param":"guided_json"`) {
		t.Fatalf("unsupported keyword: %d %s", code, body)
	}
}

var weatherTools = []map[string]any{
	{"type": "function", "function": map[string]any{"name": "get_weather", "description": "Current weather",
		"parameters": map[string]any{"type": "object", "properties": map[string]any{
			"city": map[string]any{"type": "string", "maxLength": 12}, "unit": map[string]any{"enum": []string{"C", "F"}}},
			"required": []string{"city", "unit"}, "additionalProperties": false}}},
	{"type": "function", "function": map[string]any{"name": "get_time", "parameters": map[string]any{"type": "object",
		"properties": map[string]any{"zone": map[string]any{"type": "string", "format": "date"}}, "required": []string{"zone"}}}},
}

// TestToolChoiceRequiredHTTP: with tool_choice "required" (and a named
// function) a random-weight model always answers with calls whose
// arguments validate against the tool's parameters, streaming or not.
func TestToolChoiceRequiredHTTP(t *testing.T) {
	ts := constrainedServer(t, tinyModel(t))
	params := map[string]*check.Schema{}
	for _, tl := range weatherTools {
		fn := tl["function"].(map[string]any)
		doc, _ := json.Marshal(fn["parameters"])
		s, err := check.NewSchema(doc)
		if err != nil {
			t.Fatal(err)
		}
		params[fn["name"].(string)] = s
	}
	msgs := []map[string]any{{"role": "user", "content": "Weather in Oslo?"}}
	for _, choice := range []any{"required", map[string]any{"type": "function", "function": map[string]any{"name": "get_time"}}} {
		code, body := postJSON(t, ts.URL+"/v1/chat/completions", map[string]any{"messages": msgs, "tools": weatherTools, "tool_choice": choice,
			"n": 4, "temperature": 1, "max_tokens": 200})
		var r chatReply
		if json.Unmarshal(body, &r); code != 200 || len(r.Choices) != 4 {
			t.Fatalf("%v: %d %s", choice, code, body)
		}
		for i, c := range r.Choices {
			if len(c.Message.ToolCalls) == 0 {
				t.Fatalf("%v choice %d: no tool call: %s", choice, i, body)
			}
			for _, tc := range c.Message.ToolCalls {
				if _, named := choice.(map[string]any); named && tc.Function.Name != "get_time" {
					t.Errorf("named get_time, called %s", tc.Function.Name)
				}
				if err := params[tc.Function.Name].Check(tc.Function.Arguments); err != nil || !strings.HasPrefix(tc.ID, "call_") || tc.Type != "function" {
					t.Errorf("%v choice %d call %+v: %v", choice, i, tc, err)
				}
			}
		}
	}
	// Streaming: the deltas assemble into calls with valid arguments.
	b, _ := json.Marshal(map[string]any{"messages": msgs, "tools": weatherTools, "tool_choice": "required", "temperature": 1, "max_tokens": 200, "stream": true})
	resp, err := http.Post(ts.URL+"/v1/chat/completions", "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	type call struct{ id, name, args string }
	calls := map[int]*call{}
	finish := ""
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok || data == "[DONE]" {
			continue
		}
		var chunk struct {
			Choices []struct {
				Delta struct {
					ToolCalls []struct {
						Index    int    `json:"index"`
						ID       string `json:"id"`
						Function struct {
							Name      string `json:"name"`
							Arguments string `json:"arguments"`
						} `json:"function"`
					} `json:"tool_calls"`
				} `json:"delta"`
				FinishReason *string `json:"finish_reason"`
			} `json:"choices"`
		}
		if err := json.Unmarshal([]byte(data), &chunk); err != nil {
			t.Fatalf("%v: %s", err, data)
		}
		for _, c := range chunk.Choices {
			for _, d := range c.Delta.ToolCalls {
				if calls[d.Index] == nil {
					calls[d.Index] = &call{id: d.ID, name: d.Function.Name}
				}
				calls[d.Index].args += d.Function.Arguments
			}
			if c.FinishReason != nil {
				finish = *c.FinishReason
			}
		}
	}
	if len(calls) == 0 || finish != "tool_calls" {
		t.Fatalf("stream: %d calls, finish %q", len(calls), finish)
	}
	for i, c := range calls {
		if err := params[c.name].Check(c.args); err != nil || c.id == "" {
			t.Errorf("streamed call %d %+v: %v", i, c, err)
		}
	}
}
