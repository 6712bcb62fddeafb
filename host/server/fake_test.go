package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvhost/kvhost/host/engine"
	"github.com/kvhost/kvhost/host/model/chat"
	"github.com/kvhost/kvhost/host/model/harmony"
)

// Fake vocabulary: ids 0..255 are single bytes; then specials and a few
// multi-byte "word" tokens.
const (
	tokBOS   int32 = 256
	tokEOS   int32 = 257
	tokHello int32 = 300 // "Hello"
	tokWorld int32 = 301 // " world"
	tokSmile int32 = 302 // "😀"
)

var fakeWords = map[int32]string{
	tokBOS: "<s>", tokEOS: "</s>", tokHello: "Hello", tokWorld: " world", tokSmile: "😀",
}

// Harmony's special tokens (gpt-oss) are control tokens 310.. in the
// order of harmony.Tokens: no bytes of their own; <|return|> and <|call|>
// end generation.
const tokHarmony int32 = 310

func harmonyID(text string) (int32, bool) {
	for k, m := range harmony.Tokens {
		if m == text {
			return tokHarmony + int32(k), true
		}
	}
	return 0, false
}

// fakeTokenizer is deterministic and byte-level: Encode maps "<s>" and "</s>"
// to their special ids and every other byte to itself.
type fakeTokenizer struct{}

func (fakeTokenizer) Encode(text string, addSpecial bool) ([]int32, error) {
	var ids []int32
	if addSpecial {
		ids = append(ids, tokBOS)
	}
	for i := 0; i < len(text); {
		switch {
		case strings.HasPrefix(text[i:], "</s>"):
			ids, i = append(ids, tokEOS), i+4
		case strings.HasPrefix(text[i:], "<s>"):
			ids, i = append(ids, tokBOS), i+3
		case strings.HasPrefix(text[i:], "<|") && strings.Contains(text[i:], "|>"):
			m := text[i : i+strings.Index(text[i:], "|>")+2]
			if id, ok := harmonyID(m); ok {
				ids, i = append(ids, id), i+len(m)
				continue
			}
			ids, i = append(ids, int32(text[i])), i+1
		default:
			ids, i = append(ids, int32(text[i])), i+1
		}
	}
	return ids, nil
}

func (t fakeTokenizer) Decode(ids []int32) (string, error) {
	var b []byte
	for _, id := range ids {
		b = append(b, t.TokenBytes(id)...)
	}
	return string(b), nil
}

func (t fakeTokenizer) TokenText(id int32) string { return string(t.TokenBytes(id)) }

func (fakeTokenizer) TokenBytes(id int32) []byte {
	if id >= 0 && id < 256 {
		return []byte{byte(id)}
	}
	return []byte(fakeWords[id])
}

func (fakeTokenizer) EOG(id int32) bool {
	r, _ := harmonyID(harmony.Return)
	c, _ := harmonyID(harmony.Call)
	return id == tokEOS || id == r || id == c
}

// fakeEngine emits scripted events. It records every request and, when a
// request's context ends before its script is done, sends the request's
// index on interrupted. It honours the engine contract for N (each choice's
// script tagged with its Choice, the choices' events interleaved round-robin
// after choice 0's first) and for prompt logprobs (fakePromptLogprobs on
// choice 0's first event).
type fakeEngine struct {
	ctxLen int
	script func(req engine.Request) []engine.Event
	// choiceScript, when set, replaces script and may differ per choice.
	choiceScript func(req engine.Request, choice int) []engine.Event
	submitErr    error
	// blockAfter > 0: after that many events, wait for the context to end
	// (a generation that is still running when the client leaves).
	blockAfter int
	// delay is slept before each event (a slow model).
	delay time.Duration

	mu          sync.Mutex
	reqs        []engine.Request
	interrupted chan int
}

func (e *fakeEngine) Submit(ctx context.Context, req engine.Request) (*engine.Stream, error) {
	e.mu.Lock()
	idx := len(e.reqs)
	e.reqs = append(e.reqs, req)
	e.mu.Unlock()
	if e.submitErr != nil {
		return nil, e.submitErr
	}
	if req.MaxTokens < 1 {
		return nil, &engine.InvalidRequestError{Field: "max_tokens", Problem: "must be >= 1"}
	}
	if len(req.Prompt)+req.MaxTokens > e.ctxLen {
		return nil, &engine.InvalidRequestError{Field: "max_tokens",
			Problem: fmt.Sprintf("prompt (%d) + max_tokens (%d) exceeds the context (%d)", len(req.Prompt), req.MaxTokens, e.ctxLen)}
	}
	events := e.interleave(req)
	ch := make(chan engine.Event)
	go func() {
		defer close(ch)
		for i, ev := range events {
			if e.blockAfter > 0 && i == e.blockAfter {
				<-ctx.Done()
				e.interrupt(idx)
				return
			}
			if e.delay > 0 {
				time.Sleep(e.delay)
			}
			if ctx.Err() != nil {
				e.interrupt(idx)
				return
			}
			select {
			case ch <- ev:
			case <-ctx.Done():
				e.interrupt(idx)
				return
			}
		}
	}()
	return &engine.Stream{Events: ch}, nil
}

// interleave builds the event order of all choices of req.
func (e *fakeEngine) interleave(req engine.Request) []engine.Event {
	n := max(req.N, 1)
	per := make([][]engine.Event, n)
	for c := range n {
		if e.choiceScript != nil {
			per[c] = e.choiceScript(req, c)
		} else {
			per[c] = e.script(req)
		}
		for k := range per[c] {
			per[c][k].Choice += c // a script may set Choice to misroute on purpose
		}
	}
	if req.PromptLogprobs && len(per[0]) > 0 {
		per[0][0].Prompt = fakePromptLogprobs(req)
	}
	var out []engine.Event
	for k := 0; ; k++ {
		more := false
		for c := range n {
			if k < len(per[c]) {
				out = append(out, per[c][k])
				more = true
			}
		}
		if !more {
			return out
		}
	}
}

// fakePromptLogprobs scores prompt token k (k >= 1, k >= the start) as
// -k/100 with alternatives: the token itself, then 'z' at -7 and 'y' at -8,
// PromptTopLogprobs of them.
func fakePromptLogprobs(req engine.Request) []engine.PromptLogprob {
	var out []engine.PromptLogprob
	for k := max(1, req.PromptLogprobStart); k < len(req.Prompt); k++ {
		lp := -float32(k) / 100
		top := []engine.TokenLogprob{{Token: req.Prompt[k], Logprob: lp}, {Token: 'z', Logprob: -7}, {Token: 'y', Logprob: -8}}
		out = append(out, engine.PromptLogprob{Index: k, Token: req.Prompt[k], Logprob: lp, Top: top[:min(req.PromptTopLogprobs, 3)]})
	}
	return out
}

// interrupt records, without blocking, that request idx saw its context end.
func (e *fakeEngine) interrupt(idx int) {
	select {
	case e.interrupted <- idx:
	default:
	}
}

func (e *fakeEngine) requests() []engine.Request {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]engine.Request(nil), e.reqs...)
}

type fakeBackend struct {
	eng  *fakeEngine
	tmpl *chat.Template
}

func (b *fakeBackend) ModelName() string    { return "fake-model" }
func (b *fakeBackend) ContextLen() int      { return b.eng.ctxLen }
func (b *fakeBackend) Tokenizer() Tokenizer { return fakeTokenizer{} }
func (b *fakeBackend) Chat() *chat.Template { return b.tmpl }
func (b *fakeBackend) Submit(ctx context.Context, req engine.Request) (*engine.Stream, error) {
	return b.eng.Submit(ctx, req)
}

// events turns ids into token events with logprobs -(i+1)/10 and two
// alternatives, then a final event.
func events(ids []int32, reason string, promptLen int) []engine.Event {
	var evs []engine.Event
	for i, id := range ids {
		evs = append(evs, engine.Event{
			Token: id, Logprob: -float32(i+1) / 10,
			TopLogprobs: []engine.TokenLogprob{{Token: id, Logprob: -float32(i+1) / 10}, {Token: 'z', Logprob: -5}, {Token: 'y', Logprob: -6}},
		})
	}
	return append(evs, engine.Event{Done: true, FinishReason: reason, PromptTokens: promptLen, CompletionTokens: len(ids)})
}

func byteIDs(s string) []int32 {
	ids := make([]int32, len(s))
	for i := 0; i < len(s); i++ {
		ids[i] = int32(s[i])
	}
	return ids
}

// scriptText makes an engine that answers every request with text, one byte
// token each, finishing with reason.
func scriptText(text, reason string) func(engine.Request) []engine.Event {
	return func(req engine.Request) []engine.Event {
		return events(byteIDs(text), reason, len(req.Prompt))
	}
}

const llama3Template = "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}"

const mistralTemplate = "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token}}{% else %}{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}{% endfor %}"

type testEnv struct {
	eng  *fakeEngine
	h    *Server
	logs *bytes.Buffer
	sw   *syncWriter
}

// logString reads the log under the writer's lock (handlers may still be
// logging).
func (e *testEnv) logString() string {
	e.sw.mu.Lock()
	defer e.sw.mu.Unlock()
	return e.logs.String()
}

type envOpt func(*fakeEngine, *Options, *string)

func withTemplate(src string) envOpt { return func(_ *fakeEngine, _ *Options, t *string) { *t = src } }
func withScript(f func(engine.Request) []engine.Event) envOpt {
	return func(e *fakeEngine, _ *Options, _ *string) { e.script = f }
}
func withOptions(f func(*Options)) envOpt { return func(_ *fakeEngine, o *Options, _ *string) { f(o) } }
func withChoiceScript(f func(engine.Request, int) []engine.Event) envOpt {
	return func(e *fakeEngine, _ *Options, _ *string) { e.choiceScript = f }
}
func withEngine(f func(*fakeEngine)) envOpt {
	return func(e *fakeEngine, _ *Options, _ *string) { f(e) }
}

func newEnv(t testing.TB, opts ...envOpt) *testEnv {
	t.Helper()
	eng := &fakeEngine{ctxLen: 512, script: scriptText("Hello", "length"), interrupted: make(chan int, 64)}
	logs := &bytes.Buffer{}
	sw := &syncWriter{w: logs}
	o := Options{Logger: slog.New(slog.NewTextHandler(sw, nil))}
	tmplSrc := llama3Template
	for _, f := range opts {
		f(eng, &o, &tmplSrc)
	}
	tmpl, err := chat.New(tmplSrc, "<s>", "</s>")
	if err != nil {
		t.Fatal(err)
	}
	return &testEnv{eng: eng, h: New(&fakeBackend{eng: eng, tmpl: tmpl}, o), logs: logs, sw: sw}
}

// syncWriter serialises log writes from handler goroutines.
type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

func (env *testEnv) do(t testing.TB, method, path, body string) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	rec := httptest.NewRecorder()
	env.h.ServeHTTP(rec, req)
	return rec
}

func decode[T any](t testing.TB, b []byte) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("decode %T from %q: %v", v, b, err)
	}
	return v
}

// wireError is the error body as a client sees it.
type wireError struct {
	Error struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    *string `json:"code"`
	} `json:"error"`
}

// readSSE splits an SSE body into data payloads, failing on any line that is
// not "data: ..." followed by a blank line.
func readSSE(t testing.TB, body string) []string {
	t.Helper()
	if !strings.HasSuffix(body, "\n\n") {
		t.Fatalf("SSE body does not end with a blank line: %q", body)
	}
	var out []string
	for _, ev := range strings.Split(strings.TrimSuffix(body, "\n\n"), "\n\n") {
		if strings.Contains(ev, "\n") || !strings.HasPrefix(ev, "data: ") {
			t.Fatalf("malformed SSE event %q", ev)
		}
		out = append(out, strings.TrimPrefix(ev, "data: "))
	}
	if len(out) == 0 || out[len(out)-1] != "[DONE]" {
		t.Fatalf("SSE stream does not end with [DONE]: %q", out)
	}
	return out[:len(out)-1]
}

func waitInterrupted(t *testing.T, eng *fakeEngine) {
	t.Helper()
	select {
	case <-eng.interrupted:
	case <-time.After(5 * time.Second):
		t.Fatal("the engine never saw its request context end")
	}
}

func newRequest(method, target, body string) *http.Request {
	req := httptest.NewRequest(method, target, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	return req
}

func serve(h http.Handler, req *http.Request) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}
