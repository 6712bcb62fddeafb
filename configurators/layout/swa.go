package layout

import (
	"fmt"
	"math"

	"github.com/kvhost/kvhost/sdk"
	"github.com/kvhost/kvhost/sdk/guest"
)

// SWARatio is swa_full_tokens_ratio's default, the window pool's share of
// the full pool's tokens (spec §3 "Hybrid SWA"); the host may pass another
// in HostFacts.SWAFullTokensRatio.
const SWARatio = sdk.DefaultSWAFullTokensRatio

// SWA configures sliding-window models: a full-attention pool and a window
// pool, layers assigned from layer_types, sliding_window_pattern or
// per-architecture rules.
type SWA struct{}

var _ guest.Configurator = SWA{}

// Describe implements guest.Configurator.
func (SWA) Describe() sdk.Descriptor {
	return sdk.Descriptor{
		Name: "swa", Version: "2.1.0", Kind: sdk.KindConfigurator, ABI: sdk.ABIVersion,
		Architectures: []string{
			"GptOssForCausalLM", "Gemma2ForCausalLM", "Gemma3ForCausalLM",
			"Gemma3ForConditionalGeneration", "Cohere2ForCausalLM",
			// Of OptionalWindowArchitectures, the configs with a served
			// window (SlidingServed); last, so the self-test's sample is
			// gpt-oss's.
			"MistralForCausalLM",
		},
		KVDTypes: []string{sdk.KVFP32, sdk.KVBF16, sdk.KVFP16, sdk.KVFP8E4M3, sdk.KVFP8E5M2},
	}
}

// Configure implements guest.Configurator.
func (c SWA) Configure(in sdk.ConfigureInput) (guest.Plan, error) { return c.Plan(in) }

// SlidingLayers returns, per layer, whether it uses the sliding window.
// Order of evidence: layer_types, sliding_window_pattern (layer i slides
// unless (i+1) % pattern == 0), then the architecture's published rule
// (gpt-oss and Gemma-2 alternate starting with a sliding layer; Gemma-3 is
// 5 sliding : 1 full), and otherwise every layer slides (Mistral-style).
func SlidingLayers(m *Model, layers int64) ([]bool, error) {
	out := make([]bool, layers)
	types, err := m.Strings("layer_types")
	if err != nil {
		return nil, err
	}
	if types != nil {
		if int64(len(types)) != layers {
			return nil, fmt.Errorf("layout: model config layer_types has %d entries for %d layers", len(types), layers)
		}
		for i, t := range types {
			switch t {
			case "sliding_attention":
				out[i] = true
			case "full_attention":
			default:
				return nil, fmt.Errorf("layout: model config layer_types[%d] = %q: want sliding_attention or full_attention", i, t)
			}
		}
		return out, nil
	}
	pattern, ok, err := m.Int("sliding_window_pattern")
	if err != nil {
		return nil, err
	}
	if !ok {
		switch m.Architecture() {
		case "GptOssForCausalLM", "Gemma2ForCausalLM":
			pattern, ok = 2, true
		case "Gemma3ForCausalLM", "Gemma3ForConditionalGeneration":
			pattern, ok = 6, true
		}
	}
	if ok && pattern < 1 {
		return nil, fmt.Errorf("layout: model config sliding_window_pattern = %d: want >= 1", pattern)
	}
	for i := range out {
		out[i] = !ok || (int64(i)+1)%pattern != 0
	}
	return out, nil
}

// Plan is Configure with the concrete result type.
func (SWA) Plan(in sdk.ConfigureInput) (*Plan, error) {
	m, err := ParseModel(in.Model)
	if err != nil {
		return nil, err
	}
	if err := declineOptionalWindow("swa", true, m, in.Host); err != nil {
		return nil, err
	}
	_, dtype, err := kvStorage("swa", in.Host.KVDType, SWA{}.Describe().KVDTypes...)
	if err != nil {
		return nil, err
	}
	window, ok, err := m.Int("sliding_window")
	if err != nil {
		return nil, err
	}
	if !ok || window < 1 {
		return nil, fmt.Errorf("layout: swa configurator: model config has no positive sliding_window; use the mha configurator")
	}
	a, err := AttentionOf(m, in.Host.TPSize)
	if err != nil {
		return nil, err
	}
	sliding, err := SlidingLayers(m, a.Layers)
	if err != nil {
		return nil, err
	}
	page := in.Host.PageSize
	full, swa := newPool(PoolFull, sdk.FullAttention, page, 0), newPool(PoolSWA, sdk.SlidingWindow, page, window)
	for l, s := range sliding {
		p := full
		if s {
			p = swa
		}
		addMHALayer(p, a, int64(l), dtype, false)
	}
	// Draft layers are full-attention layers (spec §3: F·(nf + draft_full)).
	for l := range in.Host.DraftLayers {
		addMHALayer(full, a, a.Layers+l, dtype, false)
	}
	fp, err := full.done()
	if err != nil {
		return nil, err
	}
	sp, err := swa.done()
	if err != nil {
		return nil, err
	}
	if len(sp.Buffers) == 0 {
		return nil, fmt.Errorf("layout: swa configurator: no layer uses the sliding window; use the mha configurator")
	}
	if len(fp.Buffers) == 0 {
		// All-SWA: cell S·ns, one pool.
		return tokenPlan(swa, page)
	}
	pools := []sdk.Pool{fp, sp}
	if h := in.Host; !h.SGLangCompat && h.MaxRunningRequests > 0 {
		w := WindowPoolTokens(window, h.ChunkedPrefill, page, h.ContextLength, h.MaxRunningRequests)
		return &Plan{pools: pools, size: func(avail, tokenCap, _ int64) (map[string]int64, error) {
			return windowSize(fp.BytesPerUnit, sp.BytesPerUnit, w, window, page, avail, tokenCap)
		}}, nil
	}
	ratio := in.Host.SWAFullTokensRatio
	if ratio == 0 {
		ratio = SWARatio
	}
	return &Plan{pools: pools, size: func(avail, tokenCap, _ int64) (map[string]int64, error) {
		return swaSize(fp.BytesPerUnit, sp.BytesPerUnit, ratio, window, page, avail, tokenCap)
	}}, nil
}

// WindowPoolTokens is the window pool kvhost's own policy asks for: each
// of reqs running sequences holds at most sdk.WindowPages of it with chunk
// tokens per forward (0: a whole context) and no more than its context's
// pages (the engine admits a sequence only when the pool has that many
// free: engine pagesToAdmit), plus one page for the decode graphs' padding
// writes. SGLang's fixed cap (spec §3: with an explicit
// max_running_requests, radix cache off and chunked prefill,
// swa = ceil_page(reqs·(window + eviction_interval·draft + page +
// decode_alloc) + inflight_chunks·chunk + page)) is the same idea, which
// kvhost applies always: its engine frees every sequence's out-of-window
// pages before each forward, prefix cache on or off.
func WindowPoolTokens(window, chunk, page, context, reqs int64) int64 {
	if chunk <= 0 {
		chunk = context
	}
	ctxPages := (context + page - 1) / page
	perSeq := min(sdk.WindowPages(min(window, context), min(chunk, context), page), ctxPages)
	return (reqs*perSeq + 1) * page
}

// windowSize is kvhost's own hybrid split: the window pool gets want
// tokens (WindowPoolTokens), or as many as the full pool if that is less,
// and the full pool the rest of the budget (capped, page-floored). A
// sequence holds no more window pages than full-pool pages (its window
// table covers a subset of its positions), so a window pool the size of
// the full pool never runs out first, and one above want only sits idle.
// Against swa_full_tokens_ratio's 0.8·full this never starves the window
// pool (the ratio does when short sequences fill the full pool) and gives
// long contexts the memory the ratio leaves idle in it.
func windowSize(fullBytes, swaBytes, want, window, page, avail, tokenCap int64) (map[string]int64, error) {
	cell := fullBytes + swaBytes
	even := max(0, avail) / cell // both pools the same size
	if tokenCap > 0 {
		even = min(even, tokenCap)
	}
	even = even / page * page
	fullT, swaT := even, even
	if even > want { // then want·swaBytes < avail: no overflow
		fullT = (avail - want*swaBytes) / fullBytes
		if tokenCap > 0 {
			fullT = min(fullT, tokenCap)
		}
		fullT = fullT / page * page
		swaT = min(want/page*page, fullT)
	}
	if fullT == 0 {
		return nil, fmt.Errorf("layout: not enough memory: %d bytes at %d bytes per token hold no page of %d tokens", avail, cell, page)
	}
	if window+page >= swaT {
		return nil, fmt.Errorf("layout: swa pool of %d tokens cannot hold sliding_window %d + page %d; give the KV cache more memory",
			swaT, window, page)
	}
	return map[string]int64{PoolFull: fullT, PoolSWA: swaT}, nil
}

// swaSize is spec §3's hybrid rule: cell = F·(nf+draft) + r·S·ns (float),
// full = page_floor(floor(budget/cell)), swa = page_floor(int(full·r)).
func swaSize(fullBytes, swaBytes int64, ratio float64, window, page, avail, tokenCap int64) (map[string]int64, error) {
	cell := float64(fullBytes) + ratio*float64(swaBytes)
	t := int64(math.Floor(float64(avail) / cell))
	if tokenCap > 0 && t > tokenCap {
		t = tokenCap
	}
	fullT := t / page * page
	swaT := int64(float64(fullT)*ratio) / page * page
	if fullT == 0 {
		return nil, fmt.Errorf("layout: not enough memory: %d bytes at %.1f bytes per token hold no page of %d tokens", avail, cell, page)
	}
	if window+page >= swaT {
		return nil, fmt.Errorf("layout: swa pool of %d tokens cannot hold sliding_window %d + page %d; give the KV cache more memory",
			swaT, window, page)
	}
	return map[string]int64{PoolFull: fullT, PoolSWA: swaT}, nil
}
