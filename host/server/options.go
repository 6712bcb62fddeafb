package server

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"time"

	"github.com/kvhost/kvhost/host/sampling"
)

// Options configure New. The zero value is usable.
type Options struct {
	// MaxBodyBytes bounds a request body; larger bodies get 413.
	// Default 4 MiB.
	MaxBodyBytes int64 `json:"max_body_bytes"`
	// MaxTokensCap bounds max_tokens: the default (context minus prompt) is
	// clipped to it and an explicit larger value is refused with 400.
	// 0 means no cap beyond the context window.
	MaxTokensCap int `json:"max_tokens_cap"`
	// MaxPromptTokens bounds a prompt's length in tokens (after chat
	// rendering and tokenization); longer prompts get a 400 stating the
	// limit. 0 means no cap beyond the context window.
	MaxPromptTokens int `json:"max_prompt_tokens"`
	// MaxPrompts bounds the prompts of one /v1/completions batch request
	// (prompt given as an array). Default 16.
	MaxPrompts int `json:"max_prompts"`
	// MaxN bounds n, the choices per prompt. Default 16.
	MaxN int `json:"max_n"`
	// StreamWriteTimeout is the deadline given to each response write
	// (every SSE chunk, every JSON body): a client that stops reading is
	// cut off after it instead of holding its generation forever. It
	// replaces http.Server.WriteTimeout, which would bound a whole stream
	// (see NewHTTPServer). Default 30s.
	StreamWriteTimeout time.Duration `json:"stream_write_timeout"`
	// APIKeys, when not empty, are the bearer tokens every route requires
	// ("Authorization: Bearer KEY") but /health, /ready, the Web UI's
	// static shell (web.IsStatic), /admin (which checks its own key) and
	// CORS preflights: /v1/..., /generate, /metrics and the Web UI's JSON
	// under /ui/api/ included. Keys are compared in constant time and
	// never logged.
	APIKeys []string `json:"-"`
	// PublicMetrics serves GET /metrics without the API key: for scrapers
	// that send none, such as the Gateway API inference extension's
	// endpoint picker, which reads model servers' /metrics unauthenticated
	// (vLLM's is open). The metrics hold counts and latencies, no request
	// content. Every other route keeps requiring the key.
	PublicMetrics bool `json:"public_metrics"`
	// AllowedOrigins enables CORS for these browser origins ("*" for any,
	// or scheme://host[:port] each); empty (the default) sends no CORS
	// headers, so pages on other origins cannot read responses.
	AllowedOrigins []string `json:"allowed_origins"`
	// EmbeddingPooling is how /v1/embeddings pools a prompt's final hidden
	// states: "mean" (the default) or "last" (the last token's).
	EmbeddingPooling string `json:"embedding_pooling"`

	// Observer, when set, receives request lifecycle events (metrics).
	Observer Observer `json:"-"`
	// Sampler compiles the sampling of every request that samples through
	// a policy (sampling.UsesPolicy): its fields, and the "sampler" /
	// "sampler_params" extension. A request that names a sampler while
	// Sampler is nil gets 400; without it, the engine samples on the host.
	Sampler SamplerCompiler `json:"-"`

	// Mount points for other parts of the host; nil leaves the route out
	// (404). Memory serves GET /v1/memory; Metrics serves GET /metrics
	// (both behind APIKeys; scrapers send the key); Admin serves every method under
	// /admin and /admin/... with the full path (it enforces its own key);
	// Web serves GET on every path no API route claims (/v1/... unknown
	// paths stay JSON 404s).
	Memory  http.Handler `json:"-"`
	Metrics http.Handler `json:"-"`
	Admin   http.Handler `json:"-"`
	Web     http.Handler `json:"-"`

	// StallThreshold is how long the engine may go without completing a
	// step while it has work before GET /health and /ready answer 503
	// "engine stalled" (a Backend implementing Liveness). Default 30s.
	StallThreshold time.Duration `json:"stall_threshold"`

	// Logger receives request logs and internal errors; nil discards them.
	Logger *slog.Logger `json:"-"`
}

const (
	defaultMaxBodyBytes       = 4 << 20
	defaultMaxPrompts         = 16
	defaultMaxN               = 16
	defaultStreamWriteTimeout = 30 * time.Second
	defaultStallThreshold     = 30 * time.Second
	engineMaxN                = 64 // the engine's own bound on Request.N
)

// Validate names the first field out of range.
func (o Options) Validate() error {
	switch {
	case o.MaxBodyBytes < 0:
		return fmt.Errorf("server: max_body_bytes %d must be >= 0 (0 selects %d)", o.MaxBodyBytes, defaultMaxBodyBytes)
	case o.MaxTokensCap < 0:
		return fmt.Errorf("server: max_tokens_cap %d must be >= 0 (0 means no cap)", o.MaxTokensCap)
	case o.MaxPromptTokens < 0:
		return fmt.Errorf("server: max_prompt_tokens %d must be >= 0 (0 means no cap)", o.MaxPromptTokens)
	case o.MaxPrompts < 0:
		return fmt.Errorf("server: max_prompts %d must be >= 0 (0 selects %d)", o.MaxPrompts, defaultMaxPrompts)
	case o.MaxN < 0 || o.MaxN > engineMaxN:
		return fmt.Errorf("server: max_n %d is out of range [0, %d] (0 selects %d)", o.MaxN, engineMaxN, defaultMaxN)
	case o.StreamWriteTimeout < 0:
		return fmt.Errorf("server: stream_write_timeout %v must be >= 0 (0 selects %v)", o.StreamWriteTimeout, defaultStreamWriteTimeout)
	case o.StallThreshold < 0:
		return fmt.Errorf("server: stall_threshold %v must be >= 0 (0 selects %v)", o.StallThreshold, defaultStallThreshold)
	case o.EmbeddingPooling != "" && o.EmbeddingPooling != PoolingMean && o.EmbeddingPooling != PoolingLast:
		return fmt.Errorf("server: embedding_pooling %q must be %q or %q", o.EmbeddingPooling, PoolingMean, PoolingLast)
	}
	if err := validOrigins(o.AllowedOrigins); err != nil {
		return err
	}
	for i, k := range o.APIKeys {
		if k == "" {
			return fmt.Errorf("server: api key %d is empty", i)
		}
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
	if o.MaxN == 0 {
		o.MaxN = defaultMaxN
	}
	if o.StreamWriteTimeout == 0 {
		o.StreamWriteTimeout = defaultStreamWriteTimeout
	}
	if o.StallThreshold == 0 {
		o.StallThreshold = defaultStallThreshold
	}
	if o.EmbeddingPooling == "" {
		o.EmbeddingPooling = PoolingMean
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return o
}

// SamplerCompiler compiles a request's sampling for the engine's policy
// registry: *sampling.Registry. policy is the "sampler" field ("" for the
// default), params "sampler_params", req the request's own sampling
// fields. A *sampling.ParamError or *sampling.UnknownPolicyError becomes
// a 400 naming the field.
type SamplerCompiler interface {
	Compile(policy string, params map[string]any, req sampling.Request) (sampling.Compiled, error)
}

// Observer receives the lifecycle of inference requests (POST
// /v1/completions, /v1/chat/completions, /generate), for metrics. route is
// the route's path. Calls are synchronous on the request's goroutine and
// concurrent across requests: implementations must be safe for concurrent
// use and must not block.
//
// Per request: RequestStart, then FirstToken once (time from RequestStart to
// the first generated token of any choice), NextToken for every later token
// (time since the previous token of the same choice), Error for each failure
// with one of the ErrKind constants, and RequestEnd last (the HTTP status:
// 200 for a stream even if it later carried an error event).
type Observer interface {
	RequestStart(route string)
	FirstToken(route string, ttft time.Duration)
	NextToken(route string, itl time.Duration)
	Error(route string, kind string)
	RequestEnd(route string, status int, elapsed time.Duration)
}

// PromptObserver is the optional Observer capability of counting prompt
// tokens: TokensIn is called once per admitted engine request.
type PromptObserver interface {
	TokensIn(route string, n int)
}

// ErrorDetailObserver is the optional Observer capability of learning what
// a failed request was told: once per failed request, after RequestEnd, with
// the last error kind, the HTTP status (200 for a stream that carried an
// error event), the message the client got and the request id.
type ErrorDetailObserver interface {
	ErrorDetail(route, kind string, status int, message, requestID string)
}

// Error kinds passed to Observer.Error.
const (
	ErrKindInvalidRequest = "invalid_request" // 400: bad JSON, types, ranges, template rejections
	ErrKindUnauthorized   = "unauthorized"    // 401: missing or wrong API key
	ErrKindTooLarge       = "too_large"       // 413: body over MaxBodyBytes
	ErrKindQueueFull      = "queue_full"      // 429: engine admission refused
	ErrKindShuttingDown   = "shutting_down"   // 503: the engine is closing
	ErrKindDraining       = "draining"        // 503: the server was drained
	ErrKindInternal       = "internal"        // 500: the server's fault
	ErrKindClientClosed   = "client_closed"   // the client left before the end
)
