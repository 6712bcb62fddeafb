package server

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/kvhost/kvhost/host/engine"
)

// choiceTexts gives choice c of every request its own text.
var choiceTexts = []string{"alpha", "be", "gamma!"}

func perChoice(texts []string, reason string) func(engine.Request, int) []engine.Event {
	return func(req engine.Request, c int) []engine.Event {
		return events(byteIDs(texts[c%len(texts)]), reason, len(req.Prompt))
	}
}

// collect gathers each choice's text and finish reason from a completions
// or chat response, streamed or not, checking that nothing of a choice
// arrives after its finish.
func collect(t *testing.T, body string, stream, chat bool) (texts map[int]string, reasons map[int]string, u usage) {
	t.Helper()
	texts, reasons = map[int]string{}, map[int]string{}
	if !stream {
		if chat {
			resp := decode[chatResponse](t, []byte(body))
			for _, c := range resp.Choices {
				texts[c.Index], reasons[c.Index] = *c.Message.Content, *c.FinishReason
			}
		} else {
			resp := decode[completionResponse](t, []byte(body))
			for _, c := range resp.Choices {
				texts[c.Index], reasons[c.Index] = c.Text, *c.FinishReason
			}
		}
		return texts, reasons, decode[struct{ Usage usage }](t, []byte(body)).Usage
	}
	chunks, _ := parseChunks(t, body)
	for _, ch := range chunks {
		if len(ch.Choices) == 0 {
			u = decode[usage](t, ch.Usage)
			continue
		}
		c := ch.Choices[0]
		if _, done := reasons[c.Index]; done {
			t.Errorf("chunk for choice %d after its finish", c.Index)
		}
		switch {
		case chat && c.Delta != nil && c.Delta.Content != nil:
			texts[c.Index] += *c.Delta.Content
		case !chat && c.Text != nil:
			texts[c.Index] += *c.Text
		}
		if c.FinishReason != nil {
			reasons[c.Index] = *c.FinishReason
		}
	}
	return texts, reasons, u
}

func TestNChoices(t *testing.T) {
	for _, chat := range []bool{false, true} {
		for _, stream := range []bool{false, true} {
			t.Run(fmt.Sprintf("chat=%v/stream=%v", chat, stream), func(t *testing.T) {
				env := newEnv(t, withChoiceScript(perChoice(choiceTexts, "length")))
				path, body := "/v1/completions", `{"prompt":"Hi","n":3`
				if chat {
					path, body = "/v1/chat/completions", `{"messages":[{"role":"user","content":"Hi"}],"n":3`
				}
				if stream {
					body += `,"stream":true,"stream_options":{"include_usage":true}`
				}
				rec := env.do(t, http.MethodPost, path, body+"}")
				if rec.Code != 200 {
					t.Fatalf("status %d: %s", rec.Code, rec.Body)
				}
				texts, reasons, u := collect(t, rec.Body.String(), stream, chat)
				for c, want := range choiceTexts {
					if texts[c] != want || reasons[c] != "length" {
						t.Errorf("choice %d: %q %q, want %q length", c, texts[c], reasons[c], want)
					}
				}
				if len(texts) != 3 {
					t.Errorf("%d choices", len(texts))
				}
				reqs := env.eng.requests()
				if len(reqs) != 1 || reqs[0].N != 3 {
					t.Fatalf("engine requests %+v: want one with N=3", reqs)
				}
				// The prompt counts once; completion tokens sum over choices.
				if want := (usage{PromptTokens: len(reqs[0].Prompt), CompletionTokens: 5 + 2 + 6, TotalTokens: len(reqs[0].Prompt) + 13}); u != want {
					t.Errorf("usage %+v, want %+v", u, want)
				}
			})
		}
	}
}

// A batch of prompts with n: choice index = prompt*n + choice.
func TestNChoicesBatch(t *testing.T) {
	env := newEnv(t, withChoiceScript(func(req engine.Request, c int) []engine.Event {
		last := req.Prompt[len(req.Prompt)-1]
		return events(byteIDs(fmt.Sprintf("%c%d", last, c)), "length", len(req.Prompt))
	}))
	rec := env.do(t, http.MethodPost, "/v1/completions", `{"prompt":["a","b"],"n":2,"stream":true}`)
	texts, _, _ := collect(t, rec.Body.String(), true, false)
	want := map[int]string{0: "a0", 1: "a1", 2: "b0", 3: "b1"}
	if fmt.Sprint(texts) != fmt.Sprint(want) {
		t.Errorf("texts %v, want %v", texts, want)
	}
}

// One choice hitting a stop string ends only that choice; the request is
// cancelled once every choice is finished.
func TestNStopStringPerChoice(t *testing.T) {
	texts := []string{"xxSTOPyyyy", "abcdefghijkl", "qSTOP"}
	for _, stream := range []bool{false, true} {
		t.Run(fmt.Sprintf("stream=%v", stream), func(t *testing.T) {
			env := newEnv(t, withChoiceScript(perChoice(texts, "length")))
			rec := env.do(t, http.MethodPost, "/v1/completions", fmt.Sprintf(`{"prompt":"p","n":3,"stop":"STOP","stream":%v}`, stream))
			got, reasons, u := collect(t, rec.Body.String(), stream, false)
			want := map[int]string{0: "xx", 1: "abcdefghijkl", 2: "q"}
			wantR := map[int]string{0: "stop", 1: "length", 2: "stop"}
			if fmt.Sprint(got) != fmt.Sprint(want) || fmt.Sprint(reasons) != fmt.Sprint(wantR) {
				t.Errorf("texts %v reasons %v, want %v %v", got, reasons, want, wantR)
			}
			select {
			case <-env.eng.interrupted:
				t.Error("the engine request was cancelled while a choice was still running")
			default:
			}
			// Tokens up to and including each stop string's last token.
			if !stream && u.CompletionTokens != 6+12+5 {
				t.Errorf("completion tokens %d", u.CompletionTokens)
			}
		})
	}

	// The last choice to finish stops on a string: now the request is
	// cancelled, though the engine had more to send.
	env := newEnv(t, withChoiceScript(perChoice([]string{"ab", "cSTOP" + strings.Repeat("d", 30)}, "length")))
	rec := env.do(t, http.MethodPost, "/v1/completions", `{"prompt":"p","n":2,"stop":"STOP"}`)
	got, _, _ := collect(t, rec.Body.String(), false, false)
	if got[0] != "ab" || got[1] != "c" {
		t.Errorf("texts %v", got)
	}
	waitInterrupted(t, env.eng)
}

// An event for a choice the request does not have is the engine's bug.
func TestChoiceOutOfRange(t *testing.T) {
	env := newEnv(t, withScript(func(req engine.Request) []engine.Event {
		return []engine.Event{{Token: 'a', Choice: 5}}
	}))
	rec := env.do(t, http.MethodPost, "/v1/completions", `{"prompt":"p"}`)
	if rec.Code != 500 || !strings.Contains(env.logs.String(), "choice 5 of a 1-choice request") {
		t.Errorf("status %d, logs %s", rec.Code, env.logs)
	}
}

// The prompt tokens the prefix cache served reach usage as OpenAI reports
// them (prompt_tokens_details.cached_tokens, counted once for n choices)
// and /generate's meta_info as SGLang's cached_tokens.
func TestUsageCachedTokens(t *testing.T) {
	env := newEnv(t, withScript(func(req engine.Request) []engine.Event {
		var evs []engine.Event
		for c := range max(req.N, 1) {
			evs = append(evs, engine.Event{Choice: c, Token: 'a'},
				engine.Event{Choice: c, Done: true, FinishReason: "length", PromptTokens: len(req.Prompt), CompletionTokens: 1, CachedTokens: 3})
		}
		return evs
	}))
	for path, body := range map[string]string{
		"/v1/completions":      `{"prompt":"Hello","max_tokens":1,"n":2}`,
		"/v1/chat/completions": `{"messages":[{"role":"user","content":"Hi"}],"max_tokens":1,"stream":true,"stream_options":{"include_usage":true}}`,
		"/generate":            `{"text":"Hello","sampling_params":{"max_new_tokens":1}}`,
	} {
		rec := env.do(t, http.MethodPost, path, body)
		want := `"prompt_tokens_details":{"cached_tokens":3}`
		if path == "/generate" {
			want = `"cached_tokens":3`
		}
		if rec.Code != 200 || !strings.Contains(rec.Body.String(), want) {
			t.Errorf("%s: status %d, body %s; want %s", path, rec.Code, rec.Body, want)
		}
	}
}
