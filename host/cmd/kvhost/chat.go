package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/kvhost/kvhost/host/server"
)

func init() { extraCommands["chat"] = chatCmd }

const chatUsage = `Usage: kvhost chat (--model MODEL | --url URL) [flags]

An interactive chat in the terminal: each line you type is a user message,
the answer streams as it is generated, the conversation is kept. Type /bye
(or end the input) to leave, /clear to start over.

--model serves MODEL in this process first (a GGUF file, a Hugging Face
directory or a hub id, as kvhost serve --model); --url talks to a running
kvhost (or any OpenAI-compatible server).

`

// stdinReader is the chat's input; tests replace it.
var stdinReader io.Reader = os.Stdin

type chatFlags struct {
	url, model, apiKey, system string
	maxTokens                  int
	temperature                float64
	devMemory                  byteSize
	threads                    int
	verbose                    bool
}

func chatCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var f chatFlags
	fs := newFlagSet("chat", stderr)
	fs.StringVar(&f.url, "url", "", "base URL of a running server, e.g. http://127.0.0.1:8080")
	fs.StringVar(&f.model, "model", "", "serve this model in-process instead (path or hub id)")
	fs.StringVar(&f.apiKey, "api-key", os.Getenv("KVHOST_API_KEY"), "bearer key for --url (default $KVHOST_API_KEY)")
	fs.StringVar(&f.system, "system", "", "a system message to start the conversation with")
	fs.IntVar(&f.maxTokens, "max-tokens", 256, "longest answer in tokens")
	fs.Float64Var(&f.temperature, "temperature", 0.7, "sampling temperature (0: greedy)")
	fs.Var(&f.devMemory, "device-memory", "with --model: CPU device memory (as serve)")
	fs.IntVar(&f.threads, "threads", 0, "with --model: CPU kernel threads (as serve)")
	fs.BoolVar(&f.verbose, "verbose", false, "with --model: show the server's log")
	fs.Usage = func() { fmt.Fprint(fs.Output(), chatUsage); fs.PrintDefaults() }
	if err := fs.Parse(args); err != nil {
		return err
	}
	if (f.url == "") == (f.model == "") {
		fs.Usage()
		return errors.New("chat: give exactly one of --model and --url")
	}
	base := strings.TrimRight(f.url, "/")
	if f.model != "" {
		url, stop, err := localServer(ctx, f, stderr)
		if err != nil {
			return err
		}
		defer stop()
		base = url
	}
	c := &chatClient{base: base, key: f.apiKey, http: &http.Client{}, maxTokens: f.maxTokens, temperature: f.temperature}
	if f.system != "" {
		c.history = append(c.history, chatMsg{Role: "system", Content: f.system})
	}
	return c.loop(ctx, stdinReader, stdout)
}

// localServer serves f.model on a loopback port with serve's own code
// (load and assemble), for chat --model. stop shuts it down.
func localServer(ctx context.Context, f chatFlags, stderr io.Writer) (string, func(), error) {
	sf, _, _, err := parseServeFlags([]string{"--model", f.model, "--addr", "127.0.0.1:0", "--device-memory", f.devMemory.String(), "--threads", fmt.Sprint(f.threads)}, stderr, os.Getenv)
	if err != nil {
		return "", nil, err
	}
	logw := io.Discard
	if f.verbose {
		logw = stderr
	}
	log, err := newLogger(sf.logLevel, sf.logFormat, logw)
	if err != nil {
		return "", nil, err
	}
	fmt.Fprintf(stderr, "loading %s ...\n", f.model)
	gate := server.NewGate()
	s, sm, err := load(ctx, sf, gate, log, io.Discard, stderr, nil)
	if err != nil {
		return "", nil, err
	}
	h, _ := assemble(sf, s, sm.reg, nil, nil, log)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		s.Close(context.Background())
		sm.Close(context.Background())
		return "", nil, err
	}
	srv := server.NewHTTPServer(h, ln.Addr().String())
	go func() { _ = srv.Serve(ln) }()
	stop := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = s.Engine.Close(ctx)
		_ = srv.Shutdown(ctx)
		s.Close(ctx)
		sm.Close(ctx)
	}
	return "http://" + ln.Addr().String(), stop, nil
}

type chatMsg struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

type chatClient struct {
	base, key   string
	http        *http.Client
	history     []chatMsg
	maxTokens   int
	temperature float64
}

func (c *chatClient) loop(ctx context.Context, in io.Reader, out io.Writer) error {
	model, err := c.modelName(ctx)
	if err != nil {
		return err
	}
	tty := false
	if f, ok := out.(*os.File); ok {
		tty = isTerminal(f)
	}
	fmt.Fprintf(out, "chatting with %s at %s — /bye to leave, /clear to start over\n", model, c.base)
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for {
		if tty {
			fmt.Fprint(out, ">>> ")
		}
		if !sc.Scan() {
			fmt.Fprintln(out)
			return sc.Err()
		}
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "":
			continue
		case line == "/bye":
			fmt.Fprintln(out, "bye")
			return nil
		case line == "/clear":
			c.history = c.history[:0]
			fmt.Fprintln(out, "(conversation cleared)")
			continue
		case strings.HasPrefix(line, "/"):
			fmt.Fprintf(out, "unknown command %s (/bye, /clear)\n", line)
			continue
		}
		c.history = append(c.history, chatMsg{Role: "user", Content: line})
		answer, err := c.ask(ctx, out)
		if err != nil {
			c.history = c.history[:len(c.history)-1]
			fmt.Fprintf(out, "\nerror: %v\n", err)
			if ctx.Err() != nil {
				return ctx.Err()
			}
			continue
		}
		c.history = append(c.history, chatMsg{Role: "assistant", Content: answer})
	}
}

func (c *chatClient) do(ctx context.Context, method, path string, body any) (*http.Response, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	if c.key != "" {
		req.Header.Set("Authorization", "Bearer "+c.key)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		var e struct {
			Error struct{ Message string } `json:"error"`
		}
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		if json.Unmarshal(b, &e) == nil && e.Error.Message != "" {
			return nil, fmt.Errorf("%s %s: %d: %s", method, path, resp.StatusCode, e.Error.Message)
		}
		return nil, fmt.Errorf("%s %s: %d: %s", method, path, resp.StatusCode, strings.TrimSpace(string(b)))
	}
	return resp, nil
}

func (c *chatClient) modelName(ctx context.Context) (string, error) {
	resp, err := c.do(ctx, http.MethodGet, "/v1/models", nil)
	if err != nil {
		return "", fmt.Errorf("chat: %w", err)
	}
	defer resp.Body.Close()
	var list struct {
		Data []struct{ ID string } `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil || len(list.Data) == 0 {
		return "", fmt.Errorf("chat: %s/v1/models lists no model (%v)", c.base, err)
	}
	return list.Data[0].ID, nil
}

// ask sends the conversation and streams the answer to out as it comes.
func (c *chatClient) ask(ctx context.Context, out io.Writer) (string, error) {
	resp, err := c.do(ctx, http.MethodPost, "/v1/chat/completions", map[string]any{
		"messages": c.history, "stream": true, "max_tokens": c.maxTokens, "temperature": c.temperature,
	})
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var answer strings.Builder
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		if data == "[DONE]" {
			fmt.Fprintln(out)
			return answer.String(), nil
		}
		var chunk struct {
			Choices []struct {
				Delta struct {
					Content string `json:"content"`
				} `json:"delta"`
			} `json:"choices"`
			Error *struct{ Message string } `json:"error"`
		}
		if err := json.Unmarshal([]byte(data), &chunk); err != nil {
			return answer.String(), fmt.Errorf("bad stream chunk: %w", err)
		}
		if chunk.Error != nil {
			return answer.String(), errors.New(chunk.Error.Message)
		}
		for _, ch := range chunk.Choices {
			answer.WriteString(ch.Delta.Content)
			fmt.Fprint(out, ch.Delta.Content)
		}
	}
	if err := sc.Err(); err != nil {
		return answer.String(), err
	}
	return answer.String(), errors.New("the stream ended without [DONE]")
}
