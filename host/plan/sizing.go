package plan

import (
	"context"
	"fmt"
	"math"
	"sort"

	"github.com/kvhost/kvhost/host/budget"
)

// Layout is the KV arena's shape: Buffers equal buffers (one K and one V per
// layer) of RowBytes per token, each mapped in Granularity steps and kept in
// pages of PageSize tokens.
type Layout struct {
	Buffers     int   `json:"buffers"`
	RowBytes    int64 `json:"row_bytes"`
	PageSize    int   `json:"page_size"`
	Granularity int64 `json:"granularity_bytes"`
}

// CellBytes is the bytes per token over all buffers.
func (l Layout) CellBytes() int64 { return int64(l.Buffers) * l.RowBytes }

// BufferBytes is one buffer's mapping for tokens tokens.
func (l Layout) BufferBytes(tokens int) int64 {
	return alignUp(int64(tokens)*l.RowBytes, l.Granularity)
}

// Mapped is the device memory tokens tokens cost: every buffer rounded up to
// the granularity.
func (l Layout) Mapped(tokens int) int64 { return int64(l.Buffers) * l.BufferBytes(tokens) }

// MaxTokens is the largest page multiple T ≤ limit (limit ≤ 0: none) whose
// mapping fits avail bytes.
func (l Layout) MaxTokens(avail int64, limit int) int {
	if avail <= 0 {
		return 0
	}
	pages := int(avail / max(1, l.CellBytes()) / int64(l.PageSize))
	if limit > 0 {
		pages = min(pages, limit/l.PageSize)
	}
	k := sort.Search(pages+1, func(k int) bool { return l.Mapped(k*l.PageSize) > avail }) - 1
	return max(0, k) * l.PageSize
}

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
	Threads           int     `json:"threads,omitempty"`
	Layout            Layout  `json:"layout"`
	// Derived.
	ProfilePeakBytes     int64         `json:"profile_peak_bytes"`
	FragmentationBytes   int64         `json:"fragmentation_allowance_bytes"`
	HeadroomBytes        int64         `json:"headroom_bytes"` // the slack kept for runtime
	UpperBoundTokens     int           `json:"upper_bound_tokens"`
	ReservedAddressBytes int64         `json:"reserved_address_bytes"`
	PrefixTokens         int           `json:"prefix_tokens"`
	PrefixMappedBytes    int64         `json:"prefix_mapped_bytes"`
	FreeAfterCapture     int64         `json:"free_after_capture_bytes"`
	KVBudgetBytes        int64         `json:"kv_budget_bytes"`
	KVMappedBytes        int64         `json:"kv_mapped_bytes"`
	Tokens               int           `json:"tokens"`
	KVConfigurator       *KVConfig     `json:"kv_configurator,omitempty"`
	GraphBuckets         []int         `json:"graph_buckets,omitempty"`
	GraphPoolBytes       int64         `json:"graph_pool_bytes"`
	Reservations         []Reservation `json:"reservations"`
	SGLang               *SGLang       `json:"sglang,omitempty"`
}

// UpperBound is the KV pool's address-space bound: everything free after the
// weights, no slack, as a page multiple under the --max-total-tokens cap.
func UpperBound(freeAfterWeights int64, l Layout, maxTotal int) int {
	return l.MaxTokens(freeAfterWeights, maxTotal)
}

// Headroom is kvhost's runtime slack: the profiled peak plus one more of the
// largest segment the profile needed, which bounds what a differently
// shaped batch can add by fragmenting the cache.
func Headroom(profilePeak, largestSegment int64) int64 { return profilePeak + largestSegment }

// FractionHeadroom is the slack P·(1−f) of a --mem-fraction-static override
// (spec §2), in whole bytes.
func FractionHeadroom(p int64, f float64) int64 { return int64(math.Ceil(float64(p) * (1 - f))) }

// Grow is the post-capture resize: the largest page multiple not above the
// upper bound whose mapping fits what is free after capture plus what is
// already mapped, minus the headroom. It fails with a
// *budget.InsufficientMemoryError when less than minTokens fit, naming the
// device memory that would be enough.
func Grow(b *Budget, minTokens int) error {
	avail := b.FreeAfterCapture + b.PrefixMappedBytes - b.HeadroomBytes
	b.KVBudgetBytes = max(0, avail)
	b.Tokens = b.Layout.MaxTokens(avail, b.UpperBoundTokens)
	b.KVMappedBytes = b.Layout.Mapped(b.Tokens)
	if b.Tokens >= minTokens && b.Tokens > 0 {
		return nil
	}
	need := b.Layout.Mapped(max(minTokens, b.Layout.PageSize)) + b.HeadroomBytes
	have := b.FreeAfterCapture + b.PrefixMappedBytes
	total := b.TotalBytes + need - have
	return &budget.InsufficientMemoryError{
		Phase: "post-capture-kv", NeedBytes: need, HaveBytes: have,
		Knob: "--device-memory", Suggest: fmt.Sprintf("%dMiB", (total+budget.MiB-1)/budget.MiB),
		SuggestValue: float64(alignUp(total, budget.MiB)), Minimum: float64(total),
	}
}

// ApplyUnits lets the configurator turn the KV budget into tokens (spec §3:
// bytes → units), capped by what Grow found fits the granular mapping, and
// adopts its answer.
func ApplyUnits(ctx context.Context, kc KVConfig, b *Budget, minTokens int) error {
	t, err := kc.Units(ctx, b.KVBudgetBytes, b.Tokens)
	if err != nil {
		return err
	}
	if t < minTokens {
		return fmt.Errorf("plan: configurator %s sized the KV pool at %d tokens, less than one context of %d", kc.Plugin, t, minTokens)
	}
	b.Tokens, b.KVMappedBytes = t, b.Layout.Mapped(t)
	return nil
}

// SGLangFigures applies SGLang's §2–§3 arithmetic to readings P and A: the
// default f for a device of totalBytes (or f when > 0), the budget, tokens
// for cell bytes per token and R with req_to_token for contextLen.
func SGLangFigures(totalBytes, p, a int64, f float64, chunk, tp int, cell float64, page, maxTotal, contextLen int) SGLang {
	in := budget.ReserveInput{GPUMemMiB: float64(totalBytes) / budget.MiB, TP: tp, ChunkedPrefillSize: chunk}
	s := SGLang{ReserveMiB: budget.ReserveMiB(in), MemFractionStatic: f}
	if !(f > 0) {
		s.MemFractionStatic = budget.MemFractionStatic(in)
	}
	kvb, err := budget.KVBudget(budget.KVBudgetInput{PBytes: p, ABytes: a, MemFractionStatic: s.MemFractionStatic, WorldSize: 1})
	s.SlackGiB = kvb.SlackGiB
	if err != nil {
		s.Error = err.Error()
		return s
	}
	s.BudgetBytes = kvb.BudgetBytes
	s.Tokens = budget.Tokens(kvb.BudgetBytes, cell, page, maxTotal)
	s.MaxRunning = budget.MaxRunningRequests(s.Tokens, contextLen, 0, 1)
	s.PaddingBytes = int64(max(1, page)) * int64(cell)
	s.ReqToTokenBytes = budget.ReqToTokenBytes(s.MaxRunning, contextLen, 0)
	return s
}

func alignUp(n, m int64) int64 {
	if m <= 1 {
		return n
	}
	return (n + m - 1) / m * m
}
