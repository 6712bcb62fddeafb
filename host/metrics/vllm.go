package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Buckets of the per-request histograms, as vLLM's: request latencies span
// seconds to hours, token counts 1 to a million in 1-2-5 steps.
var (
	PhaseBuckets = []float64{0.3, 0.5, 0.8, 1, 1.5, 2, 2.5, 5, 10, 15, 20, 30, 40, 50, 60, 120, 240, 480, 960, 1920, 7680}
	TokenBuckets = []float64{1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000, 100000, 200000, 500000, 1000000}
)

// vllmMetrics are the per-request histograms and counters under kvhost's
// names and, with the same values, under the names vLLM exports, so
// dashboards and autoscalers built for vLLM read kvhost unchanged. Every
// series carries model_name (a constant label of the registerer, see New).
type vllmMetrics struct {
	queue, prefill, decode    prometheus.Histogram
	promptLen, genLen         prometheus.Histogram
	success                   *prometheus.CounterVec
	vQueue, vPrefill, vDecode prometheus.Histogram
	vPromptLen, vGenLen       prometheus.Histogram
	vSuccess                  *prometheus.CounterVec
	vTTFT, vITL, vTPOT, vE2E  prometheus.Histogram
	vPromptTokens, vGenTokens prometheus.Counter
}

func newVLLMMetrics() *vllmMetrics {
	h := func(name, help string, b []float64) prometheus.Histogram {
		return prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, Help: help, Buckets: b})
	}
	c := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
	}
	reason := []string{"finished_reason"}
	return &vllmMetrics{
		queue:         h("kvhost_request_queue_time_seconds", "Time a request waited in the queue before the scheduler first ran it.", PhaseBuckets),
		prefill:       h("kvhost_request_prefill_time_seconds", "Time from a request's first scheduling to its first generated token.", PhaseBuckets),
		decode:        h("kvhost_request_decode_time_seconds", "Time from a request's first generated token to its last.", PhaseBuckets),
		promptLen:     h("kvhost_request_prompt_tokens", "Prompt length of finished requests, in tokens.", TokenBuckets),
		genLen:        h("kvhost_request_generation_tokens", "Tokens generated per finished request (all choices).", TokenBuckets),
		success:       prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kvhost_request_success_total", Help: "Choices finished, by finish reason (stop, length, embed, abort)."}, reason),
		vQueue:        h("vllm:request_queue_time_seconds", "Alias of kvhost_request_queue_time_seconds under vLLM's name.", PhaseBuckets),
		vPrefill:      h("vllm:request_prefill_time_seconds", "Alias of kvhost_request_prefill_time_seconds under vLLM's name.", PhaseBuckets),
		vDecode:       h("vllm:request_decode_time_seconds", "Alias of kvhost_request_decode_time_seconds under vLLM's name.", PhaseBuckets),
		vPromptLen:    h("vllm:request_prompt_tokens", "Alias of kvhost_request_prompt_tokens under vLLM's name.", TokenBuckets),
		vGenLen:       h("vllm:request_generation_tokens", "Alias of kvhost_request_generation_tokens under vLLM's name.", TokenBuckets),
		vSuccess:      prometheus.NewCounterVec(prometheus.CounterOpts{Name: "vllm:request_success_total", Help: "Alias of kvhost_request_success_total under vLLM's name."}, reason),
		vTTFT:         h("vllm:time_to_first_token_seconds", "Alias of kvhost_time_to_first_token_seconds (all routes) under vLLM's name.", TTFTBuckets),
		vITL:          h("vllm:inter_token_latency_seconds", "Alias of kvhost_inter_token_latency_seconds (all routes) under vLLM's name.", ITLBuckets),
		vTPOT:         h("vllm:time_per_output_token_seconds", "Alias of kvhost_inter_token_latency_seconds under vLLM's older name.", ITLBuckets),
		vE2E:          h("vllm:e2e_request_latency_seconds", "Alias of kvhost_http_request_duration_seconds (all routes) under vLLM's name.", RequestBuckets),
		vPromptTokens: c("vllm:prompt_tokens_total", "Alias of kvhost_prompt_tokens_total (all routes) under vLLM's name."),
		vGenTokens:    c("vllm:generation_tokens_total", "Alias of kvhost_generation_tokens_total (all routes) under vLLM's name."),
	}
}

func (v *vllmMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{v.queue, v.prefill, v.decode, v.promptLen, v.genLen, v.success,
		v.vQueue, v.vPrefill, v.vDecode, v.vPromptLen, v.vGenLen, v.vSuccess,
		v.vTTFT, v.vITL, v.vTPOT, v.vE2E, v.vPromptTokens, v.vGenTokens}
}

// RequestPhases implements server.PhaseObserver: one engine request ended
// (all its choices). Its times and lengths feed the histograms under both
// names; each choice's finish reason counts once.
func (m *Metrics) RequestPhases(route string, queue, prefill, decode time.Duration, promptTokens, generationTokens int, finishReasons []string) {
	v := m.vllm
	for _, h := range []struct {
		a, b prometheus.Histogram
		x    float64
	}{
		{v.queue, v.vQueue, queue.Seconds()}, {v.prefill, v.vPrefill, prefill.Seconds()}, {v.decode, v.vDecode, decode.Seconds()},
		{v.promptLen, v.vPromptLen, float64(promptTokens)}, {v.genLen, v.vGenLen, float64(generationTokens)},
	} {
		h.a.Observe(h.x)
		h.b.Observe(h.x)
	}
	for _, r := range finishReasons {
		v.success.WithLabelValues(r).Inc()
		v.vSuccess.WithLabelValues(r).Inc()
	}
}
