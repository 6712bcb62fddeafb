package metrics

import (
	"math"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
)

// family finds a gathered metric family by name.
func family(t *testing.T, m *Metrics, name string) *dto.MetricFamily {
	t.Helper()
	fams, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() == name {
			return f
		}
	}
	t.Fatalf("no metric %s", name)
	return nil
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

func TestVLLMSeriesWithModelName(t *testing.T) {
	m := New(Sources{ModelName: "org/tiny"})
	const route = "/v1/completions"
	m.RequestStart(route)
	m.TokensIn(route, 7)
	m.FirstToken(route, 30*time.Millisecond)
	for range 4 {
		m.NextToken(route, 2*time.Millisecond)
	}
	m.RequestEnd(route, 200, 50*time.Millisecond)
	m.RequestPhases(route, 100*time.Millisecond, 200*time.Millisecond, 300*time.Millisecond, 7, 5, []string{"stop", "length", "stop"})

	hist := func(name string, count uint64, sum float64) {
		t.Helper()
		f := family(t, m, name)
		h := f.GetMetric()[0].GetHistogram()
		if h.GetSampleCount() != count || math.Abs(h.GetSampleSum()-sum) > 1e-9 || label(f.GetMetric()[0], "model_name") != "org/tiny" {
			t.Errorf("%s: count %d sum %v labels %v; want %d, %v, model_name org/tiny", name, h.GetSampleCount(), h.GetSampleSum(), f.GetMetric()[0].GetLabel(), count, sum)
		}
	}
	hist("vllm:time_to_first_token_seconds", 1, 0.03)
	hist("vllm:inter_token_latency_seconds", 4, 0.008)
	hist("vllm:time_per_output_token_seconds", 4, 0.008)
	hist("vllm:e2e_request_latency_seconds", 1, 0.05)
	for _, p := range []string{"kvhost_", "vllm:"} {
		hist(p+"request_queue_time_seconds", 1, 0.1)
		hist(p+"request_prefill_time_seconds", 1, 0.2)
		hist(p+"request_decode_time_seconds", 1, 0.3)
		hist(p+"request_prompt_tokens", 1, 7)
		hist(p+"request_generation_tokens", 1, 5)
		got := map[string]float64{}
		for _, s := range family(t, m, p+"request_success_total").GetMetric() {
			got[label(s, "finished_reason")] = s.GetCounter().GetValue()
		}
		if got["stop"] != 2 || got["length"] != 1 || len(got) != 2 {
			t.Errorf("%srequest_success_total by finished_reason = %v", p, got)
		}
	}
	for name, want := range map[string]float64{"vllm:prompt_tokens_total": 7, "vllm:generation_tokens_total": 5} {
		if v := family(t, m, name).GetMetric()[0].GetCounter().GetValue(); v != want {
			t.Errorf("%s = %v, want %v", name, v, want)
		}
	}
	// The native series carry model_name too.
	if s := family(t, m, "kvhost_http_requests_total").GetMetric()[0]; label(s, "model_name") != "org/tiny" || label(s, "route") != route {
		t.Errorf("kvhost_http_requests_total labels %v", s.GetLabel())
	}
}

// TestCacheConfigInfo: the KV geometry the endpoint picker reads (the
// model-server protocol's BlockSize and NumGPUBlocks, as vLLM labels them)
// follows the page size and the engine's pages; without a page size or an
// engine there is no such series (the picker then uses its own defaults).
func TestCacheConfigInfo(t *testing.T) {
	load := func() Load { return Load{KVPagesTotal: 1234, KVPagesFree: 1000} }
	m := New(Sources{Engine: load, KVPageSize: 16, ModelName: "org/tiny"})
	for _, name := range []string{"kvhost_cache_config_info", "vllm:cache_config_info"} {
		f := family(t, m, name)
		if f.GetType() != dto.MetricType_GAUGE || len(f.GetMetric()) != 1 {
			t.Fatalf("%s: type %v with %d series, want one gauge", name, f.GetType(), len(f.GetMetric()))
		}
		s := f.GetMetric()[0]
		if s.GetGauge().GetValue() != 1 || label(s, "block_size") != "16" || label(s, "num_gpu_blocks") != "1234" || label(s, "model_name") != "org/tiny" {
			t.Errorf("%s = %v %v, want 1 with block_size 16, num_gpu_blocks 1234, model_name org/tiny", name, s.GetGauge().GetValue(), s.GetLabel())
		}
	}
	for _, src := range []Sources{{Engine: load}, {KVPageSize: 16}} {
		fams, err := New(src).Registry().Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range fams {
			if f.GetName() == "vllm:cache_config_info" || f.GetName() == "kvhost_cache_config_info" {
				t.Errorf("%s exported without both a page size and an engine", f.GetName())
			}
		}
	}
}
