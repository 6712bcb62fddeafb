package metrics

import (
	"sort"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvhost/kvhost/host/ledger"
)

// Descriptors of the state read at scrape time.
var (
	descWaiting   = prometheus.NewDesc("kvhost_num_requests_waiting", "Requests admitted and waiting for a batch slot (queue depth).", nil, nil)
	descRunning   = prometheus.NewDesc("kvhost_num_requests_running", "Sequences in the running batch (running batch size).", nil, nil)
	descKVUsage   = prometheus.NewDesc("kvhost_kv_cache_usage_ratio", "Fraction of the KV cache in use, 0 to 1: the fullest pool's (engine pools when known, else the ledger's).", nil, nil)
	descPreempt   = prometheus.NewDesc("kvhost_preemptions_total", "Sequences preempted (recomputed later) because the KV pool was full.", nil, nil)
	descSteps     = prometheus.NewDesc("kvhost_engine_steps_total", "Forward steps the engine ran.", nil, nil)
	descDecode    = prometheus.NewDesc("kvhost_decode_steps_total", "Pure decode steps by how they ran: graph (captured) or eager (no graph fit the batch).", []string{"mode"}, nil)
	descPoolCap   = prometheus.NewDesc("kvhost_kv_pool_capacity_tokens", "KV pool capacity in tokens (request slots for state pools).", poolLabels, nil)
	descPoolUsed  = prometheus.NewDesc("kvhost_kv_pool_used_tokens", "KV pool tokens in use, pages in use × page size (slots in use for state pools).", poolLabels, nil)
	descPoolBytes = prometheus.NewDesc("kvhost_kv_pool_size_bytes", "Device bytes of a KV pool (every declared buffer of it).", poolLabels, nil)
	descPoolRatio = prometheus.NewDesc("kvhost_kv_pool_usage_ratio", "Fraction of a KV pool's pages (slots) in use, 0 to 1.", poolLabels, nil)
	// poolLabels name a pool and its kind (full, window, latent, state).
	poolLabels    = []string{"pool", "kind"}
	descLedger    = prometheus.NewDesc("kvhost_ledger_bytes", "Device bytes an allocator holds, explained by category (the seven categories plus cached and rounding).", []string{"allocator", "kind", "category"}, nil)
	descAllocTot  = prometheus.NewDesc("kvhost_ledger_allocator_bytes", "Device bytes an allocator holds in total.", []string{"allocator", "kind"}, nil)
	descDevTotal  = prometheus.NewDesc("kvhost_device_memory_total_bytes", "Device memory in total.", nil, nil)
	descDevFree   = prometheus.NewDesc("kvhost_device_memory_free_bytes", "Device memory free now.", nil, nil)
	descPeakAlloc = prometheus.NewDesc("kvhost_runtime_peak_allocated_bytes", "Caching allocator's peak allocated bytes since start.", nil, nil)
	descPeakRes   = prometheus.NewDesc("kvhost_runtime_peak_reserved_bytes", "Caching allocator's peak reserved bytes since start.", nil, nil)
	descPhase     = prometheus.NewDesc("kvhost_startup_phase_bytes", "Device memory each startup phase took (free before − free after).", []string{"phase"}, nil)

	pluginLabels    = []string{"kind", "plugin", "version"}
	descPlCalls     = prometheus.NewDesc("kvhost_plugin_calls_total", "Calls into a plugin version.", pluginLabels, nil)
	descPlFail      = prometheus.NewDesc("kvhost_plugin_failures_total", "Failed calls into a plugin version (trap, deadline, bad answer).", pluginLabels, nil)
	descPlSeconds   = prometheus.NewDesc("kvhost_plugin_call_seconds_total", "Time spent in calls into a plugin version.", pluginLabels, nil)
	descPlDisabled  = prometheus.NewDesc("kvhost_sampler_disabled", "1 while a sampler policy version is disabled after repeated failures (the default policy serves its requests).", pluginLabels, nil)
	descPlFallbacks = prometheus.NewDesc("kvhost_sampler_fallbacks_total", "Rows another policy (the default, or the host sampler) sampled because this sampler version failed a step or was disabled.", pluginLabels, nil)
	descPlInfo      = prometheus.NewDesc("kvhost_plugin_info", "A loaded plugin version (value 1), with its sha256 and source.", []string{"kind", "plugin", "version", "sha256", "source"}, nil)

	// Aliases under the names the Gateway API inference extension's
	// endpoint picker reads by default (vLLM's; README.md).
	descVLLMWaiting = prometheus.NewDesc("vllm:num_requests_waiting", "Alias of kvhost_num_requests_waiting for the Gateway API inference extension.", nil, nil)
	descVLLMRunning = prometheus.NewDesc("vllm:num_requests_running", "Alias of kvhost_num_requests_running for the Gateway API inference extension.", nil, nil)
	descVLLMKV      = prometheus.NewDesc("vllm:kv_cache_usage_perc", "Alias of kvhost_kv_cache_usage_ratio (0 to 1) for the Gateway API inference extension.", nil, nil)
	descVLLMGPUKV   = prometheus.NewDesc("vllm:gpu_cache_usage_perc", "Alias of kvhost_kv_cache_usage_ratio (0 to 1) under vLLM's older name.", nil, nil)

	// The prefix cache: hit counters in tokens (vLLM's names too) and what
	// it holds.
	descPCQueries  = prometheus.NewDesc("kvhost_prefix_cache_queries_total", "Prompt tokens looked up in the prefix cache at admission.", nil, nil)
	descPCHits     = prometheus.NewDesc("kvhost_prefix_cache_hits_total", "Prompt tokens served from the prefix cache at admission (not recomputed).", nil, nil)
	descVLLMPCQ    = prometheus.NewDesc("vllm:prefix_cache_queries_total", "Alias of kvhost_prefix_cache_queries_total under vLLM's name (tokens).", nil, nil)
	descVLLMPCH    = prometheus.NewDesc("vllm:prefix_cache_hits_total", "Alias of kvhost_prefix_cache_hits_total under vLLM's name (tokens).", nil, nil)
	descPCTokens   = prometheus.NewDesc("kvhost_prefix_cache_tokens", "Tokens the prefix cache holds: locked (running requests share them) or evictable.", []string{"state"}, nil)
	descPCHitRatio = prometheus.NewDesc("kvhost_prefix_cache_hit_ratio", "Prefix cache hits over queries since start, in tokens, 0 to 1.", nil, nil)

	// The KV cache geometry as labels of a constant 1, vLLM's shape: the
	// picker reads block_size (tokens per page) and num_gpu_blocks (pages).
	cacheLabels       = []string{"block_size", "num_gpu_blocks"}
	descCacheInfo     = prometheus.NewDesc("kvhost_cache_config_info", "KV cache geometry (value 1): block_size is the page size in tokens, num_gpu_blocks the engine's pages.", cacheLabels, nil)
	descVLLMCacheInfo = prometheus.NewDesc("vllm:cache_config_info", "Alias of kvhost_cache_config_info under vLLM's name (the inference extension's BlockSize and NumGPUBlocks).", cacheLabels, nil)
)

// stateCollector reads Sources at scrape time.
type stateCollector struct{ src Sources }

var _ prometheus.Collector = (*stateCollector)(nil)

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descWaiting, descRunning, descKVUsage, descPreempt, descSteps, descDecode,
		descPoolCap, descPoolUsed, descPoolBytes, descPoolRatio, descLedger, descAllocTot, descDevTotal, descDevFree, descPeakAlloc,
		descPeakRes, descPhase, descPlCalls, descPlFail, descPlSeconds, descPlInfo, descPlDisabled, descPlFallbacks,
		descVLLMWaiting, descVLLMRunning, descVLLMKV, descVLLMGPUKV, descCacheInfo, descVLLMCacheInfo,
		descPCQueries, descPCHits, descVLLMPCQ, descVLLMPCH, descPCTokens, descPCHitRatio} {
		ch <- d
	}
}

func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	var (
		st     Load
		snap   ledger.Snapshot
		haveE  = c.src.Engine != nil
		haveL  = c.src.Ledger != nil
		gauge  = prometheus.GaugeValue
		counts = prometheus.CounterValue
	)
	if haveE {
		st = c.src.Engine()
		ch <- prometheus.MustNewConstMetric(descWaiting, gauge, float64(st.Waiting))
		ch <- prometheus.MustNewConstMetric(descRunning, gauge, float64(st.Running))
		ch <- prometheus.MustNewConstMetric(descVLLMWaiting, gauge, float64(st.Waiting))
		ch <- prometheus.MustNewConstMetric(descVLLMRunning, gauge, float64(st.Running))
		ch <- prometheus.MustNewConstMetric(descPreempt, counts, float64(st.Preemptions))
		ch <- prometheus.MustNewConstMetric(descSteps, counts, float64(st.Steps))
		ch <- prometheus.MustNewConstMetric(descDecode, counts, float64(st.GraphSteps), "graph")
		ch <- prometheus.MustNewConstMetric(descDecode, counts, float64(st.EagerDecodeSteps), "eager")
		if p := st.Prefix; p != nil {
			ch <- prometheus.MustNewConstMetric(descPCQueries, counts, float64(p.Queries))
			ch <- prometheus.MustNewConstMetric(descPCHits, counts, float64(p.Hits))
			ch <- prometheus.MustNewConstMetric(descVLLMPCQ, counts, float64(p.Queries))
			ch <- prometheus.MustNewConstMetric(descVLLMPCH, counts, float64(p.Hits))
			ch <- prometheus.MustNewConstMetric(descPCTokens, gauge, float64(p.Tokens-p.EvictableTokens), "locked")
			ch <- prometheus.MustNewConstMetric(descPCTokens, gauge, float64(p.EvictableTokens), "evictable")
			ratio := 0.0
			if p.Queries > 0 {
				ratio = float64(p.Hits) / float64(p.Queries)
			}
			ch <- prometheus.MustNewConstMetric(descPCHitRatio, gauge, ratio)
		}
		if c.src.KVPageSize > 0 && st.KVPagesTotal > 0 {
			l := []string{strconv.Itoa(c.src.KVPageSize), strconv.Itoa(st.KVPagesTotal)}
			ch <- prometheus.MustNewConstMetric(descCacheInfo, gauge, 1, l...)
			ch <- prometheus.MustNewConstMetric(descVLLMCacheInfo, gauge, 1, l...)
		}
	}
	if haveL {
		snap = c.src.Ledger.Snapshot()
		collectLedger(ch, snap)
	}
	if u, ok := KVUsage(st, haveE, snap.KVPools); ok {
		ch <- prometheus.MustNewConstMetric(descKVUsage, gauge, u)
		ch <- prometheus.MustNewConstMetric(descVLLMKV, gauge, u)
		ch <- prometheus.MustNewConstMetric(descVLLMGPUKV, gauge, u)
	}
	if c.src.Plugins != nil {
		for _, p := range c.src.Plugins() {
			l := []string{p.Kind, p.Name, p.Version}
			ch <- prometheus.MustNewConstMetric(descPlCalls, counts, float64(p.Calls), l...)
			ch <- prometheus.MustNewConstMetric(descPlFail, counts, float64(p.Failures), l...)
			ch <- prometheus.MustNewConstMetric(descPlSeconds, counts, p.Seconds, l...)
			ch <- prometheus.MustNewConstMetric(descPlInfo, gauge, 1, p.Kind, p.Name, p.Version, p.SHA256, p.Source)
			if p.Kind == "sampler" {
				disabled := 0.0
				if p.Disabled {
					disabled = 1
				}
				ch <- prometheus.MustNewConstMetric(descPlDisabled, gauge, disabled, l...)
				ch <- prometheus.MustNewConstMetric(descPlFallbacks, counts, float64(p.Fallbacks), l...)
			}
		}
	}
}

func collectLedger(ch chan<- prometheus.Metric, s ledger.Snapshot) {
	gauge := prometheus.GaugeValue
	ch <- prometheus.MustNewConstMetric(descDevTotal, gauge, float64(s.TotalBytes))
	ch <- prometheus.MustNewConstMetric(descDevFree, gauge, float64(s.FreeBytes))
	for _, u := range s.Allocators {
		ch <- prometheus.MustNewConstMetric(descAllocTot, gauge, float64(u.DeviceBytes), u.Name, u.Kind)
		cats := make([]string, 0, len(u.Categories))
		for k := range u.Categories {
			cats = append(cats, k)
		}
		sort.Strings(cats)
		for _, k := range cats {
			ch <- prometheus.MustNewConstMetric(descLedger, gauge, float64(u.Categories[k]), u.Name, u.Kind, k)
		}
		ch <- prometheus.MustNewConstMetric(descLedger, gauge, float64(u.Cached), u.Name, u.Kind, "cached")
		ch <- prometheus.MustNewConstMetric(descLedger, gauge, float64(u.Rounding), u.Name, u.Kind, "rounding")
	}
	for _, p := range s.KVPools {
		capacity, used := p.CapacityTokens, p.UsedTokens
		if p.Unit == "request" {
			capacity, used = p.Slots, p.UsedSlots
		}
		l := []string{p.Name, string(p.Kind)}
		ch <- prometheus.MustNewConstMetric(descPoolCap, gauge, float64(capacity), l...)
		ch <- prometheus.MustNewConstMetric(descPoolUsed, gauge, float64(used), l...)
		ch <- prometheus.MustNewConstMetric(descPoolBytes, gauge, float64(p.Bytes), l...)
		ch <- prometheus.MustNewConstMetric(descPoolRatio, gauge, p.Used(), l...)
	}
	for _, p := range s.Phases {
		ch <- prometheus.MustNewConstMetric(descPhase, gauge, float64(p.Delta), p.Name)
	}
	if s.Runtime != nil {
		ch <- prometheus.MustNewConstMetric(descPeakAlloc, gauge, float64(s.Runtime.PeakAllocatedBytes))
		ch <- prometheus.MustNewConstMetric(descPeakRes, gauge, float64(s.Runtime.PeakReservedBytes))
	}
}

// KVUsage is the KV-cache utilisation the gateway routes on, in [0, 1]:
// the fullest pool's share in use — with several pools (a hybrid model's
// full and window pools, or token and state pools) the first to fill is
// what stops admission. The engine's own pools when the engine is known
// (its pages when it reports no pools), else the ledger's. ok is false when
// neither is known.
func KVUsage(st Load, haveEngine bool, pools []ledger.KVPool) (u float64, ok bool) {
	if haveEngine && len(st.Pools) > 0 {
		pools = st.Pools
	} else if haveEngine && st.KVPagesTotal > 0 {
		return clamp01(float64(st.KVPagesTotal-st.KVPagesFree-st.KVPagesCached) / float64(st.KVPagesTotal)), true
	}
	for _, p := range pools {
		if p.Pages > 0 {
			u, ok = max(u, p.Used()), true
		}
	}
	return clamp01(u), ok
}

func clamp01(x float64) float64 { return min(max(x, 0), 1) }
