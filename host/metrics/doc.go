// Package metrics is kvhost's Prometheus surface: GET /metrics.
//
// It owns a private prometheus.Registry (never the global one, so tests and
// several hosts in one process do not collide) holding two kinds of metric:
//
//   - event metrics the server pushes through the server.Observer methods
//     (requests by route and status, errors, tokens, time to first token
//     and inter-token latency histograms) plus the extra events TokensIn
//     and SamplerSwap;
//   - state metrics read at scrape time from Sources (the engine's load, the
//     memory ledger, the plugin and sampler registries), so a scrape always
//     sees the current value and nothing polls in the background.
//
// Sources are small consumer-side interfaces and funcs; any of them may be
// nil, in which case its metrics are simply absent. Names follow Prometheus
// conventions (kvhost_ prefix, _total for counters, _seconds, _bytes); the
// gauges Kubernetes' Gateway API inference extension reads to route are
// also exported under their vLLM names (see README.md).
//
// Invariants: every method is safe for concurrent use and never blocks on
// I/O (the Observer contract); a scrape calls each source at most once.
package metrics
