package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"github.com/kvhost/kvhost/internal/testmodels"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvhost/kvhost/host/boot"
	"github.com/kvhost/kvhost/host/server"
)

// sharedModel is the repository's models/stories260K.gguf.
func sharedModel(t *testing.T) string { return testmodels.MustStories260K(t) }

func startServer(t *testing.T, modelPath string) (*httptest.Server, *boot.Stack) {
	t.Helper()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	s, err := boot.Build(boot.Config{Model: modelPath, Device: "cpu", DeviceMemory: 512 << 20, Threads: 2,
		MaxRunning: 16, MaxQueue: 64, ChunkedPrefill: 256, PageSize: 16}, log, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(server.New(backend{s}, server.Options{Logger: log}))
	t.Cleanup(func() {
		ts.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		s.Close(ctx)
	})
	return ts, s
}

// stream posts a streaming completion and returns the concatenated text.
func stream(t *testing.T, url, prompt string, maxTokens int) (string, error) {
	body, _ := json.Marshal(map[string]any{"prompt": prompt, "max_tokens": maxTokens, "temperature": 0, "stream": true})
	resp, err := http.Post(url+"/v1/completions", "application/json", bytes.NewReader(body))
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		return "", fmt.Errorf("status %d: %s", resp.StatusCode, b)
	}
	var text strings.Builder
	sc := bufio.NewScanner(resp.Body)
	done := false
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			continue
		}
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			return "", fmt.Errorf("not an SSE data line: %q", line)
		}
		if data == "[DONE]" {
			done = true
			break
		}
		var chunk struct {
			Object  string
			Choices []struct {
				Text         string
				FinishReason *string `json:"finish_reason"`
			}
		}
		if err := json.Unmarshal([]byte(data), &chunk); err != nil {
			return "", err
		}
		if chunk.Object != "text_completion" {
			return "", fmt.Errorf("chunk object %q", chunk.Object)
		}
		for _, c := range chunk.Choices {
			text.WriteString(c.Text)
		}
	}
	if !done {
		return "", fmt.Errorf("stream ended without [DONE]")
	}
	return text.String(), sc.Err()
}

// TestSixteenConcurrentStreams: 16 concurrent streaming greedy requests over
// HTTP each equal the same request run alone, token for token.
func TestSixteenConcurrentStreams(t *testing.T) {
	ts, s := startServer(t, sharedModel(t))
	prompts := []string{"Once upon a time", "The cat", "Lily and Tom", "One day", "The sun was", "A little bird",
		"Mom said", "In the park", "The big dog", "Sara had a", "There was a boy", "The car", "Ben liked", "At night",
		"The tree", "A happy"}
	want := make([]string, len(prompts))
	for i, p := range prompts {
		var err error
		if want[i], err = stream(t, ts.URL, p, 48); err != nil {
			t.Fatal(err)
		}
	}
	got := make([]string, len(prompts))
	errs := make([]error, len(prompts))
	var wg sync.WaitGroup
	for i, p := range prompts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[i], errs[i] = stream(t, ts.URL, p, 48)
		}()
	}
	wg.Wait()
	for i := range prompts {
		if errs[i] != nil {
			t.Fatalf("request %d: %v", i, errs[i])
		}
		if got[i] != want[i] {
			t.Fatalf("request %d (%q): concurrent %q != sequential %q", i, prompts[i], got[i], want[i])
		}
	}
	if !strings.Contains(want[0], "Lily") {
		t.Fatalf("unexpected story: %q", want[0])
	}
	st := s.Engine.Stats()
	if st.KVPagesFree+st.KVPagesCached != st.KVPagesTotal || st.Prefix == nil {
		t.Fatalf("KV pages leaked, or no prefix cache: %+v", st)
	}
	if err := s.Engine.ResetPrefixCache(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st := s.Engine.Stats(); st.KVPagesFree != st.KVPagesTotal {
		t.Fatalf("KV pages not all free after the prefix cache's reset: %+v", st)
	}
}

func TestChatAndErrors(t *testing.T) {
	ts, _ := startServer(t, sharedModel(t))
	post := func(path, body string) (int, string) {
		resp, err := http.Post(ts.URL+path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	code, body := post("/v1/chat/completions", `{"messages":[{"role":"user","content":"Tell me a story"}],"max_tokens":16,"temperature":0}`)
	if code != 200 || !strings.Contains(body, `"chat.completion"`) {
		t.Fatalf("chat: %d %s", code, body)
	}
	long := strings.Repeat("the cat sat on the mat. ", 200)
	code, body = post("/v1/completions", `{"prompt":"`+long+`","max_tokens":4}`)
	if code != 400 || !strings.Contains(body, "context") {
		t.Fatalf("prompt over the context: %d %s", code, body)
	}
	code, body = post("/v1/completions", `{"prompt": 5}`)
	if code != 400 || !strings.Contains(body, "prompt") {
		t.Fatalf("bad body: %d %s", code, body)
	}
}

// TestGracefulShutdown: on shutdown the server stops admitting, lets a
// running stream finish, and run returns nil.
func TestGracefulShutdown(t *testing.T) {
	model := sharedModel(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"serve", "--model", model, "--addr", addr, "--device-memory", "256MiB", "--log-level", "error"}, io.Discard, io.Discard)
	}()
	url := "http://" + addr
	deadline := time.Now().Add(20 * time.Second)
	for {
		// The port is bound before the model loads: /health answers 503
		// "loading" until it is ready.
		resp, err := http.Get(url + "/health")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("server did not start: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	body := `{"prompt":"Once upon a time","max_tokens":200,"temperature":0,"stream":true,"ignore_eos":true}`
	resp, err := http.Post(url+"/v1/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Scan() // first chunk arrived: the stream is running
	cancel()  // SIGTERM
	chunks, sawDone := 1, false
	for sc.Scan() {
		if line := sc.Text(); line == "data: [DONE]" {
			sawDone = true
		} else if strings.HasPrefix(line, "data: ") {
			chunks++
			if strings.Contains(line, `"error"`) {
				t.Fatalf("the running stream was cut: %s", line)
			}
		}
	}
	if !sawDone || chunks < 100 {
		t.Fatalf("stream ended after %d chunks, [DONE]=%v", chunks, sawDone)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run returned %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("run did not return after shutdown")
	}
	if _, err := http.Get(url + "/health"); err == nil {
		t.Fatal("server still answering after shutdown")
	}
}
