package server

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/kvhost/kvhost/host/engine"
	"github.com/kvhost/kvhost/host/model/chat"
)

// Tokenizer is what the server needs from a model's tokenizer.
type Tokenizer interface {
	// Encode tokenizes text; addSpecial adds the model's BOS (and whatever
	// else the tokenizer adds around a sequence).
	Encode(text string, addSpecial bool) ([]int32, error)
	Decode(ids []int32) (string, error)
	// TokenText is the display text of one token, used for logprob "token"
	// fields; it may be a fragment of a multi-byte character.
	TokenText(id int32) string
	// TokenBytes is the exact bytes one token contributes to the output.
	TokenBytes(id int32) []byte
	// EOG reports an end-of-generation token (EOS, EOT, ...), whose text is
	// never part of a completion.
	EOG(id int32) bool
}

// Backend is the model the server fronts.
type Backend interface {
	ModelName() string
	ContextLen() int
	Tokenizer() Tokenizer
	// Chat is the model's chat template; never nil (chat.New("") gives the
	// fallback template).
	Chat() *chat.Template
	Submit(ctx context.Context, req engine.Request) (*engine.Stream, error)
}

// HealthChecker is an optional Backend capability: when implemented, GET
// /health answers 503 while Health returns an error (loading, draining).
type HealthChecker interface {
	Health(ctx context.Context) error
}

// Options configure New. The zero value is usable.
type Options struct {
	// MaxBodyBytes bounds a request body; larger bodies get 413.
	// Default 4 MiB.
	MaxBodyBytes int64 `json:"max_body_bytes"`
	// MaxTokensCap bounds max_tokens: the default (context minus prompt) is
	// clipped to it and an explicit larger value is refused with 400.
	// 0 means no cap beyond the context window.
	MaxTokensCap int `json:"max_tokens_cap"`
	// MaxPrompts bounds the prompts of one /v1/completions batch request
	// (prompt given as an array). Default 16.
	MaxPrompts int `json:"max_prompts"`
	// Logger receives request logs and internal errors; nil discards them.
	Logger *slog.Logger `json:"-"`
}

const (
	defaultMaxBodyBytes = 4 << 20
	defaultMaxPrompts   = 16
)

// Validate names the first field out of range.
func (o Options) Validate() error {
	switch {
	case o.MaxBodyBytes < 0:
		return fmt.Errorf("server: max_body_bytes %d must be >= 0 (0 selects %d)", o.MaxBodyBytes, defaultMaxBodyBytes)
	case o.MaxTokensCap < 0:
		return fmt.Errorf("server: max_tokens_cap %d must be >= 0 (0 means no cap)", o.MaxTokensCap)
	case o.MaxPrompts < 0:
		return fmt.Errorf("server: max_prompts %d must be >= 0 (0 selects %d)", o.MaxPrompts, defaultMaxPrompts)
	}
	return nil
}

// withDefaults returns a copy with zero fields filled in.
func (o Options) withDefaults() Options {
	if o.MaxBodyBytes == 0 {
		o.MaxBodyBytes = defaultMaxBodyBytes
	}
	if o.MaxPrompts == 0 {
		o.MaxPrompts = defaultMaxPrompts
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return o
}

// server holds what every handler needs; it is immutable after New.
type server struct {
	b       Backend
	opts    Options
	log     *slog.Logger
	created int64 // unix seconds, reported as the model's creation time
}

// New returns the HTTP handler serving b. It panics if opts fails Validate:
// callers (host/cmd) validate flags first, so a panic here is a programming
// error.
func New(b Backend, opts Options) http.Handler {
	if err := opts.Validate(); err != nil {
		panic(err)
	}
	opts = opts.withDefaults()
	s := &server{b: b, opts: opts, log: opts.Logger, created: time.Now().Unix()}

	r := chi.NewRouter()
	r.Use(s.logRequests, s.recoverPanics)
	r.NotFound(func(w http.ResponseWriter, r *http.Request) {
		writeAPIError(w, http.StatusNotFound, apiError{
			Message: fmt.Sprintf("no route for %s %s", r.Method, r.URL.Path),
			Type:    "invalid_request_error", Code: "not_found",
		})
	})
	r.MethodNotAllowed(func(w http.ResponseWriter, r *http.Request) {
		writeAPIError(w, http.StatusMethodNotAllowed, apiError{
			Message: fmt.Sprintf("method %s not allowed on %s", r.Method, r.URL.Path),
			Type:    "invalid_request_error", Code: "method_not_allowed",
		})
	})
	r.Get("/health", s.handleHealth)
	r.Get("/v1/models", s.handleModels)
	r.Post("/v1/completions", s.handleCompletions)
	r.Post("/v1/chat/completions", s.handleChatCompletions)
	return r
}

func (s *server) handleHealth(w http.ResponseWriter, r *http.Request) {
	if hc, ok := s.b.(HealthChecker); ok {
		if err := hc.Health(r.Context()); err != nil {
			writeAPIError(w, http.StatusServiceUnavailable, apiError{
				Message: fmt.Sprintf("not ready: %v", err),
				Type:    "service_unavailable", Code: "not_ready",
			})
			return
		}
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

type modelCard struct {
	ID          string `json:"id"`
	Object      string `json:"object"`
	Created     int64  `json:"created"`
	OwnedBy     string `json:"owned_by"`
	MaxModelLen int    `json:"max_model_len"`
}

type modelList struct {
	Object string      `json:"object"`
	Data   []modelCard `json:"data"`
}

func (s *server) handleModels(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, modelList{
		Object: "list",
		Data: []modelCard{{
			ID: s.b.ModelName(), Object: "model", Created: s.created,
			OwnedBy: "kvhost", MaxModelLen: s.b.ContextLen(),
		}},
	})
}
