package metrics

import (
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/kvhost/kvhost/host/kv"
	"github.com/kvhost/kvhost/host/kv/radix"
	"github.com/kvhost/kvhost/host/ledger"
)

// Load is the engine's load at one instant. Its fields are exactly
// engine.Stats's, so the wiring is a conversion:
//
//	Engine: func() metrics.Load { return metrics.Load(eng.Stats()) }
//
// (metrics does not import engine: the engine pulls in the model, the
// kernels and the sampler runtime, none of which a scrape needs.)
type Load struct {
	Running, Waiting int
	KVPagesTotal     int
	KVPagesFree      int
	KVPagesCached    int
	Pools            []kv.PoolStat
	Preemptions      int64
	Steps            int64
	GraphSteps       int64
	EagerDecodeSteps int64
	Prefix           *radix.Usage // nil without a prefix cache
}

// LedgerSnapshot is the part of *ledger.Ledger the metrics read.
type LedgerSnapshot interface{ Snapshot() ledger.Snapshot }

// PluginStat is one loaded plugin version as a registry reports it.
// Calls, Failures and Seconds are cumulative since the version was loaded;
// a new version starts at zero under its own labels.
type PluginStat struct {
	Kind     string  `json:"kind"` // "configurator" or "sampler"
	Name     string  `json:"name"`
	Version  string  `json:"version"`
	SHA256   string  `json:"sha256"`
	Source   string  `json:"source"` // "builtin" or a path
	Calls    uint64  `json:"calls"`
	Failures uint64  `json:"failures"`
	Seconds  float64 `json:"seconds"` // time spent in calls
	// Disabled marks a sampler policy switched off after repeated
	// failures; Fallbacks counts the rows other policies served for it.
	Disabled  bool   `json:"disabled"`
	Fallbacks uint64 `json:"fallbacks"`
}

// Sources are read at scrape time; any may be nil.
type Sources struct {
	// Engine reads the engine's load; it is called once per scrape.
	Engine func() Load
	Ledger LedgerSnapshot
	// Plugins lists every loaded plugin version (configurators and
	// samplers). It is called once per scrape and must not block.
	Plugins func() []PluginStat
	// ModelName, when set, is the model_name label of every kvhost_* and
	// vllm:* series (vLLM labels its series so).
	ModelName string
	// KVPageSize is the KV cache page size in tokens (serve's --page-size).
	// With Engine set and KVPageSize > 0, the cache geometry is exported as
	// kvhost_cache_config_info and vllm:cache_config_info (labels
	// block_size and num_gpu_blocks, value 1): the model-server protocol's
	// optional BlockSize and NumGPUBlocks, which the endpoint picker's
	// default vLLM mapping reads.
	KVPageSize int
}

// ErrorEvent is one failed request, kept for the dashboard: what kind of
// failure, the status and message the client got, and the request id that
// finds its log lines.
type ErrorEvent struct {
	Time      time.Time `json:"time"`
	Route     string    `json:"route"`
	Kind      string    `json:"kind"`
	Status    int       `json:"status,omitempty"`
	Message   string    `json:"message,omitempty"`
	RequestID string    `json:"request_id,omitempty"`
}

const recentErrors = 32

// Metrics records request events and exposes them with the sources' state.
// The zero value is not usable; call New.
type Metrics struct {
	reg *prometheus.Registry
	src Sources

	requests  *prometheus.CounterVec
	inFlight  prometheus.Gauge
	duration  *prometheus.HistogramVec
	errors    *prometheus.CounterVec
	tokensIn  *prometheus.CounterVec
	tokensOut *prometheus.CounterVec
	ttft      *prometheus.HistogramVec
	itl       *prometheus.HistogramVec
	swaps     *prometheus.CounterVec
	vllm      *vllmMetrics

	nRequests, nErrors, nIn, nOut atomic.Int64

	mu     sync.Mutex
	recent []ErrorEvent // ring, oldest first once full
	next   int
}

// Buckets for the latency histograms (seconds). TTFT spans a queued long
// prefill on the CPU device; inter-token latency spans one decode step.
var (
	TTFTBuckets     = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}
	ITLBuckets      = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5}
	RequestBuckets  = []float64{0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300}
	routeLabel      = []string{"route"}
	routeCodeLabels = []string{"route", "code"}
)

// New builds the metrics over src with a private registry, which also
// carries the Go runtime and process collectors.
func New(src Sources) *Metrics {
	m := &Metrics{reg: prometheus.NewRegistry(), src: src}
	m.requests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kvhost_http_requests_total", Help: "Inference requests finished, by route and HTTP status code.",
	}, routeCodeLabels)
	m.inFlight = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "kvhost_http_requests_in_flight", Help: "Inference requests started and not yet finished.",
	})
	m.duration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "kvhost_http_request_duration_seconds", Help: "Time from request start to its end, by route.", Buckets: RequestBuckets,
	}, routeLabel)
	m.errors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kvhost_request_errors_total", Help: "Request failures by route and kind (server.ErrKind*).",
	}, []string{"route", "kind"})
	m.tokensIn = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kvhost_prompt_tokens_total", Help: "Prompt tokens admitted, by route.",
	}, routeLabel)
	m.tokensOut = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kvhost_generation_tokens_total", Help: "Tokens generated, by route.",
	}, routeLabel)
	m.ttft = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "kvhost_time_to_first_token_seconds", Help: "Time from request start to the first generated token.", Buckets: TTFTBuckets,
	}, routeLabel)
	m.itl = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "kvhost_inter_token_latency_seconds", Help: "Time between consecutive tokens of one choice.", Buckets: ITLBuckets,
	}, routeLabel)
	m.swaps = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kvhost_sampler_swaps_total", Help: "Sampler admin operations (upload = swap to a new version, remove) by sampler, operation and result.",
	}, []string{"sampler", "op", "result"})
	m.vllm = newVLLMMetrics()
	var reg prometheus.Registerer = m.reg
	if src.ModelName != "" {
		reg = prometheus.WrapRegistererWith(prometheus.Labels{"model_name": src.ModelName}, m.reg)
	}
	reg.MustRegister(m.requests, m.inFlight, m.duration, m.errors, m.tokensIn, m.tokensOut, m.ttft, m.itl, m.swaps,
		&stateCollector{src: src})
	reg.MustRegister(m.vllm.collectors()...)
	m.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Registry is the private registry, for callers that add their own
// collectors.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Handler serves the registry in the Prometheus exposition formats
// (GET /metrics).
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg, EnableOpenMetrics: false})
}

// RequestStart implements server.Observer.
func (m *Metrics) RequestStart(route string) { m.inFlight.Inc() }

// FirstToken implements server.Observer; the first token counts as one
// generated token.
func (m *Metrics) FirstToken(route string, ttft time.Duration) {
	m.ttft.WithLabelValues(route).Observe(ttft.Seconds())
	m.vllm.vTTFT.Observe(ttft.Seconds())
	m.tokensOut.WithLabelValues(route).Inc()
	m.vllm.vGenTokens.Inc()
	m.nOut.Add(1)
}

// NextToken implements server.Observer; every call is one generated token.
func (m *Metrics) NextToken(route string, itl time.Duration) {
	m.itl.WithLabelValues(route).Observe(itl.Seconds())
	m.vllm.vITL.Observe(itl.Seconds())
	m.vllm.vTPOT.Observe(itl.Seconds())
	m.tokensOut.WithLabelValues(route).Inc()
	m.vllm.vGenTokens.Inc()
	m.nOut.Add(1)
}

// Error implements server.Observer: it counts the failure by kind.
func (m *Metrics) Error(route string, kind string) {
	m.errors.WithLabelValues(route, kind).Inc()
	m.nErrors.Add(1)
}

// ErrorDetail implements server.ErrorDetailObserver: it keeps the failed
// request, with its status, message and request id, for RecentErrors.
func (m *Metrics) ErrorDetail(route, kind string, status int, message, requestID string) {
	ev := ErrorEvent{Time: time.Now(), Route: route, Kind: kind, Status: status, Message: message, RequestID: requestID}
	m.mu.Lock()
	if len(m.recent) < recentErrors {
		m.recent = append(m.recent, ev)
	} else {
		m.recent[m.next] = ev
		m.next = (m.next + 1) % recentErrors
	}
	m.mu.Unlock()
}

// RequestEnd implements server.Observer.
func (m *Metrics) RequestEnd(route string, status int, elapsed time.Duration) {
	m.inFlight.Dec()
	m.requests.WithLabelValues(route, strconv.Itoa(status)).Inc()
	m.duration.WithLabelValues(route).Observe(elapsed.Seconds())
	m.vllm.vE2E.Observe(elapsed.Seconds())
	m.nRequests.Add(1)
}

// TokensIn counts n prompt tokens admitted on route. The Observer has no
// event for the prompt, so the server calls this once per request after
// tokenization.
func (m *Metrics) TokensIn(route string, n int) {
	if n <= 0 {
		return
	}
	m.tokensIn.WithLabelValues(route).Add(float64(n))
	m.vllm.vPromptTokens.Add(float64(n))
	m.nIn.Add(int64(n))
}

// SamplerSwap counts one sampler admin operation: op is "upload" (a new
// version compiled, self-tested and swapped in) or "remove"; err is its
// outcome.
func (m *Metrics) SamplerSwap(sampler, op string, err error) {
	result := "ok"
	if err != nil {
		result = "error"
	}
	m.swaps.WithLabelValues(sampler, op, result).Inc()
}

// RecentErrors returns the last failures, newest first.
func (m *Metrics) RecentErrors() []ErrorEvent {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]ErrorEvent, 0, len(m.recent))
	for i := range m.recent {
		// Newest is just before next once the ring is full, else last.
		j := (m.next - 1 - i + 2*len(m.recent)) % len(m.recent)
		if len(m.recent) < recentErrors {
			j = len(m.recent) - 1 - i
		}
		out = append(out, m.recent[j])
	}
	return out
}
