package web

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/chromedp/chromedp"
)

// chatFake answers /v1/chat/completions as kvhost streams a reply with a
// tool call (name first, then the arguments), and records the bodies.
type chatFake struct {
	mu     sync.Mutex
	bodies []map[string]any
}

func (c *chatFake) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var body map[string]any
	b, _ := io.ReadAll(r.Body)
	if err := json.Unmarshal(b, &body); err != nil {
		http.Error(w, err.Error(), 400)
		return
	}
	c.mu.Lock()
	c.bodies = append(c.bodies, body)
	c.mu.Unlock()
	w.Header().Set("Content-Type", "text/event-stream")
	send := func(v string) { fmt.Fprintf(w, "data: %s\n\n", v); w.(http.Flusher).Flush() }
	send(`{"choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}`)
	if _, ok := body["tools"]; ok {
		send(`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_abc","type":"function","function":{"name":"get_weather","arguments":""}}]},"finish_reason":null}]}`)
		send(`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"city\": \"Oslo\"}"}}]},"finish_reason":null}]}`)
		send(`{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}`)
	} else {
		send(`{"choices":[{"index":0,"delta":{"content":"{\"name\": \"Ada\","},"finish_reason":null}]}`)
		send(`{"choices":[{"index":0,"delta":{"content":" \"age\": 36}"},"finish_reason":null}]}`)
		send(`{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`)
	}
	send("[DONE]")
}

// TestE2EStructuredChat: the playground's chat card sends the schema box
// as response_format and the tools box with tool_choice, shows streamed
// content, and shows the tool call assembled from its deltas.
func TestE2EStructuredChat(t *testing.T) {
	p := openPage(t)
	fake := &chatFake{}
	mux := http.NewServeMux()
	mux.Handle("POST /v1/chat/completions", fake)
	mux.Handle("/", p.host.handler())
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	p.url = srv.URL
	p.do("load", chromedp.Navigate(p.url+"/#playground"), chromedp.WaitVisible(chromedp.CSS(`#chat-card`)))

	p.do("bad schema", setValue(`#chat-schema`, `{"type":`), setValue(`#chat-input`, "hi"),
		chromedp.Click(chromedp.CSS(`#chat-send`)))
	p.waitJS("schema error shown", `document.getElementById('chat-status').textContent.startsWith('JSON schema:')`)

	p.do("schema reply", setValue(`#chat-schema`, `{"type":"object","properties":{"name":{"type":"string"}}}`),
		setValue(`#chat-input`, "Who?"), chromedp.Click(chromedp.CSS(`#chat-send`)))
	p.waitJS("reply shown", `document.querySelector('.chat-assistant')?.dataset.finish === 'stop'`)
	if got := eval[string](p, `document.querySelector('.chat-assistant .chat-content').textContent`); got != `{"name": "Ada", "age": 36}` {
		t.Fatalf("reply %q", got)
	}

	p.do("tool call", setValue(`#chat-schema`, ``),
		setValue(`#chat-tools`, `[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object"}}}]`),
		setValue(`#chat-tool-choice`, "required"),
		setValue(`#chat-input`, "Weather?"), chromedp.Click(chromedp.CSS(`#chat-send`)))
	p.waitJS("tool call shown", `!!document.querySelector('.chat-call[data-name="get_weather"]')`)
	if got := eval[string](p, `document.querySelector('.chat-call pre').textContent`); got != "{\n  \"city\": \"Oslo\"\n}" {
		t.Fatalf("arguments shown %q", got)
	}
	p.shot("structured-chat")

	fake.mu.Lock()
	defer fake.mu.Unlock()
	if len(fake.bodies) != 2 {
		t.Fatalf("%d requests, want 2 (the bad schema must not be sent)", len(fake.bodies))
	}
	rf, _ := fake.bodies[0]["response_format"].(map[string]any)
	if rf["type"] != "json_schema" {
		t.Fatalf("first request response_format %v", fake.bodies[0]["response_format"])
	}
	second := fake.bodies[1]
	if second["tool_choice"] != "required" || second["response_format"] != nil {
		t.Fatalf("second request %v", second)
	}
	// The conversation so far goes back: user, assistant, user.
	if msgs, _ := second["messages"].([]any); len(msgs) != 3 {
		t.Fatalf("second request carries %d messages", len(msgs))
	}
}
