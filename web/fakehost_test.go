package web

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"github.com/kvhost/kvhost/host/budget"
	"io"
	"net/http"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeHost is the backend the end-to-end tests drive the page against: the
// dashboard handler plus fakes of /v1/memory, /v1/models, a streaming
// /v1/completions and the sampler admin routes, so the tests depend on no
// other package's progress.
type fakeHost struct {
	t      *testing.T
	memory []byte

	// adminOn is whether the page is told the admin API is on.
	adminOn bool
	// chatReply is what /v1/chat/completions streams, word by word.
	chatReply string

	mu         sync.Mutex
	samplers   map[string]*Plugin
	chatBodies [][]byte // /v1/chat/completions request bodies
	puts       int      // accepted PUTs
	lastBody   []byte   // last /v1/completions request body
	release    chan struct{}
	streamed   []string
	tokensOut  int64
	runStarted time.Time

	// apiKey, when set, is required as a bearer token on every path but
	// the static shell (IsStatic), as kvhost's server does with --api-key;
	// authorized and refused count the requests that carried it or not.
	apiKey     string
	authorized map[string]int
	refused    map[string]int
}

const (
	adminKey = "admin-secret"
	// The fake streams streamHead tokens, waits for release, then the rest.
	streamHead = 3
)

// streamTokens is the completion's text token by token; streamPieces the
// same tokens as a SentencePiece tokenizer names them (what the logprobs'
// "tokens" carry), which the page must not show as text.
var (
	streamTokens = []string{" there", " was", " a", " little", " robot", "\n", " who", " loved", " to", " count", "."}
	streamPieces = []string{"▁there", "▁was", "▁a", "▁little", "▁robot", "<0x0A>", "▁who", "▁loved", "▁to", "▁count", "."}
)

func newFakeHost(t *testing.T) *fakeHost {
	mem, err := os.ReadFile("testdata/memory.json")
	if err != nil {
		t.Fatal(err)
	}
	return &fakeHost{t: t, memory: mem, release: make(chan struct{}), runStarted: time.Now(), adminOn: true,
		chatReply:  "Once there was a cat.\nIt liked naps.",
		authorized: map[string]int{}, refused: map[string]int{},
		samplers: map[string]*Plugin{
			"typical": {Kind: "sampler", Name: "typical", Version: "1.0.0", ABI: 1, Source: "builtin", SHA256: strings.Repeat("ab", 32), Calls: 1200, Failures: 2,
				PreOps: []string{"temperature"},
				Params: []Param{{Name: "temperature", Type: "float", Min: 0, Max: 2, Default: 0.8}, {Name: "mass", Type: "float", Min: 0, Max: 1, Default: 0.9}}},
			"mirostat": {Kind: "sampler", Name: "mirostat", Version: "0.3.1", ABI: 1, Source: "/var/lib/kvhost/plugins/mirostat.wasm", SHA256: strings.Repeat("cd", 32), Calls: 77,
				Params: []Param{{Name: "tau", Type: "float", Min: 0, Max: 10, Default: 5}, {Name: "window", Type: "int", Min: 1, Max: 64, Default: 8}}},
		}}
}

func (f *fakeHost) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/memory", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(f.memory)
	})
	mux.HandleFunc("GET /v1/models", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"object":"list","data":[{"id":"stories260K","object":"model"}]}`)
	})
	mux.HandleFunc("POST /v1/completions", f.completions)
	mux.HandleFunc("POST /v1/chat/completions", f.chat)
	mux.HandleFunc("/admin/samplers/{name}", f.admin)
	mux.Handle("/", Handler(Options{
		Work:    f.work,
		Plugins: f.plugins,
		Plan: func(ctx context.Context, model, gpu string) (any, error) {
			if gpu == "L40S" {
				// What host/plan answers when the model does not fit.
				return nil, &budget.InsufficientMemoryError{Phase: "post-capture-kv", NeedBytes: 9172942848, HaveBytes: 7728449520,
					Knob: "--device-memory", Suggest: "25942MiB", SuggestValue: 25942 << 20, Minimum: 27201714192}
			}
			var snap map[string]any
			if err := json.Unmarshal(f.memory, &snap); err != nil {
				return nil, err
			}
			return map[string]any{"input": map[string]any{"model": model, "device": gpu}, "ledger": snap,
				"peaks":        []map[string]any{{"name": "decode graphs", "bytes": 700 << 20}, {"name": "prefill activations", "bytes": 1100 << 20}},
				"largest_peak": "prefill activations"}, nil
		},
		PlanModels:     []string{"llama-3.1-8b", "qwen2-7b", "stories260K"},
		PlanGPUs:       []string{"H100-80GB", "H200", "L40S"},
		DefaultSampler: "typical",
		Admin:          f.adminOn,
	}))
	if f.apiKey != "" {
		return f.requireKey(mux)
	}
	return mux
}

// requireKey answers 401 (kvhost's body) to a request without the API key
// unless it is for the static shell or /admin (which has its own key).
func (f *fakeHost) requireKey(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if IsStatic(r.URL.Path) || strings.HasPrefix(r.URL.Path, "/admin/") {
			next.ServeHTTP(w, r)
			return
		}
		f.mu.Lock()
		ok := r.Header.Get("Authorization") == "Bearer "+f.apiKey
		if ok {
			f.authorized[r.URL.Path]++
		} else {
			f.refused[r.URL.Path]++
		}
		f.mu.Unlock()
		if !ok {
			w.Header().Set("WWW-Authenticate", `Bearer realm="kvhost"`)
			adminError(w, http.StatusUnauthorized, "a valid API key is required: send it as \"Authorization: Bearer <key>\"")
			return
		}
		next.ServeHTTP(w, r)
	})
}

func (f *fakeHost) work(ctx context.Context) (any, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	// A load that moves between polls: tokens flow and the pools breathe.
	el := time.Since(f.runStarted).Seconds()
	used := 1096 + int(400*(1+sinApprox(el)))
	return map[string]any{
		"time": time.Now(), "running": 3, "waiting": 1, "preemptions": 2, "steps": int(el * 50),
		"graph_steps": int(el * 40), "eager_decode_steps": 3, "kv_usage": float64(used) / 4096,
		"kv_pools": []map[string]any{
			{"name": "full", "kind": "full", "unit": "token", "page_size": 16, "pages": 4096, "free_pages": 4096 - used, "cached_pages": 512, "cached_tokens": 512 * 16, "capacity_tokens": 65536, "used_tokens": (used - 512) * 16},
			{"name": "swa", "kind": "window", "unit": "token", "window": 4096, "page_size": 16, "pages": 1024, "free_pages": 200, "cached_pages": 256, "cached_tokens": 256 * 16, "capacity_tokens": 16384, "used_tokens": (824 - 256) * 16},
			{"name": "state", "kind": "state", "unit": "request", "page_size": 1, "pages": 64, "free_pages": 61, "slots": 64, "used_slots": 3},
		},
		"requests": 41, "errors": 1, "tokens_in": int(el * 300), "tokens_out": int(el*120) + int(f.tokensOut),
		"recent_errors": []map[string]any{{"time": time.Now().Add(-time.Minute), "route": "/v1/completions", "kind": "queue_full",
			"status": 429, "message": "the request queue is full; retry later", "request_id": "4f1c2a9e8b7d6c5e4f1c2a9e8b7d6c5e"}},
		"prefix_cache": map[string]any{"queries_tokens": 4000, "hits_tokens": 3300, "block_tokens": 16, "nodes": 9, "tokens": 12288,
			"evictable_tokens": 12288, "pages": []int{512, 256}, "evictable": []int{512, 256}},
	}, nil
}

// sinApprox is a cheap bounded oscillation in [-1, 1].
func sinApprox(x float64) float64 {
	p := x - 4*float64(int(x/4))
	if p < 2 {
		return p - 1
	}
	return 3 - p
}

func (f *fakeHost) plugins(ctx context.Context) ([]Plugin, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := []Plugin{
		{Kind: "configurator", Name: "mha", Version: "1.0.0", ABI: 1, Source: "builtin", SHA256: strings.Repeat("01", 32), Calls: 2},
		{Kind: "configurator", Name: "swa", Version: "1.0.0", ABI: 1, Source: "builtin", SHA256: strings.Repeat("02", 32), Calls: 0},
	}
	for _, name := range []string{"mirostat", "typical"} {
		if p, ok := f.samplers[name]; ok {
			out = append(out, *p)
		}
	}
	return out, nil
}

var validName = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,63}$`)

func adminError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]string{"message": msg, "type": "invalid_request_error"}})
}

func (f *fakeHost) admin(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Authorization") != "Bearer "+adminKey {
		adminError(w, http.StatusUnauthorized, "admin: missing or wrong admin key")
		return
	}
	name := r.PathValue("name")
	if !validName.MatchString(name) {
		adminError(w, http.StatusBadRequest, fmt.Sprintf("admin: bad sampler name %q", name))
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	switch r.Method {
	case http.MethodPut:
		b, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		if err != nil || len(b) < 8 || string(b[:4]) != "\x00asm" {
			adminError(w, http.StatusBadRequest, "admin: not a wasm module")
			return
		}
		if r.Header.Get("Content-Type") != "application/wasm" {
			adminError(w, http.StatusUnsupportedMediaType, "admin: want application/wasm")
			return
		}
		p, ok := f.samplers[name]
		if !ok {
			p = &Plugin{Kind: "sampler", Name: name, ABI: 1, Version: "1.0.-1"}
			f.samplers[name] = p
		}
		var major, minor, patch int
		_, _ = fmt.Sscanf(p.Version, "%d.%d.%d", &major, &minor, &patch)
		sum := sha256.Sum256(b)
		p.Version, p.SHA256, p.Source, p.Calls, p.Failures = fmt.Sprintf("%d.%d.%d", major, minor, patch+1), hex.EncodeToString(sum[:]), "upload", 0, 0
		f.puts++
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"name": name, "version": p.Version, "sha256": p.SHA256})
	case http.MethodDelete:
		if _, ok := f.samplers[name]; !ok {
			adminError(w, http.StatusNotFound, "admin: no sampler "+name)
			return
		}
		delete(f.samplers, name)
		w.WriteHeader(http.StatusNoContent)
	default:
		adminError(w, http.StatusMethodNotAllowed, "admin: use PUT or DELETE")
	}
}

// completions streams streamTokens as OpenAI completion chunks with
// logprobs, pausing after streamHead tokens until the test releases it, so
// the test can see the page render a partial stream.
func (f *fakeHost) completions(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	f.mu.Lock()
	f.lastBody = b
	f.mu.Unlock()
	var req struct {
		Stream   bool `json:"stream"`
		Logprobs int  `json:"logprobs"`
	}
	if err := json.Unmarshal(b, &req); err != nil || !req.Stream {
		adminError(w, http.StatusBadRequest, "fake: want a JSON body with stream=true")
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	fl := w.(http.Flusher)
	offset := 0 // bytes of generated text before this token, as the server counts
	for i, tok := range streamTokens {
		if i == streamHead {
			select {
			case <-f.release:
			case <-r.Context().Done():
				return
			case <-time.After(30 * time.Second):
				return
			}
		}
		lp := -0.1 - 0.3*float64(i%4)
		piece := streamPieces[i]
		choice := map[string]any{"index": 0, "text": tok, "finish_reason": nil, "logprobs": map[string]any{
			"tokens": []string{piece}, "token_logprobs": []float64{lp},
			"top_logprobs": []map[string]float64{{piece: lp, "▁the": lp - 1.2, "▁and": lp - 2.5}},
			"text_offset":  []int{offset},
		}}
		offset += len(tok)
		if i == len(streamTokens)-1 {
			choice["finish_reason"] = "length"
		}
		chunk, _ := json.Marshal(map[string]any{"id": "cmpl-1", "object": "text_completion", "model": "stories260K", "choices": []any{choice}})
		fmt.Fprintf(w, "data: %s\n\n", chunk)
		fl.Flush()
		f.mu.Lock()
		f.streamed = append(f.streamed, tok)
		f.tokensOut++
		f.mu.Unlock()
		time.Sleep(15 * time.Millisecond)
	}
	fmt.Fprint(w, "data: [DONE]\n\n")
	fl.Flush()
}

// chat streams chatReply as OpenAI chat chunks and keeps the request.
func (f *fakeHost) chat(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	f.mu.Lock()
	f.chatBodies = append(f.chatBodies, b)
	f.mu.Unlock()
	w.Header().Set("Content-Type", "text/event-stream")
	fl := w.(http.Flusher)
	send := func(delta map[string]any, finish any) {
		chunk, _ := json.Marshal(map[string]any{"id": "chatcmpl-1", "object": "chat.completion.chunk", "model": "stories260K",
			"choices": []any{map[string]any{"index": 0, "delta": delta, "finish_reason": finish}}})
		fmt.Fprintf(w, "data: %s\n\n", chunk)
		fl.Flush()
	}
	send(map[string]any{"role": "assistant", "content": ""}, nil)
	for _, word := range strings.SplitAfter(f.chatReply, " ") {
		send(map[string]any{"content": word}, nil)
		time.Sleep(5 * time.Millisecond)
	}
	send(map[string]any{}, "stop")
	fmt.Fprint(w, "data: [DONE]\n\n")
	fl.Flush()
}
