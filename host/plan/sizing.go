package plan

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/kvhost/kvhost/host/budget"
	"github.com/kvhost/kvhost/host/kv"
	"github.com/kvhost/kvhost/host/plugin"
	"github.com/kvhost/kvhost/sdk"
)

// Reservation is one amount the budget keeps out of the KV pool, with where
// it lives (device memory or host memory, for the CPU engine's tables).
type Reservation struct {
	Name   string `json:"name"`
	Bytes  int64  `json:"bytes"`
	Device bool   `json:"device"`
	Note   string `json:"note,omitempty"`
}

// SGLang is what SGLang's default arithmetic (spec §2–§3) gives for the same
// device readings.
type SGLang struct {
	MemFractionStatic float64 `json:"mem_fraction_static"`
	ReserveMiB        float64 `json:"reserve_mib"`
	SlackGiB          float64 `json:"slack_gib"`
	BudgetBytes       int64   `json:"budget_bytes"`
	Tokens            int     `json:"tokens"`
	MaxRunning        int     `json:"max_running_requests"`
	// Unbudgeted is what SGLang allocates beyond the budget: the padding
	// page and req_to_token (§3 "What is actually allocated").
	PaddingBytes    int64  `json:"padding_bytes"`
	ReqToTokenBytes int64  `json:"req_to_token_bytes"`
	Error           string `json:"error,omitempty"`
}

// Budget is every input and derived value of one KV sizing; boot fills it
// from measurements, plan from predictions, and /v1/memory serves it.
type Budget struct {
	Policy string `json:"policy"` // "kvhost" or "sglang-compat"
	// Inputs.
	TotalBytes        int64   `json:"total_bytes"`
	PBytes            int64   `json:"p_bytes"` // free after device init
	ABytes            int64   `json:"a_bytes"` // free after weights
	WeightBytes       int64   `json:"weight_bytes"`
	MemFractionStatic float64 `json:"mem_fraction_static,omitempty"`
	FractionFromFlag  bool    `json:"mem_fraction_static_from_flag,omitempty"`
	ChunkedPrefill    int     `json:"chunked_prefill_size"`
	MaxRunning        int     `json:"max_running_requests"`
	ContextLen        int     `json:"context_len"`
	MaxTotalTokens    int     `json:"max_total_tokens_cap,omitempty"`
	MaxChoices        int     `json:"max_choices,omitempty"`
	Threads           int     `json:"threads,omitempty"`
	// KVDType is the KV encoding the pools store (--kv-cache-dtype's
	// spelling; KVConfigurator.KVDType is the sdk's the plugin was asked);
	// PageSize the host's page size; Granularity what each KV buffer is
	// mapped in (the device's page or VMM granule).
	KVDType     string `json:"kv_dtype"`
	PageSize    int    `json:"page_size"`
	Granularity int64  `json:"granularity_bytes"`
	// TokenCap caps every token pool (--max-total-tokens, or on the CPU
	// device the default of DefaultTokenCap; 0: none) and RequestCap every
	// state pool; TokenCapReason says which.
	TokenCap       int    `json:"token_cap,omitempty"`
	RequestCap     int    `json:"request_cap,omitempty"`
	TokenCapReason string `json:"token_cap_reason,omitempty"`
	// UncappedTokens is what the primary pool would hold without TokenCap
	// (the memory's figure, for the startup line).
	UncappedTokens int `json:"uncapped_tokens,omitempty"`
	// Pad is the tokens of every token pool mapped beyond its units (the
	// padding page a GPU's graphs write to; 0 on the CPU device, whose
	// graphs take theirs from the pool).
	Pad int `json:"padding_tokens,omitempty"`
	// Derived.
	ProfilePeakBytes   int64 `json:"profile_peak_bytes"`
	FragmentationBytes int64 `json:"fragmentation_allowance_bytes"`
	HeadroomBytes      int64 `json:"headroom_bytes"` // the slack kept for runtime
	// Units are per pool (KVConfigurator.Layout.Pools order): tokens of a
	// token pool, slots of a state pool; the *Tokens figures are the
	// primary token pool's (the first full or latent one).
	UpperBoundUnits      []int         `json:"upper_bound_units"`
	UpperBoundTokens     int           `json:"upper_bound_tokens"`
	ReservedAddressBytes int64         `json:"reserved_address_bytes"`
	PrefixUnits          []int         `json:"prefix_units,omitempty"`
	PrefixTokens         int           `json:"prefix_tokens"`
	PrefixMappedBytes    int64         `json:"prefix_mapped_bytes"`
	FreeAfterCapture     int64         `json:"free_after_capture_bytes"`
	KVBudgetBytes        int64         `json:"kv_budget_bytes"`
	KVMappedBytes        int64         `json:"kv_mapped_bytes"`
	Units                []int         `json:"units"`
	Tokens               int           `json:"tokens"`
	KVConfigurator       *KVConfig     `json:"kv_configurator,omitempty"`
	GraphBuckets         []int         `json:"graph_buckets,omitempty"`
	GraphPoolBytes       int64         `json:"graph_pool_bytes"`
	Reservations         []Reservation `json:"reservations"`
	SGLang               *SGLang       `json:"sglang,omitempty"`
}

// Headroom is kvhost's runtime slack: the profiled peak plus one more of the
// largest segment the profile needed, which bounds what a differently
// shaped batch can add by fragmenting the cache.
func Headroom(profilePeak, largestSegment int64) int64 { return profilePeak + largestSegment }

// FractionHeadroom is the slack P·(1−f) of a --mem-fraction-static override
// (spec §2), in whole bytes.
func FractionHeadroom(p int64, f float64) int64 { return int64(math.Ceil(float64(p) * (1 - f))) }

// DefaultTokenCap is the default token cap on the CPU device: what the
// scheduler can use. At most maxRunning requests are admitted, and the last
// one admitted may fork into maxChoices choices, so at most maxRunning +
// maxChoices − 1 sequences run at once; each holds at most the context's
// pages (a fork's copy-on-write page included: shared pages count once), so
// that many contexts of pages, plus the decode graphs' padding page, is
// every page the scheduler can ever hold. Preemption needs nothing more: it
// frees pages. A bigger pool only sits idle (and makes the usage gauge
// meaningless), so serve sizes to this unless --max-total-tokens or
// --mem-fraction-static asks for more.
func DefaultTokenCap(maxRunning, maxChoices, contextLen, pageSize int) int {
	seqs := maxRunning + maxChoices - 1
	return seqs*((contextLen+pageSize-1)/pageSize)*pageSize + pageSize
}

// Caps fills the budget's token and request caps: --max-total-tokens when
// given, else on the CPU device (cpu) DefaultTokenCap unless a
// --mem-fraction-static asks the pool to take what the fraction leaves.
func (b *Budget) Caps(cpu bool, memFraction float64) {
	seqs := b.MaxRunning + b.MaxChoices - 1
	switch {
	case b.MaxTotalTokens > 0:
		b.TokenCap, b.TokenCapReason = b.MaxTotalTokens, "--max-total-tokens"
	case cpu && !(memFraction > 0):
		b.TokenCap, b.RequestCap = DefaultTokenCap(b.MaxRunning, b.MaxChoices, b.ContextLen, b.PageSize), seqs
		b.TokenCapReason = fmt.Sprintf("what the scheduler can use: (%d running + %d more choices of one request) × %d-token context, in %d-token pages, + a padding page",
			b.MaxRunning, b.MaxChoices-1, b.ContextLen, b.PageSize)
	}
}

// Primary is the index in l.Pools of the pool whose tokens stand for the
// KV capacity (Budget.Tokens): the first full or latent token pool, else
// the first token pool, else 0.
func Primary(l *kv.Layout) int {
	first := -1
	for i, p := range l.Pools {
		if p.Tokens() && p.Kind != sdk.SlidingWindow {
			return i
		}
		if p.Tokens() && first < 0 {
			first = i
		}
	}
	return max(first, 0)
}

// FitUnits is the configurator's sizing of avail bytes (spec §3: bytes →
// units) made to fit the device: each buffer is mapped in gran steps, with
// pad more tokens in every token pool (a padding page the pool's bytes do
// not count), so the ask is shrunk until the mapping fits avail; of the
// asks that fit, the largest is taken (the plugin's units grow with the
// bytes it is given). plan and boot call it with the same numbers and get
// the same units.
func FitUnits(ctx context.Context, kc KVConfig, avail, gran int64, tokenCap, requestCap, pad int) ([]int, error) {
	l := kc.Layout
	cost := func(u []int) int64 { return l.Mapped(padded(l, u, pad), gran) }
	if avail <= 0 {
		return nil, fmt.Errorf("%w: %d bytes left for the KV pools", errNoFit, avail)
	}
	units, err := kc.Size(ctx, avail, tokenCap, requestCap)
	if err != nil {
		return nil, err
	}
	if cost(units) <= avail {
		return units, nil
	}
	// Shrink by the overshoot until an ask fits, then search between it
	// and the last that did not for the largest that fits.
	lo, hi, best := int64(-1), avail, []int(nil)
	ask := avail
	for lo < 0 {
		ask -= max(1, cost(units)-avail)
		if ask <= 0 {
			return nil, fmt.Errorf("%w: %d bytes hold no units of %s's pools once each buffer is mapped in %d-byte granules", errNoFit, avail, kc.Plugin, gran)
		}
		u, err := kc.Size(ctx, ask, tokenCap, requestCap)
		switch {
		case err != nil && !isGuest(err):
			return nil, err
		case err == nil && cost(u) <= avail:
			lo, best = ask, u
		default:
			hi = ask
			if err == nil {
				units = u
			}
		}
	}
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		u, err := kc.Size(ctx, mid, tokenCap, requestCap)
		switch {
		case err != nil && !isGuest(err):
			return nil, err
		case err == nil && cost(u) <= avail:
			lo, best = mid, u
		default:
			hi = mid
		}
	}
	return best, nil
}

// padded is units with pad more tokens in every token pool.
func padded(l *kv.Layout, units []int, pad int) []int {
	out := make([]int, len(units))
	for i, p := range l.Pools {
		out[i] = units[i]
		if p.Tokens() {
			out[i] += pad
		}
	}
	return out
}

// errNoFit: no ask fits the granular mapping.
var errNoFit = errors.New("plan: the KV pools do not fit")

// isGuest reports a shortage: the configurator's own refusal (e.g. "not
// enough memory") or no ask fitting, as opposed to a broken contract.
func isGuest(err error) bool {
	var ge *plugin.GuestError
	return errors.As(err, &ge) || errors.Is(err, errNoFit)
}

// minUnits are the least units of each pool that serve one request at the
// model's context: a context of tokens in a full or latent pool, what one
// chunk over the window holds in a window pool, one slot in a state pool.
func minUnits(l *kv.Layout, contextLen, chunk int) []int {
	out := make([]int, len(l.Pools))
	for i, p := range l.Pools {
		switch {
		case !p.Tokens():
			out[i] = 1
		case p.Kind == sdk.SlidingWindow && chunk > 0:
			out[i] = min(contextLen, p.Window-1+chunk+p.PageSize) + p.PageSize
		default:
			out[i] = contextLen
		}
		if p.Tokens() {
			out[i] = (out[i] + p.PageSize - 1) / p.PageSize * p.PageSize
		}
	}
	return out
}

// shortPool names the first pool whose units cannot serve one request at
// the context, or "" when every pool can.
func shortPool(l *kv.Layout, units []int, contextLen, chunk int) string {
	for i, need := range minUnits(l, contextLen, chunk) {
		if units[i] < need {
			p := l.Pools[i]
			return fmt.Sprintf("pool %s holds %d %ss, one request at the %d-token context needs %d", p.Name, units[i], p.Unit(), contextLen, need)
		}
	}
	return ""
}

// Grow is the post-capture resize: the configurator sizes what is free after
// capture plus what is already mapped, minus the headroom, under the caps
// and within the granular mapping, and no pool may exceed its upper bound.
// It fails with a *budget.InsufficientMemoryError when a pool cannot serve
// one request at the context, naming the device memory that would be
// enough.
func Grow(ctx context.Context, kc KVConfig, b *Budget, contextLen int) error {
	l := kc.Layout
	avail := b.FreeAfterCapture + b.PrefixMappedBytes - b.HeadroomBytes
	b.KVBudgetBytes = max(0, avail)
	var units []int
	short := fmt.Sprintf("the %d-byte headroom leaves nothing for the KV pools", b.HeadroomBytes)
	if avail > 0 {
		var err error
		units, err = FitUnits(ctx, kc, avail, b.Granularity, b.TokenCap, b.RequestCap, b.Pad)
		switch {
		case err != nil && !isGuest(err):
			return err
		case err != nil:
			short = err.Error()
		default:
			short = shortPool(l, units, contextLen, b.ChunkedPrefill)
		}
	}
	if short == "" {
		for i, u := range units {
			if u > b.UpperBoundUnits[i] {
				return fmt.Errorf("plan: configurator %s sized pool %s at %d units with less memory than the %d it gave the reservation (sizing must not shrink as the budget grows)",
					kc.Plugin, l.Pools[i].Name, u, b.UpperBoundUnits[i])
			}
		}
		b.Units, b.Tokens = units, units[Primary(l)]
		b.KVMappedBytes = l.Mapped(padded(l, units, b.Pad), b.Granularity)
		if b.TokenCap > 0 {
			if u, err := FitUnits(ctx, kc, avail, b.Granularity, 0, 0, b.Pad); err == nil {
				b.UncappedTokens = u[Primary(l)]
			}
		}
		return nil
	}
	need := l.Mapped(minUnits(l, contextLen, b.ChunkedPrefill), b.Granularity) + b.HeadroomBytes
	have := b.FreeAfterCapture + b.PrefixMappedBytes
	total := b.TotalBytes + need - have
	return fmt.Errorf("plan: %s: %w", short, &budget.InsufficientMemoryError{
		Phase: "post-capture-kv", NeedBytes: need, HaveBytes: have,
		Knob: "--device-memory", Suggest: fmt.Sprintf("%dMiB", (total+budget.MiB-1)/budget.MiB),
		SuggestValue: float64(kv.AlignUp(total, budget.MiB)), Minimum: float64(total),
	})
}

// CompatUnits is SGLang-compatible sizing (spec §3): the configurator sizes
// SGLang's budget under its token count, and a pool that cannot hold one
// request at the model's context is refused, saying what f (or device
// memory) would give it (issue 12: SGLang itself starts such a server and
// answers every request 400).
func CompatUnits(ctx context.Context, kc KVConfig, b *Budget, sg SGLang, contextLen int) ([]int, error) {
	l := kc.Layout
	var units []int
	short := ""
	if sg.Error == "" && sg.Tokens > 0 {
		var err error
		if units, err = kc.Size(ctx, sg.BudgetBytes, sg.Tokens, b.RequestCap); err != nil && !isGuest(err) {
			return nil, err
		} else if err != nil {
			short = err.Error()
		} else {
			short = shortPool(l, units, contextLen, b.ChunkedPrefill)
		}
	} else {
		short = "no KV budget: " + sg.Error
	}
	if short == "" {
		return units, nil
	}
	min := minUnits(l, contextLen, b.ChunkedPrefill)
	need := l.Bytes(min)
	if sg.Error == "" && need <= sg.BudgetBytes {
		// The memory is there; the units are not.
		if b.MaxTotalTokens > 0 && b.MaxTotalTokens < min[Primary(l)] {
			return nil, fmt.Errorf("plan: SGLang-compatible sizing: %s: %w", short, &budget.InsufficientMemoryError{Phase: "kv-pool",
				NeedBytes: need, HaveBytes: l.Bytes(units), Knob: "--max-total-tokens", Suggest: fmt.Sprint(min[Primary(l)]),
				SuggestValue: float64(min[Primary(l)]), Minimum: float64(min[Primary(l)])})
		}
		return nil, fmt.Errorf("plan: SGLang-compatible sizing: configurator %s sized %s although the budget of %d bytes holds the %d it needs", kc.Plugin, short, sg.BudgetBytes, need)
	}
	// budget = A − P·(1−f) ⇒ the f that leaves need bytes of budget.
	f := 1 - float64(b.ABytes-need)/float64(b.PBytes)
	e := &budget.InsufficientMemoryError{Phase: "kv-pool", NeedBytes: need, HaveBytes: max(0, sg.BudgetBytes), Minimum: f}
	if f < 1 {
		e.Knob, e.SuggestValue = "--mem-fraction-static", math.Ceil(1000*f)/1000
		e.Suggest = fmt.Sprintf("%.3f", e.SuggestValue)
	} else {
		total := b.TotalBytes + need - sg.BudgetBytes
		e.Knob, e.Suggest, e.SuggestValue, e.Minimum = "--device-memory", fmt.Sprintf("%dMiB", (total+budget.MiB-1)/budget.MiB), float64(kv.AlignUp(total, budget.MiB)), float64(total)
	}
	return nil, fmt.Errorf("plan: SGLang-compatible sizing: %s (%d bytes of KV budget at f=%.3f): %w", short, sg.BudgetBytes, sg.MemFractionStatic, e)
}

// SGLangInput is what SGLang's default arithmetic (spec §2–§3) reads: the
// device's memory.total, the free-memory readings P and A, the knobs that
// enter the reserve and the sizing, and the KV cell.
type SGLangInput struct {
	TotalBytes, PBytes, ABytes int64
	// MemFractionStatic > 0 is --mem-fraction-static; 0 takes §2's default.
	MemFractionStatic float64
	ChunkedPrefill    int
	TP                int // 0: 1
	CellBytes         float64
	PageSize          int
	MaxTotalTokens    int
	ContextLen        int
	// MLA is SGLang's MLA rule for the default f (§2): the prefill graph's
	// reserve term is a flat 1536 MiB instead of 8 MiB per bucket (V2's
	// "H200, MLA" row). LatentLayout tells it from the declared pools.
	MLA bool
}

// SGLangFigures applies SGLang's §2–§3 arithmetic to the readings: the
// default f for the device (or the given f), the budget, tokens for the
// cell bytes per token and R with req_to_token for the context.
func SGLangFigures(in SGLangInput) SGLang {
	ri := budget.ReserveInput{GPUMemMiB: float64(in.TotalBytes) / budget.MiB, TP: in.TP, ChunkedPrefillSize: in.ChunkedPrefill, MLA: in.MLA}
	s := SGLang{ReserveMiB: budget.ReserveMiB(ri), MemFractionStatic: in.MemFractionStatic}
	if !(in.MemFractionStatic > 0) {
		s.MemFractionStatic = budget.MemFractionStatic(ri)
	}
	kvb, err := budget.KVBudget(budget.KVBudgetInput{PBytes: in.PBytes, ABytes: in.ABytes, MemFractionStatic: s.MemFractionStatic, WorldSize: 1})
	s.SlackGiB = kvb.SlackGiB
	if err != nil {
		s.Error = err.Error()
		return s
	}
	s.BudgetBytes = kvb.BudgetBytes
	s.Tokens = budget.Tokens(kvb.BudgetBytes, in.CellBytes, in.PageSize, in.MaxTotalTokens)
	s.MaxRunning = budget.MaxRunningRequests(s.Tokens, in.ContextLen, 0, 1)
	s.PaddingBytes = int64(max(1, in.PageSize)) * int64(in.CellBytes)
	s.ReqToTokenBytes = budget.ReqToTokenBytes(s.MaxRunning, in.ContextLen, 0)
	return s
}

// LatentLayout reports whether l declares a latent (MLA) pool: the model
// is one SGLang serves with its MLA backend, so §2's MLA rule sets the
// default f.
func LatentLayout(l *kv.Layout) bool {
	for _, p := range l.Pools {
		if p.Kind == sdk.LatentAttention {
			return true
		}
	}
	return false
}

func alignUp(n, m int64) int64 { return kv.AlignUp(n, m) }
