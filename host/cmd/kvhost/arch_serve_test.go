package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/kvhost/kvhost/host/model/synth"
)

// chatStream posts a streaming chat completion with n choices and returns
// each choice's text.
func chatStream(url, content string, n, maxTokens int) ([]string, error) {
	body, _ := json.Marshal(map[string]any{"messages": []map[string]string{{"role": "user", "content": content}},
		"max_tokens": maxTokens, "temperature": 0, "stream": true, "n": n})
	resp, err := http.Post(url+"/v1/chat/completions", "application/json", bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return nil, fmt.Errorf("status %d", resp.StatusCode)
	}
	out := make([]strings.Builder, n)
	finished := 0
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok || data == "[DONE]" {
			continue
		}
		var chunk struct {
			Choices []struct {
				Index int
				Delta struct{ Content string }
				// FinishReason is set on a choice's last chunk.
				FinishReason *string `json:"finish_reason"`
			}
		}
		if err := json.Unmarshal([]byte(data), &chunk); err != nil {
			return nil, err
		}
		for _, c := range chunk.Choices {
			if c.Index < 0 || c.Index >= n {
				return nil, fmt.Errorf("choice index %d of %d", c.Index, n)
			}
			out[c.Index].WriteString(c.Delta.Content)
			if c.FinishReason != nil {
				finished++
			}
		}
	}
	if finished != n {
		return nil, fmt.Errorf("%d of %d choices finished", finished, n)
	}
	texts := make([]string, n)
	for i := range out {
		texts[i] = out[i].String()
	}
	return texts, sc.Err()
}

// TestArchsServed serves generated qwen3moe and deepseek3 models end to
// end: streaming completions run concurrently give each prompt's greedy
// text alone, and a streamed chat completion with n = 3 (greedy) gives
// three equal choices, the text of the same chat with n = 1.
func TestArchsServed(t *testing.T) {
	for _, arch := range []string{"qwen3moe", "deepseek3"} {
		t.Run(arch, func(t *testing.T) {
			spec, err := synth.ArchPreset(arch, "tiny", "f32")
			if err != nil {
				t.Fatal(err)
			}
			var buf bytes.Buffer
			if err := synth.Write(&buf, spec, nil); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(t.TempDir(), arch+".gguf")
			if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
				t.Fatal(err)
			}
			ts, s := startServer(t, path)
			prompts := []string{"Once upon a time", "The cat", "Lily and Tom", "One day", "The sun was", "A little bird"}
			want := make([]string, len(prompts))
			for i, p := range prompts {
				if want[i], err = stream(t, ts.URL, p, 24); err != nil {
					t.Fatal(err)
				}
			}
			got, errs := make([]string, len(prompts)), make([]error, len(prompts))
			var wg sync.WaitGroup
			for i, p := range prompts {
				wg.Add(1)
				go func() {
					defer wg.Done()
					got[i], errs[i] = stream(t, ts.URL, p, 24)
				}()
			}
			wg.Wait()
			for i := range prompts {
				if errs[i] != nil || got[i] != want[i] {
					t.Fatalf("request %d (%q): batched %q (%v), alone %q", i, prompts[i], got[i], errs[i], want[i])
				}
			}
			one, err := chatStream(ts.URL, "Tell me a story", 1, 16)
			if err != nil {
				t.Fatal(err)
			}
			three, err := chatStream(ts.URL, "Tell me a story", 3, 16)
			if err != nil {
				t.Fatal(err)
			}
			for i, c := range three {
				if c != one[0] || c == "" {
					t.Fatalf("choice %d: %q, n=1 gave %q", i, c, one[0])
				}
			}
			if st := s.Engine.Stats(); st.KVPagesFree+st.KVPagesCached != st.KVPagesTotal {
				t.Fatalf("KV pages leaked: %+v", st)
			}
		})
	}
}
