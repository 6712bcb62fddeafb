package metrics

import (
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/kvhost/kvhost/host/kv/radix"
	"github.com/kvhost/kvhost/host/ledger"
)

// observer mirrors server.Observer (the server package pulls in the engine,
// so the guard is structural here; the lead's wiring checks it for real).
type observer interface {
	RequestStart(route string)
	FirstToken(route string, ttft time.Duration)
	NextToken(route string, itl time.Duration)
	Error(route string, kind string)
	RequestEnd(route string, status int, elapsed time.Duration)
}

var _ observer = (*Metrics)(nil)

// fakeHost is a mutable engine + ledger + plugin registry.
type fakeHost struct {
	mu      sync.Mutex
	load    Load
	snap    ledger.Snapshot
	plugins []PluginStat
}

func (f *fakeHost) Load() Load                { f.mu.Lock(); defer f.mu.Unlock(); return f.load }
func (f *fakeHost) Snapshot() ledger.Snapshot { f.mu.Lock(); defer f.mu.Unlock(); return f.snap }
func (f *fakeHost) Plugins() []PluginStat {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]PluginStat(nil), f.plugins...)
}

func newFakeHost() *fakeHost {
	u := ledger.NewUsage("caching", ledger.KindCaching)
	u.Categories["weights"] = 1000
	u.Categories["activations"] = 200
	u.Cached, u.Rounding, u.DeviceBytes = 50, 6, 1256
	return &fakeHost{
		load: Load{KVPagesTotal: 100, KVPagesFree: 100},
		snap: ledger.Snapshot{TotalBytes: 10000, FreeBytes: 8744, StartFreeBytes: 10000,
			Phases:     []ledger.Phase{{Name: "weights", FreeBefore: 10000, FreeAfter: 9000, Delta: 1000}},
			Allocators: []ledger.Usage{u},
			KVPools: []ledger.KVPool{{Name: "full", Kind: "full", Unit: "token", PageSize: 16, Pages: 10, FreePages: 10, CapacityTokens: 160, Bytes: 4096},
				{Name: "state", Kind: "state", Unit: "request", PageSize: 1, Pages: 8, FreePages: 8, Slots: 8, Bytes: 800}},
			Runtime: &ledger.Runtime{PeakAllocatedBytes: 1200, PeakReservedBytes: 1250}},
		plugins: []PluginStat{{Kind: "sampler", Name: "typical", Version: "1.0.0", SHA256: "ab12", Source: "builtin"}},
	}
}

func scrape(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("GET /metrics: %d", resp.StatusCode)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
		t.Fatalf("content type %q, want text/plain", ct)
	}
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	return fams
}

// value sums a family's samples whose labels include want (counter, gauge,
// untyped; for histograms, the sample count).
func value(fams map[string]*dto.MetricFamily, name string, want map[string]string) (float64, bool) {
	f, ok := fams[name]
	if !ok {
		return 0, false
	}
	var sum float64
	found := false
next:
	for _, m := range f.Metric {
		for k, v := range want {
			hit := false
			for _, l := range m.Label {
				if l.GetName() == k && l.GetValue() == v {
					hit = true
				}
			}
			if !hit {
				continue next
			}
		}
		found = true
		switch {
		case m.Counter != nil:
			sum += m.Counter.GetValue()
		case m.Gauge != nil:
			sum += m.Gauge.GetValue()
		case m.Histogram != nil:
			sum += float64(m.Histogram.GetSampleCount())
		case m.Untyped != nil:
			sum += m.Untyped.GetValue()
		}
	}
	return sum, found
}

func TestScrapeEveryMetricPresentAndMoving(t *testing.T) {
	h := newFakeHost()
	m := New(Sources{Engine: h.Load, Ledger: h, Plugins: h.Plugins})
	srv := httptest.NewServer(m.Handler())
	defer srv.Close()

	before := scrape(t, srv.URL)

	// Simulated load: 3 requests on two routes, one failing; the engine
	// runs, preempts and fills its pool; a plugin is called; a swap.
	const route, chat = "/v1/completions", "/v1/chat/completions"
	for i := range 3 {
		r := route
		if i == 2 {
			r = chat
		}
		m.RequestStart(r)
		m.TokensIn(r, 7)
		m.FirstToken(r, 30*time.Millisecond)
		for range 4 {
			m.NextToken(r, 2*time.Millisecond)
		}
		m.RequestEnd(r, 200, 50*time.Millisecond)
	}
	m.RequestStart(route)
	m.Error(route, "queue_full")
	m.RequestEnd(route, 429, time.Millisecond)
	m.SamplerSwap("typical", "upload", nil)
	m.SamplerSwap("typical", "upload", errors.New("self-test failed"))
	h.mu.Lock()
	h.load = Load{Running: 3, Waiting: 2, KVPagesTotal: 100, KVPagesFree: 25, Preemptions: 4, Steps: 40, GraphSteps: 30, EagerDecodeSteps: 5,
		Prefix: &radix.Usage{Queries: 120, Hits: 90, Block: 16, Stats: radix.Stats{Tokens: 64, EvictableTokens: 48}}}
	h.snap.KVPools[0].FreePages, h.snap.KVPools[0].UsedTokens = 4, 96
	h.snap.KVPools[1].FreePages, h.snap.KVPools[1].UsedSlots = 5, 3
	h.snap.Allocators[0].Categories["kv_cache"] = 4096
	h.snap.Runtime.PeakAllocatedBytes = 5000
	h.snap.FreeBytes = 4000
	h.plugins[0].Calls, h.plugins[0].Failures, h.plugins[0].Seconds = 40, 1, 0.25
	h.mu.Unlock()

	after := scrape(t, srv.URL)

	tests := []struct {
		name   string
		labels map[string]string
		delta  float64 // after − before, exactly
	}{
		{"kvhost_http_requests_total", map[string]string{"route": route, "code": "200"}, 2},
		{"kvhost_http_requests_total", map[string]string{"code": "429"}, 1},
		{"kvhost_http_request_duration_seconds", nil, 4},
		{"kvhost_request_errors_total", map[string]string{"kind": "queue_full"}, 1},
		{"kvhost_prompt_tokens_total", nil, 21},
		{"kvhost_generation_tokens_total", map[string]string{"route": route}, 10},
		{"kvhost_generation_tokens_total", nil, 15},
		{"kvhost_time_to_first_token_seconds", nil, 3},
		{"kvhost_inter_token_latency_seconds", nil, 12},
		{"kvhost_num_requests_waiting", nil, 2},
		{"kvhost_num_requests_running", nil, 3},
		{"vllm:num_requests_waiting", nil, 2},
		{"vllm:num_requests_running", nil, 3},
		{"kvhost_kv_cache_usage_ratio", nil, 0.75},
		{"vllm:kv_cache_usage_perc", nil, 0.75},
		{"vllm:gpu_cache_usage_perc", nil, 0.75},
		{"kvhost_kv_pool_used_tokens", map[string]string{"pool": "full", "kind": "full"}, 96},
		{"kvhost_kv_pool_used_tokens", map[string]string{"pool": "state", "kind": "state"}, 3},
		{"kvhost_kv_pool_usage_ratio", map[string]string{"pool": "full"}, 0.6},
		{"kvhost_kv_pool_usage_ratio", map[string]string{"pool": "state"}, 3.0 / 8},
		{"kvhost_preemptions_total", nil, 4},
		{"kvhost_prefix_cache_queries_total", nil, 120},
		{"kvhost_prefix_cache_hits_total", nil, 90},
		{"vllm:prefix_cache_queries_total", nil, 120},
		{"vllm:prefix_cache_hits_total", nil, 90},
		{"kvhost_prefix_cache_tokens", map[string]string{"state": "locked"}, 16},
		{"kvhost_prefix_cache_tokens", map[string]string{"state": "evictable"}, 48},
		{"kvhost_prefix_cache_hit_ratio", nil, 0.75},
		{"kvhost_engine_steps_total", nil, 40},
		{"kvhost_decode_steps_total", map[string]string{"mode": "graph"}, 30},
		{"kvhost_decode_steps_total", map[string]string{"mode": "eager"}, 5},
		{"kvhost_ledger_bytes", map[string]string{"allocator": "caching", "category": "kv_cache"}, 4096},
		{"kvhost_device_memory_free_bytes", nil, 4000 - 8744},
		{"kvhost_runtime_peak_allocated_bytes", nil, 3800},
		{"kvhost_plugin_calls_total", map[string]string{"plugin": "typical", "version": "1.0.0", "kind": "sampler"}, 40},
		{"kvhost_plugin_failures_total", map[string]string{"plugin": "typical"}, 1},
		{"kvhost_plugin_call_seconds_total", map[string]string{"plugin": "typical"}, 0.25},
		{"kvhost_sampler_swaps_total", map[string]string{"sampler": "typical", "result": "ok"}, 1},
		{"kvhost_sampler_swaps_total", map[string]string{"result": "error"}, 1},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("%s%v", tc.name, tc.labels), func(t *testing.T) {
			a, ok := value(after, tc.name, tc.labels)
			if !ok {
				t.Fatalf("%s%v missing after load", tc.name, tc.labels)
			}
			b, _ := value(before, tc.name, tc.labels)
			if math.Abs((a-b)-tc.delta) > 1e-9 {
				t.Fatalf("%s%v moved by %v (before %v, after %v), want %v", tc.name, tc.labels, a-b, b, a, tc.delta)
			}
		})
	}
	// Present from the start (state and info metrics that need not move).
	for _, name := range []string{"kvhost_kv_pool_capacity_tokens", "kvhost_kv_pool_size_bytes", "kvhost_ledger_allocator_bytes",
		"kvhost_device_memory_total_bytes", "kvhost_runtime_peak_reserved_bytes", "kvhost_startup_phase_bytes",
		"kvhost_plugin_info", "kvhost_http_requests_in_flight", "go_goroutines", "process_cpu_seconds_total"} {
		if _, ok := value(after, name, nil); !ok {
			t.Errorf("%s missing", name)
		}
	}
	if v, _ := value(after, "kvhost_http_requests_in_flight", nil); v != 0 {
		t.Errorf("in flight after all requests ended = %v, want 0", v)
	}
	if v, _ := value(after, "kvhost_plugin_info", map[string]string{"sha256": "ab12", "source": "builtin"}); v != 1 {
		t.Errorf("plugin info = %v, want 1 with sha256 and source labels", v)
	}
	// Types follow the conventions: _total are counters, the latencies
	// histograms, the state gauges.
	for name, want := range map[string]dto.MetricType{
		"kvhost_http_requests_total":         dto.MetricType_COUNTER,
		"kvhost_preemptions_total":           dto.MetricType_COUNTER,
		"kvhost_plugin_calls_total":          dto.MetricType_COUNTER,
		"kvhost_time_to_first_token_seconds": dto.MetricType_HISTOGRAM,
		"kvhost_inter_token_latency_seconds": dto.MetricType_HISTOGRAM,
		"vllm:num_requests_waiting":          dto.MetricType_GAUGE,
		"vllm:kv_cache_usage_perc":           dto.MetricType_GAUGE,
		"vllm:prefix_cache_queries_total":    dto.MetricType_COUNTER,
		"vllm:prefix_cache_hits_total":       dto.MetricType_COUNTER,
		"kvhost_ledger_bytes":                dto.MetricType_GAUGE,
	} {
		if got := after[name].GetType(); got != want {
			t.Errorf("%s type %v, want %v", name, got, want)
		}
	}
	// The TTFT histogram put its three 30 ms samples in the 0.05 bucket
	// and none below.
	for _, m := range after["kvhost_time_to_first_token_seconds"].Metric {
		for _, b := range m.Histogram.Bucket {
			if b.GetUpperBound() == 0.025 && b.GetCumulativeCount() != 0 {
				t.Errorf("ttft ≤ 25ms bucket = %d, want 0", b.GetCumulativeCount())
			}
		}
	}
}

func TestNoSourcesServesEventMetricsOnly(t *testing.T) {
	m := New(Sources{})
	srv := httptest.NewServer(m.Handler())
	defer srv.Close()
	m.RequestStart("/generate")
	m.RequestEnd("/generate", 200, time.Millisecond)
	fams := scrape(t, srv.URL)
	if _, ok := fams["kvhost_http_requests_total"]; !ok {
		t.Fatal("requests counter missing")
	}
	for _, absent := range []string{"kvhost_num_requests_waiting", "vllm:kv_cache_usage_perc", "kvhost_ledger_bytes", "kvhost_plugin_info"} {
		if _, ok := fams[absent]; ok {
			t.Errorf("%s present without its source", absent)
		}
	}
}

func TestKVUsage(t *testing.T) {
	// A full pool 10% used and a window pool 290/300 used: the window pool
	// is what stops admission, so it is the usage.
	pools := []ledger.KVPool{{Kind: "full", Pages: 100, FreePages: 90, CapacityTokens: 100, UsedTokens: 10},
		{Kind: "window", Pages: 300, FreePages: 10, CapacityTokens: 300, UsedTokens: 290}}
	slots := []ledger.KVPool{pools[0], {Kind: "state", Unit: "request", Pages: 4, FreePages: 1, Slots: 4, UsedSlots: 3}}
	tests := []struct {
		name   string
		st     Load
		engine bool
		pools  []ledger.KVPool
		want   float64
		ok     bool
	}{
		{"engine pages", Load{KVPagesTotal: 8, KVPagesFree: 2}, true, pools, 0.75, true},
		{"engine pools: the fullest", Load{KVPagesTotal: 8, KVPagesFree: 2, Pools: slots}, true, pools, 0.75, true},
		{"engine without pages falls back to pools", Load{}, true, pools, 290.0 / 300, true},
		{"pools only", Load{}, false, pools, 290.0 / 300, true},
		{"empty", Load{}, false, nil, 0, false},
		{"cached pages no request locks count as free (vLLM's meaning)", Load{Pools: []ledger.KVPool{{Kind: "full", Pages: 100, FreePages: 20, CachedPages: 30}}}, true, nil, 0.5, true},
		{"over-reported use clamps", Load{KVPagesTotal: 4, KVPagesFree: -4}, true, nil, 1, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := KVUsage(tc.st, tc.engine, tc.pools)
			if ok != tc.ok || math.Abs(got-tc.want) > 1e-12 {
				t.Fatalf("KVUsage = %v, %v; want %v, %v", got, ok, tc.want, tc.ok)
			}
		})
	}
}

func TestRecentErrorsNewestFirstAndBounded(t *testing.T) {
	m := New(Sources{})
	for i := range recentErrors + 5 {
		m.ErrorDetail(fmt.Sprintf("/r%d", i), "internal", 500, "internal server error", fmt.Sprint(i))
	}
	got := m.RecentErrors()
	if len(got) != recentErrors {
		t.Fatalf("kept %d errors, want %d", len(got), recentErrors)
	}
	for i, e := range got {
		if want := fmt.Sprintf("/r%d", recentErrors+4-i); e.Route != want {
			t.Fatalf("error %d is %s, want %s", i, e.Route, want)
		}
	}
	m2 := New(Sources{})
	m2.ErrorDetail("/a", "x", 400, "invalid max_tokens: -1 must be >= 0", "id-a")
	m2.ErrorDetail("/b", "y", 429, "queue full", "id-b")
	m2.Error("/c", "z") // counted, not kept: only ErrorDetail carries what the client was told
	if got := m2.RecentErrors(); len(got) != 2 || got[0].Route != "/b" || got[1].Route != "/a" || got[1].Message != "invalid max_tokens: -1 must be >= 0" || got[1].Status != 400 || got[1].RequestID != "id-a" {
		t.Fatalf("partial ring: %+v", got)
	}
}

func TestWork(t *testing.T) {
	h := newFakeHost()
	m := New(Sources{Engine: h.Load, Ledger: h})
	m.TokensIn("/v1/completions", 5)
	m.FirstToken("/v1/completions", time.Millisecond)
	m.NextToken("/v1/completions", time.Millisecond)
	m.Error("/v1/completions", "internal")
	m.RequestEnd("/v1/completions", 500, time.Millisecond)
	m.ErrorDetail("/v1/completions", "internal", 500, "internal server error", "rid")
	h.load = Load{Running: 1, Waiting: 4, KVPagesTotal: 10, KVPagesFree: 5, Preemptions: 2}
	w := m.Work()
	if w.Running != 1 || w.Waiting != 4 || w.Preemptions != 2 || w.TokensIn != 5 || w.TokensOut != 2 ||
		w.Requests != 1 || w.Errors != 1 || len(w.RecentErrors) != 1 || w.RecentErrors[0].Message != "internal server error" || len(w.KVPools) != 2 || w.KVUsage == nil || *w.KVUsage != 0.5 {
		t.Fatalf("work = %+v", w)
	}
	if w.PrefixCache != nil {
		t.Fatalf("no prefix cache, yet work reports %+v", w.PrefixCache)
	}
	h.load.Prefix = &radix.Usage{Queries: 40, Hits: 30, Block: 16}
	if w := m.Work(); w.PrefixCache == nil || w.PrefixCache.Queries != 40 || w.PrefixCache.Hits != 30 {
		t.Fatalf("prefix cache in work: %+v", w.PrefixCache)
	}
}

func TestConcurrentObserverAndScrape(t *testing.T) {
	h := newFakeHost()
	m := New(Sources{Engine: h.Load, Ledger: h, Plugins: h.Plugins})
	srv := httptest.NewServer(m.Handler())
	defer srv.Close()
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			r := fmt.Sprintf("/r%d", g)
			for range 200 {
				m.RequestStart(r)
				m.FirstToken(r, time.Millisecond)
				m.NextToken(r, time.Millisecond)
				m.Error(r, "internal")
				m.RequestEnd(r, 500, time.Millisecond)
			}
		})
	}
	for range 5 {
		resp, err := http.Get(srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	wg.Wait()
	fams := scrape(t, srv.URL)
	if v, _ := value(fams, "kvhost_http_requests_total", nil); v != 800 {
		t.Fatalf("requests = %v, want 800", v)
	}
}
