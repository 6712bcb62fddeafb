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
	"strings"
	"testing"
	"time"

	"github.com/kvhost/kvhost/host/boot"
	"github.com/kvhost/kvhost/host/engine"
	"github.com/kvhost/kvhost/host/model/chat"
	"github.com/kvhost/kvhost/host/model/harmony"
	"github.com/kvhost/kvhost/host/model/synth"
	"github.com/kvhost/kvhost/host/server"
)

// forcedBackend serves through the real stack (template, tokenizer,
// engine: the prompt is rendered, tokenized and prefilled, and every token
// is decoded by the model) but puts a forced token sequence in place of
// what the random model samples, so the server's harmony reader sees what
// a trained gpt-oss writes. A forced EOG token ends the choice ("stop"), as
// the engine would; max_tokens short of the sequence ends it "length".
type forcedBackend struct {
	backend
	forced [][]int32 // by choice (the last repeats); {nil}: none
}

func (b forcedBackend) Submit(ctx context.Context, r engine.Request) (*engine.Stream, error) {
	if len(b.forced) == 1 && b.forced[0] == nil {
		return b.backend.Submit(ctx, r) // nothing forced: the model's own tokens
	}
	longest := 0
	for _, f := range b.forced {
		longest = max(longest, len(f))
	}
	r.MaxTokens, r.IgnoreEOS = min(r.MaxTokens, longest), true
	st, err := b.backend.Submit(ctx, r)
	if err != nil {
		return nil, err
	}
	tok := b.Tokenizer()
	out := make(chan engine.Event)
	go func() {
		defer close(out)
		next := map[int]int{}
		ended := map[int]bool{}
		for ev := range st.Events {
			if ended[ev.Choice] {
				continue
			}
			f := b.forced[min(ev.Choice, len(b.forced)-1)]
			if !ev.Done && ev.Err == nil {
				k := next[ev.Choice]
				next[ev.Choice]++
				if k >= len(f) {
					continue // past this choice's sequence: wait for the engine's end
				}
				ev.Token = f[k]
				if tok.EOG(ev.Token) {
					out <- ev
					ended[ev.Choice] = true
					ev = engine.Event{Choice: ev.Choice, Done: true, FinishReason: "stop"}
				}
			}
			out <- ev
		}
	}()
	return &engine.Stream{Events: out}, nil
}

// TestHarmonyServed serves a generated gpt-oss model (harmony's special
// tokens in its vocabulary, gpt-oss's template in its metadata) through
// the real stack with forced outputs: chat completions, streamed and not,
// come back with reasoning_content, content and tool_calls, no special
// token in sight; unforced, a named function's call (header in the prompt,
// arguments under the schema's constraint) comes back as a valid call.
func TestHarmonyServed(t *testing.T) {
	spec, err := synth.ArchPreset("gpt-oss", "tiny", "f32")
	if err != nil {
		t.Fatal(err)
	}
	spec.Tokenizer = "bpe" // byte-level, as gpt-oss's o200k vocabulary
	var buf bytes.Buffer
	if err := synth.Write(&buf, spec, nil); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "gpt-oss.gguf")
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	s, err := boot.Build(boot.Config{Model: path, Device: "cpu", DeviceMemory: 512 << 20, Threads: 2,
		MaxRunning: 8, MaxQueue: 16, ChunkedPrefill: 256, PageSize: 16, Constraints: constraintRunner(context.Background(), nil, log)}, log, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		s.Close(ctx)
	})
	b := backend{s}
	if f := s.Chat.ToolFormat(); f != chat.ToolsHarmony || !s.Chat.TakesReasoningEffort() {
		t.Fatalf("the generated model's template: format %v; want harmony with reasoning_effort", f)
	}
	tok := b.Tokenizer()
	for _, m := range harmony.Tokens {
		ids, err := tok.Encode(m, false)
		if err != nil || len(ids) != 1 || len(tok.TokenBytes(ids[0])) != 0 {
			t.Fatalf("%s: ids %v (%v); want one control token", m, ids, err)
		}
		if eog := m == harmony.Return || m == harmony.Call; tok.EOG(ids[0]) != eog {
			t.Fatalf("%s: EOG %v, want %v", m, tok.EOG(ids[0]), eog)
		}
	}
	encode := func(s string) []int32 {
		ids, err := tok.Encode(s, false)
		if err != nil {
			t.Fatal(err)
		}
		return ids
	}
	answer := encode("<|channel|>analysis<|message|>The user greets me.<|end|><|start|>assistant<|channel|>final<|message|>Hello! How can I help?<|return|>")
	call := encode(`<|channel|>analysis<|message|>Need the weather.<|end|><|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city": "Paris"}<|call|>`)
	tools := `"tools":[{"type":"function","function":{"name":"get_weather","description":"Weather of a city","parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}}]`
	msgs := `"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Hi, weather in Paris?"}]`

	post := func(forced [][]int32, body string, stream bool) []harmonyChoice {
		t.Helper()
		ts := httptest.NewServer(server.New(forcedBackend{b, forced}, server.Options{Logger: log}))
		defer ts.Close()
		if stream {
			body = strings.Replace(body, "{", `{"stream":true,`, 1)
		}
		resp, err := http.Post(ts.URL+"/v1/chat/completions", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			t.Fatalf("status %d: %s", resp.StatusCode, raw)
		}
		for _, m := range harmony.Tokens {
			if bytes.Contains(raw, []byte(m)) {
				t.Fatalf("%s leaked: %s", m, raw)
			}
		}
		type msg struct {
			Content   *string
			Reasoning *string `json:"reasoning_content"`
			ToolCalls []struct {
				Index    int
				Function struct{ Name, Arguments string }
			} `json:"tool_calls"`
		}
		var out []harmonyChoice
		add := func(i int, m msg, finish *string) {
			for len(out) <= i {
				out = append(out, harmonyChoice{})
			}
			c := &out[i]
			if m.Content != nil {
				c.Content += *m.Content
			}
			if m.Reasoning != nil {
				c.Reasoning += *m.Reasoning
			}
			for _, tc := range m.ToolCalls {
				if tc.Function.Name != "" {
					c.Calls = append(c.Calls, tc.Function.Name+" ")
				}
				c.Calls[len(c.Calls)-1] += tc.Function.Arguments
			}
			if finish != nil {
				c.Finish = *finish
			}
		}
		type chunk struct {
			Choices []struct {
				Index        int
				Message      msg
				Delta        msg
				FinishReason *string `json:"finish_reason"`
			}
		}
		if !stream {
			var r chunk
			if err := json.Unmarshal(raw, &r); err != nil {
				t.Fatal(err)
			}
			for _, c := range r.Choices {
				add(c.Index, c.Message, c.FinishReason)
			}
			return out
		}
		sc := bufio.NewScanner(bytes.NewReader(raw))
		for sc.Scan() {
			data, ok := strings.CutPrefix(sc.Text(), "data: ")
			if !ok || data == "[DONE]" {
				continue
			}
			var r chunk
			if err := json.Unmarshal([]byte(data), &r); err != nil {
				t.Fatal(err)
			}
			for _, c := range r.Choices {
				add(c.Index, c.Delta, c.FinishReason)
			}
		}
		return out
	}
	want := map[string]harmonyChoice{
		"answer": {Content: "Hello! How can I help?", Reasoning: "The user greets me.", Finish: "stop"},
		"call":   {Reasoning: "Need the weather.", Calls: []string{`get_weather {"city": "Paris"}`}, Finish: "tool_calls"},
	}
	for _, stream := range []bool{false, true} {
		got := post([][]int32{answer, call}, `{"n":2,"reasoning_effort":"high",`+tools+`,`+msgs+`}`, stream)
		for i, name := range []string{"answer", "call"} {
			if len(got) != 2 || !equalChoice(got[i], want[name]) {
				t.Fatalf("stream=%v choice %d: got %+v, want %+v", stream, i, got, want[name])
			}
		}
		cut := post([][]int32{answer}, `{"max_tokens":8,`+msgs+`}`, stream)
		if len(cut) != 1 || cut[0].Finish != "length" || cut[0].Content != "" || !strings.HasPrefix("The user greets me.", cut[0].Reasoning) || cut[0].Reasoning == "" {
			t.Fatalf("stream=%v cut at 8 tokens: %+v", stream, cut)
		}
	}
	// Unforced: a named function is forced by the prompt (its header) and
	// the constraint (its schema), so even the random model calls it with
	// valid arguments.
	for _, stream := range []bool{false, true} {
		got := post([][]int32{nil}, `{"max_tokens":48,"tool_choice":{"type":"function","function":{"name":"get_weather"}},`+tools+`,`+msgs+`}`, stream)
		if len(got) != 1 || len(got[0].Calls) != 1 || got[0].Finish != "stop" || got[0].Content != "" || got[0].Reasoning != "" {
			t.Fatalf("stream=%v named call: %+v", stream, got)
		}
		name, args, _ := strings.Cut(got[0].Calls[0], " ")
		var obj struct {
			City *string `json:"city"`
		}
		if name != "get_weather" || json.Unmarshal([]byte(args), &obj) != nil || obj.City == nil {
			t.Fatalf("stream=%v named call: %q is not get_weather with a city", stream, got[0].Calls[0])
		}
	}
	if st := s.Engine.Stats(); st.KVPagesFree+st.KVPagesCached != st.KVPagesTotal {
		t.Fatalf("KV pages leaked: %+v", st)
	}
}

// harmonyChoice is one choice as a client reads it (deltas joined).
type harmonyChoice struct {
	Content, Reasoning string
	Calls              []string
	Finish             string
}

func equalChoice(a, b harmonyChoice) bool {
	return a.Content == b.Content && a.Reasoning == b.Reasoning && a.Finish == b.Finish && strings.Join(a.Calls, "|") == strings.Join(b.Calls, "|")
}
