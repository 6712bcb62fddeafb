package server

import (
	"context"
	"crypto/sha256"
	"fmt"
	"log/slog"
	"net/http"
	"sync/atomic"
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

// server holds what every handler needs; all but the drain state is
// immutable after New.
type server struct {
	b       Backend
	opts    Options
	log     *slog.Logger
	created int64 // unix seconds, reported as the model's creation time
	keys    [][sha256.Size]byte
	// selfChecked are the routes that check the key themselves
	// (inference); written while New builds the router, then read-only.
	selfChecked map[string]bool

	drained  atomic.Pointer[string] // non-nil: the drain reason
	inFlight atomic.Int64
}

// Server is the HTTP handler New returns: an http.Handler plus the drain
// controls graceful shutdown needs.
type Server struct {
	s *server
	h http.Handler
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.h.ServeHTTP(w, r) }

// Drain stops admitting inference requests: from now on they get 503 with
// code "draining" and reason in the message, and /health answers 503 so load
// balancers stop routing here. Requests already running (streams included)
// are not touched and finish normally; InFlight tells when they have. Drain
// is idempotent; a later call replaces the reason.
func (s *Server) Drain(reason string) { s.s.drained.Store(&reason) }

// Draining reports whether Drain was called.
func (s *Server) Draining() bool { return s.s.drained.Load() != nil }

// InFlight is the number of inference requests being served now (admitted
// before the drain, or any time without one).
func (s *Server) InFlight() int { return int(s.s.inFlight.Load()) }

// New returns the server for b. It panics if opts fails Validate: callers
// (host/cmd) validate flags first, so a panic here is a programming error.
func New(b Backend, opts Options) *Server {
	if err := opts.Validate(); err != nil {
		panic(err)
	}
	opts = opts.withDefaults()
	s := &server{b: b, opts: opts, log: opts.Logger, created: time.Now().Unix(), selfChecked: map[string]bool{}}
	for _, k := range opts.APIKeys {
		s.keys = append(s.keys, sha256.Sum256([]byte(k)))
	}

	r := chi.NewRouter()
	r.Use(s.requestIDs)
	if len(opts.AllowedOrigins) > 0 {
		r.Use(corsMiddleware(opts.AllowedOrigins)) // before the key: a 401 still carries CORS headers
	}
	r.Use(s.logRequests, s.recoverPanics, s.requireKey)
	notFound := func(w http.ResponseWriter, r *http.Request) {
		writeAPIError(w, http.StatusNotFound, apiError{
			Message: fmt.Sprintf("no route for %s %s", r.Method, r.URL.Path),
			Type:    "invalid_request_error", Code: "not_found",
		})
	}
	r.NotFound(notFound)
	r.MethodNotAllowed(func(w http.ResponseWriter, r *http.Request) {
		writeAPIError(w, http.StatusMethodNotAllowed, apiError{
			Message: fmt.Sprintf("method %s not allowed on %s", r.Method, r.URL.Path),
			Type:    "invalid_request_error", Code: "method_not_allowed",
		})
	})
	r.Get("/health", s.handleHealth)
	r.Get("/ready", s.handleReady)
	r.Get("/v1/models", s.handleModels)
	r.Get("/v1/models/*", s.handleModel)
	s.extraRoutes(r)
	r.Post("/v1/completions", s.inference("/v1/completions", s.handleCompletions))
	r.Post("/v1/chat/completions", s.inference("/v1/chat/completions", s.handleChatCompletions))
	r.Post("/generate", s.inference("/generate", s.handleGenerate))
	if opts.Memory != nil {
		r.Method(http.MethodGet, "/v1/memory", opts.Memory)
	}
	if opts.Metrics != nil {
		r.Method(http.MethodGet, "/metrics", opts.Metrics)
	}
	if opts.Admin != nil {
		// The admin handler routes on the full path: hide chi's routing
		// state so a chi router inside starts from the URL again.
		full := http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			opts.Admin.ServeHTTP(w, req.WithContext(context.WithValue(req.Context(), chi.RouteCtxKey, nil)))
		})
		r.Handle("/admin", full)
		r.Handle("/admin/*", full)
	}
	if opts.Web != nil {
		// Unknown API paths stay JSON 404s instead of reaching the UI.
		r.HandleFunc("/v1/*", notFound)
		r.Method(http.MethodGet, "/*", opts.Web)
	}
	return &Server{s: s, h: r}
}
