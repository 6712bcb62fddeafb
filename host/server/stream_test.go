package server

import (
	"bufio"
	"context"
	"encoding/json"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/kvhost/kvhost/host/engine"
)

// streamChunk is a chunk of either endpoint as a client parses it.
type streamChunk struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Model   string `json:"model"`
	Choices []struct {
		Index int     `json:"index"`
		Text  *string `json:"text"`
		Delta *struct {
			Role    *string `json:"role"`
			Content *string `json:"content"`
		} `json:"delta"`
		Logprobs     json.RawMessage `json:"logprobs"`
		FinishReason *string         `json:"finish_reason"`
	} `json:"choices"`
	Usage json.RawMessage `json:"usage"`
}

func parseChunks(t *testing.T, body string) ([]streamChunk, []map[string]json.RawMessage) {
	t.Helper()
	var chunks []streamChunk
	var raw []map[string]json.RawMessage
	for _, d := range readSSE(t, body) {
		chunks = append(chunks, decode[streamChunk](t, []byte(d)))
		raw = append(raw, decode[map[string]json.RawMessage](t, []byte(d)))
	}
	return chunks, raw
}

func TestCompletionsStream(t *testing.T) {
	env := newEnv(t)
	rec := env.do(t, http.MethodPost, "/v1/completions", `{"prompt":"Hi","stream":true}`)
	if rec.Code != 200 || rec.Header().Get("Content-Type") != "text/event-stream" {
		t.Fatalf("status %d, type %q: %s", rec.Code, rec.Header().Get("Content-Type"), rec.Body)
	}
	if !rec.Flushed {
		t.Error("stream was never flushed")
	}
	chunks, raw := parseChunks(t, rec.Body.String())
	var text strings.Builder
	for i, c := range chunks {
		if !strings.HasPrefix(c.ID, "cmpl-") || c.ID != chunks[0].ID || c.Object != "text_completion" || c.Model != "fake-model" {
			t.Errorf("chunk %d envelope %+v", i, c)
		}
		if _, ok := raw[i]["usage"]; ok {
			t.Errorf("chunk %d has a usage field without include_usage", i)
		}
		if len(c.Choices) != 1 || c.Choices[0].Text == nil {
			t.Fatalf("chunk %d choices %+v", i, c.Choices)
		}
		text.WriteString(*c.Choices[0].Text)
		last := i == len(chunks)-1
		if (c.Choices[0].FinishReason != nil) != last {
			t.Errorf("chunk %d finish_reason %v", i, c.Choices[0].FinishReason)
		}
	}
	if text.String() != "Hello" || *chunks[len(chunks)-1].Choices[0].FinishReason != "length" {
		t.Errorf("text %q", text.String())
	}
	if len(chunks) != 6 { // one per byte token, then the finish chunk
		t.Errorf("%d chunks, want 6", len(chunks))
	}
}

func TestChatStreamWithUsage(t *testing.T) {
	env := newEnv(t)
	rec := env.do(t, http.MethodPost, "/v1/chat/completions",
		`{"messages":[{"role":"user","content":"Hi"}],"stream":true,"stream_options":{"include_usage":true}}`)
	if rec.Code != 200 {
		t.Fatalf("status %d: %s", rec.Code, rec.Body)
	}
	chunks, raw := parseChunks(t, rec.Body.String())
	if len(chunks) < 4 {
		t.Fatalf("only %d chunks", len(chunks))
	}
	first := chunks[0].Choices[0]
	if first.Delta == nil || first.Delta.Role == nil || *first.Delta.Role != "assistant" ||
		first.Delta.Content == nil || *first.Delta.Content != "" || first.FinishReason != nil {
		t.Errorf("first chunk %s", raw[0]["choices"])
	}
	var text strings.Builder
	for i, c := range chunks[1 : len(chunks)-2] {
		d := c.Choices[0].Delta
		if d == nil || d.Role != nil || d.Content == nil || c.Choices[0].FinishReason != nil {
			t.Fatalf("content chunk %d: %s", i+1, raw[i+1]["choices"])
		}
		text.WriteString(*d.Content)
	}
	if text.String() != "Hello" {
		t.Errorf("content %q", text.String())
	}
	fin := chunks[len(chunks)-2]
	if d := fin.Choices[0].Delta; d == nil || d.Role != nil || d.Content != nil || *fin.Choices[0].FinishReason != "length" {
		t.Errorf("finish chunk %s", raw[len(chunks)-2]["choices"])
	}
	for i, r := range raw[:len(raw)-1] {
		if string(r["usage"]) != "null" || chunks[i].Object != "chat.completion.chunk" {
			t.Errorf("chunk %d usage %s object %s", i, r["usage"], chunks[i].Object)
		}
	}
	last := chunks[len(chunks)-1]
	u := decode[usage](t, last.Usage)
	prompt, _ := fakeTokenizer{}.Encode("<s><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n", false)
	if len(last.Choices) != 0 || u != (usage{PromptTokens: len(prompt), CompletionTokens: 5, TotalTokens: len(prompt) + 5}) || string(raw[len(raw)-1]["choices"]) != "[]" {
		t.Errorf("usage chunk %+v", raw[len(raw)-1])
	}
}

func TestStopStrings(t *testing.T) {
	tests := []struct {
		name     string
		gen      string // generated, one byte token each
		stops    string
		want     string
		reason   string
		canceled bool
	}{
		{"spans tokens", "abcENDxyz", `"END"`, "abc", "stop", true},
		{"partial prefix is not a stop", "abENxENDqq", `["END"]`, "abENx", "stop", true},
		{"earliest of several", "abcxyzqq", `["xyz","c"]`, "ab", "stop", true},
		{"overlapping candidates", "aababcqq", `["abc","bab"]`, "aa", "stop", true},
		{"at the very start", "ENDabc", `"END"`, "", "stop", true},
		{"no match: held-back tail is flushed", "abcEN", `"END"`, "abcEN", "length", false},
		{"in the last token before done", "abcEND", `"END"`, "abc", "stop", false},
	}
	for _, tc := range tests {
		for _, stream := range []bool{false, true} {
			name := tc.name
			if stream {
				name += "/stream"
			}
			t.Run(name, func(t *testing.T) {
				env := newEnv(t, withScript(scriptText(tc.gen, "length")))
				body := `{"prompt":"p","stop":` + tc.stops + `,"stream":` + map[bool]string{true: "true", false: "false"}[stream] + `}`
				rec := env.do(t, http.MethodPost, "/v1/completions", body)
				if rec.Code != 200 {
					t.Fatalf("status %d: %s", rec.Code, rec.Body)
				}
				var text, reason string
				if stream {
					chunks, _ := parseChunks(t, rec.Body.String())
					for _, c := range chunks {
						piece := *c.Choices[0].Text
						// Nothing of a stop string is ever sent, not even
						// a prefix that later completes it.
						if !strings.HasPrefix(tc.want[len(text):], piece) {
							t.Errorf("chunk %q is not a continuation of %q within %q", piece, text, tc.want)
						}
						text += piece
						if c.Choices[0].FinishReason != nil {
							reason = *c.Choices[0].FinishReason
						}
					}
				} else {
					resp := decode[completionResponse](t, rec.Body.Bytes())
					text, reason = resp.Choices[0].Text, *resp.Choices[0].FinishReason
				}
				if text != tc.want || reason != tc.reason {
					t.Errorf("text %q reason %q, want %q %q", text, reason, tc.want, tc.reason)
				}
				if tc.canceled {
					waitInterrupted(t, env.eng)
				}
			})
		}
	}
}

func TestStreamUTF8HeldBack(t *testing.T) {
	const gen = "héllo 😀 wörld ✓"
	env := newEnv(t, withScript(scriptText(gen, "length"))) // one token per byte
	rec := env.do(t, http.MethodPost, "/v1/completions", `{"prompt":"p","stream":true}`)
	if rec.Code != 200 {
		t.Fatalf("status %d", rec.Code)
	}
	body := rec.Body.String()
	if !utf8.ValidString(body) || strings.ContainsRune(body, utf8.RuneError) || strings.Contains(body, `\ufffd`) {
		t.Fatalf("stream carries broken UTF-8: %q", body)
	}
	chunks, _ := parseChunks(t, body)
	var text strings.Builder
	for _, c := range chunks {
		piece := *c.Choices[0].Text
		if !utf8.ValidString(piece) {
			t.Errorf("chunk %q is not valid UTF-8", piece)
		}
		text.WriteString(piece)
	}
	if text.String() != gen {
		t.Errorf("text %q, want %q", text.String(), gen)
	}
	// 😀 is 4 byte tokens: exactly one chunk carries it whole.
	found := 0
	for _, c := range chunks {
		if *c.Choices[0].Text == "😀" {
			found++
		}
	}
	if found != 1 {
		t.Errorf("the emoji arrived in %d whole chunks, want 1", found)
	}
}

func TestEOGTokenHasNoText(t *testing.T) {
	env := newEnv(t, withScript(func(req engine.Request) []engine.Event {
		return events([]int32{tokHello, tokWorld, tokEOS}, "stop", len(req.Prompt))
	}))
	rec := env.do(t, http.MethodPost, "/v1/completions", `{"prompt":"p","logprobs":1}`)
	resp := decode[completionResponse](t, rec.Body.Bytes())
	c := resp.Choices[0]
	if c.Text != "Hello world" || *c.FinishReason != "stop" {
		t.Errorf("choice %+v", c)
	}
	if got := c.Logprobs.Tokens; len(got) != 2 || got[0] != "Hello" || got[1] != " world" {
		t.Errorf("logprob tokens %q: the EOG token must not be reported", got)
	}
	// The EOG token was generated, so it is counted.
	if u := decode[struct{ Usage usage }](t, rec.Body.Bytes()).Usage; u.CompletionTokens != 3 {
		t.Errorf("usage %+v", u)
	}
}

func TestCompletionLogprobs(t *testing.T) {
	env := newEnv(t, withScript(func(req engine.Request) []engine.Event {
		evs := events([]int32{tokHello, tokWorld, '!'}, "length", len(req.Prompt))
		evs[2].Logprob = float32(math.Inf(-1))
		return evs
	}))
	rec := env.do(t, http.MethodPost, "/v1/completions", `{"prompt":"p","logprobs":2}`)
	if rec.Code != 200 {
		t.Fatalf("status %d: %s", rec.Code, rec.Body)
	}
	r := env.eng.requests()[0]
	if !r.Logprobs || r.TopLogprobs != 2 {
		t.Errorf("engine request logprobs=%v top=%d", r.Logprobs, r.TopLogprobs)
	}
	lp := decode[completionResponse](t, rec.Body.Bytes()).Choices[0].Logprobs
	if lp == nil {
		t.Fatal("no logprobs")
	}
	wantTokens := []string{"Hello", " world", "!"}
	wantLP := []float64{-0.1, -0.2, minLogprob}
	wantOff := []int{0, 5, 11}
	for i := range wantTokens {
		if lp.Tokens[i] != wantTokens[i] || lp.TokenLogprobs[i] == nil || math.Abs(*lp.TokenLogprobs[i]-wantLP[i]) > 1e-6 || lp.TextOffset[i] != wantOff[i] {
			t.Errorf("position %d: %q %v %d", i, lp.Tokens[i], lp.TokenLogprobs[i], lp.TextOffset[i])
		}
		top := lp.TopLogprobs[i]
		if len(top) != 2 || top["z"] != -5 || math.Abs(top[wantTokens[i]]-wantLP[i]) > 1e-6 && i != 2 {
			t.Errorf("position %d top %v", i, top)
		}
	}
	if len(lp.Tokens) != 3 || len(lp.TopLogprobs) != 3 {
		t.Errorf("lengths %d %d", len(lp.Tokens), len(lp.TopLogprobs))
	}

	// logprobs=0: tokens and their logprobs, no alternatives.
	rec = env.do(t, http.MethodPost, "/v1/completions", `{"prompt":"p","logprobs":0}`)
	raw := decode[struct {
		Choices []struct{ Logprobs map[string]json.RawMessage }
	}](t, rec.Body.Bytes())
	if string(raw.Choices[0].Logprobs["top_logprobs"]) != "null" || len(decode[[]string](t, raw.Choices[0].Logprobs["tokens"])) != 3 {
		t.Errorf("logprobs=0 shape: %s", rec.Body)
	}
}

func TestChatLogprobs(t *testing.T) {
	env := newEnv(t, withScript(func(req engine.Request) []engine.Event {
		return events([]int32{tokSmile, 'a', 'S', 'T', 'O', 'P', 'q', 'q'}, "length", len(req.Prompt))
	}))
	body := `{"messages":[{"role":"user","content":"x"}],"logprobs":true,"top_logprobs":2,"stop":"STOP"}`
	rec := env.do(t, http.MethodPost, "/v1/chat/completions", body)
	if rec.Code != 200 {
		t.Fatalf("status %d: %s", rec.Code, rec.Body)
	}
	c := decode[chatResponse](t, rec.Body.Bytes()).Choices[0]
	if *c.Message.Content != "😀a" || *c.FinishReason != "stop" {
		t.Fatalf("choice %+v", c)
	}
	// Only the tokens whose text survives the stop string are reported.
	got := c.Logprobs.Content
	if len(got) != 2 {
		t.Fatalf("%d logprob entries, want 2: %s", len(got), rec.Body)
	}
	if got[0].Token != "😀" || len(got[0].Bytes) != 4 || got[0].Bytes[0] != 0xF0 || math.Abs(got[0].Logprob+0.1) > 1e-6 {
		t.Errorf("entry 0 %+v", got[0])
	}
	if got[1].Token != "a" || len(got[1].TopLogprobs) != 2 || got[1].TopLogprobs[1].Token != "z" ||
		got[1].TopLogprobs[1].Logprob != -5 || len(got[1].TopLogprobs[1].Bytes) != 1 {
		t.Errorf("entry 1 %+v", got[1])
	}

	// Streaming: the entries arrive with the chunks that carry their text.
	rec = env.do(t, http.MethodPost, "/v1/chat/completions", strings.Replace(body, `"logprobs":true`, `"logprobs":true,"stream":true`, 1))
	chunks, _ := parseChunks(t, rec.Body.String())
	n := 0
	for _, ch := range chunks {
		if len(ch.Choices) == 0 || string(ch.Choices[0].Logprobs) == "null" || ch.Choices[0].Logprobs == nil {
			continue
		}
		lp := decode[chatLogprobs](t, ch.Choices[0].Logprobs)
		n += len(lp.Content)
		if len(lp.Content) > 0 && (ch.Choices[0].Delta.Content == nil || *ch.Choices[0].Delta.Content == "") {
			t.Errorf("logprobs without text in chunk %+v", ch)
		}
	}
	if n != 2 {
		t.Errorf("streamed %d logprob entries, want 2", n)
	}

	// Without logprobs the field is null.
	rec = env.do(t, http.MethodPost, "/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}]}`)
	if !strings.Contains(rec.Body.String(), `"logprobs":null`) {
		t.Errorf("logprobs not null: %s", rec.Body)
	}
	if r := env.eng.requests()[2]; r.Logprobs {
		t.Error("engine asked for logprobs nobody wanted")
	}
}

func TestStreamErrorEvent(t *testing.T) {
	env := newEnv(t, withScript(func(engine.Request) []engine.Event {
		return []engine.Event{{Token: 'a'}, {Err: engine.ErrShuttingDown}}
	}))
	rec := env.do(t, http.MethodPost, "/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}],"stream":true}`)
	if rec.Code != 200 {
		t.Fatalf("status %d", rec.Code)
	}
	data := readSSE(t, rec.Body.String())
	e := decode[wireError](t, []byte(data[len(data)-1]))
	if e.Error.Code == nil || *e.Error.Code != "shutting_down" {
		t.Errorf("last event %s", data[len(data)-1])
	}
}

func TestBatchStream(t *testing.T) {
	env := newEnv(t, withScript(func(req engine.Request) []engine.Event {
		text := "one"
		if req.Prompt[len(req.Prompt)-1] == 'b' {
			text = "two!"
		}
		return events(byteIDs(text), "length", len(req.Prompt))
	}))
	rec := env.do(t, http.MethodPost, "/v1/completions", `{"prompt":["a","b"],"stream":true,"stream_options":{"include_usage":true}}`)
	chunks, _ := parseChunks(t, rec.Body.String())
	texts := map[int]string{}
	finished := map[int]bool{}
	for _, c := range chunks[:len(chunks)-1] {
		ch := c.Choices[0]
		if finished[ch.Index] {
			t.Errorf("chunk for choice %d after its finish", ch.Index)
		}
		texts[ch.Index] += *ch.Text
		finished[ch.Index] = ch.FinishReason != nil
	}
	if texts[0] != "one" || texts[1] != "two!" || !finished[0] || !finished[1] {
		t.Errorf("texts %v finished %v", texts, finished)
	}
	if u := decode[usage](t, chunks[len(chunks)-1].Usage); u != (usage{PromptTokens: 4, CompletionTokens: 7, TotalTokens: 11}) {
		t.Errorf("usage %+v", u)
	}
}

func TestClientDisconnectCancels(t *testing.T) {
	for _, stream := range []bool{true, false} {
		name := map[bool]string{true: "stream", false: "non-stream"}[stream]
		t.Run(name, func(t *testing.T) {
			env := newEnv(t, withScript(scriptText("abcdefgh", "length")),
				withEngine(func(e *fakeEngine) { e.blockAfter = 3 }))
			srv := httptest.NewServer(env.h)
			defer srv.Close()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			body := `{"prompt":"p","stream":` + map[bool]string{true: "true", false: "false"}[stream] + `}`
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/v1/completions", strings.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			done := make(chan struct{})
			go func() {
				defer close(done)
				resp, err := srv.Client().Do(req)
				if err != nil {
					return
				}
				defer resp.Body.Close()
				br := bufio.NewReader(resp.Body)
				if line, err := br.ReadString('\n'); err == nil && stream && !strings.HasPrefix(line, "data: ") {
					t.Errorf("first line %q", line)
				}
				cancel() // the client goes away mid-generation
			}()
			if !stream {
				// Nothing arrives before the end; leave once the engine is busy.
				deadline := time.Now().Add(5 * time.Second)
				for len(env.eng.requests()) == 0 && time.Now().Before(deadline) {
					time.Sleep(time.Millisecond)
				}
				cancel()
			}
			waitInterrupted(t, env.eng)
			<-done
		})
	}
}

// One handler serves many requests at once (run with -race).
func TestConcurrentRequests(t *testing.T) {
	env := newEnv(t, withScript(scriptText("abcENDxyz", "length")))
	srv := httptest.NewServer(env.h)
	defer srv.Close()
	errs := make(chan string, 16)
	for i := 0; i < 16; i++ {
		go func(i int) {
			body := `{"prompt":"p","stop":"END","stream":` + map[bool]string{true: "true", false: "false"}[i%2 == 0] + `}`
			path := "/v1/completions"
			if i%4 < 2 {
				path = "/v1/chat/completions"
				body = strings.Replace(body, `"prompt":"p"`, `"messages":[{"role":"user","content":"p"}]`, 1)
			}
			resp, err := srv.Client().Post(srv.URL+path, "application/json", strings.NewReader(body))
			if err != nil {
				errs <- err.Error()
				return
			}
			defer resp.Body.Close()
			var sb strings.Builder
			_, _ = bufio.NewReader(resp.Body).WriteTo(&sb)
			out := sb.String()
			// Streams send "a", "b", "c" apiece; nothing of "END" may appear.
			if resp.StatusCode != 200 || !strings.Contains(out, `"finish_reason":"stop"`) ||
				strings.Contains(out, "END") || strings.Contains(out, `"E"`) || strings.Contains(out, "xyz") {
				errs <- out
				return
			}
			errs <- ""
		}(i)
	}
	for i := 0; i < 16; i++ {
		if e := <-errs; e != "" {
			t.Errorf("request failed: %s", e)
		}
	}
}
