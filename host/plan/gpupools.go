package plan

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/kvhost/kvhost/host/budget"
	"github.com/kvhost/kvhost/host/plugin"
	"github.com/kvhost/kvhost/sdk"
)

// PoolPlan is one pool a configurator declared, with its units under the
// SGLang-compatible sizing and under the chosen policy.
type PoolPlan struct {
	Name string   `json:"name"`
	Unit sdk.Unit `json:"unit"`
	// CellBytes is the pool's bytes per unit over all its buffers: the
	// spec's cell for a token pool, per_req for a state pool.
	CellBytes int64 `json:"cell_bytes"`
	Buffers   int   `json:"buffers"`
	// PageSize is the padding a token pool allocates beyond its units (a
	// dummy page for padded writes, spec §3); request pools count their
	// padding slot in their units.
	PageSize int `json:"page_size"`
	// SGLangUnits and SGLangBytes are SGLang's units and what it allocates
	// for them ((units + page) · cell for a token pool).
	SGLangUnits int64 `json:"sglang_units"`
	SGLangBytes int64 `json:"sglang_bytes"`
	// Units and MappedBytes are the chosen policy's units and device bytes
	// (kvhost: every buffer mapped in whole VMM granules).
	Units       int64 `json:"units"`
	MappedBytes int64 `json:"mapped_bytes"`
}

// gpuLayout is the configurator's declaration for a GPU plan.
type gpuLayout struct {
	rec   *KVConfig
	lay   *plugin.Layout
	pools []sdk.Pool
	page  int
	main  string // the token pool whose tokens bound a context
}

// configureGPU asks the configurator claiming the model's architecture for
// its pools under the GPU host facts (KV dtype, page, TP, context, draft
// layers, sizing ratios). Any number of pools is accepted: this plan
// allocates nothing, it sizes what the plugin declares.
func configureGPU(ctx context.Context, reg *plugin.Registry, raw json.RawMessage, arch string, h sdk.HostFacts) (gpuLayout, error) {
	if len(reg.Names()) == 0 {
		return gpuLayout{}, ErrNoConfigurators
	}
	p, l, err := reg.Configure(ctx, arch, h.KVDType, sdk.ConfigureInput{Model: raw, Host: h})
	if err != nil {
		return gpuLayout{}, err
	}
	d := p.Descriptor()
	g := gpuLayout{lay: l, pools: l.Pools, page: int(h.PageSize)}
	for _, q := range l.Pools {
		if q.Unit() != sdk.UnitToken {
			continue
		}
		if g.main == "" || q.Name == "full" {
			g.main = q.Name
		}
	}
	g.rec = &KVConfig{Plugin: d.Name, Version: d.Version, SHA256: p.SHA256(), Pool: g.main}
	if q, ok := l.Pool(g.main); ok {
		g.rec.CellBytes = q.BytesPerUnit
	}
	return g, nil
}

// windowed reports whether a pool is a sliding window's, which kvhost's
// own policy sizes by the running requests.
func (g gpuLayout) windowed() bool {
	return slices.ContainsFunc(g.pools, func(q sdk.Pool) bool { return q.Kind == sdk.SlidingWindow })
}

// cell is the main token pool's bytes per token.
func (g gpuLayout) cell() int64 {
	for _, q := range g.pools {
		if q.Name == g.main {
			return q.BytesPerUnit
		}
	}
	return 0
}

// pad is the rows a pool allocates beyond its units.
func (g gpuLayout) pad(q sdk.Pool) int64 {
	if q.Unit() == sdk.UnitToken {
		return int64(max(1, g.page))
	}
	return 0
}

// size is the plugin's units for available bytes.
func (g gpuLayout) size(ctx context.Context, available int64, tokenCap, requestCap int) (map[string]int64, error) {
	return g.lay.Size(ctx, max(0, available), int64(max(0, tokenCap)), int64(max(0, requestCap)))
}

// minBudget is the fewest bytes the plugin sizes at least one page of
// every pool in, searched above have (where it failed), or false when no
// budget up to 2^50 bytes does (a token cap below what a pool needs).
// The plugin's answer alone decides — a window pool must hold
// sliding_window + page tokens, a hybrid cell weights its pools — so the
// host computes no cell of its own; sizing is monotone in the bytes, so a
// doubling then a bisection finds the threshold in about 2·log2 calls.
func (g gpuLayout) minBudget(ctx context.Context, have int64, tokenCap int) (int64, bool) {
	const limit = int64(1) << 50
	fits := func(b int64) bool {
		_, err := g.size(ctx, b, tokenCap, 0)
		return err == nil
	}
	lo, hi := max(0, have), max(1, 2*have)
	for !fits(hi) {
		if hi >= limit {
			return 0, false
		}
		lo, hi = hi, min(limit, 2*hi)
	}
	for hi-lo > 1 { // fits(hi), !fits(lo)
		if m := lo + (hi-lo)/2; fits(m) {
			hi = m
		} else {
			lo = m
		}
	}
	return hi, true
}

// sglangBytes is what SGLang allocates for units: (units + pad) · cell per
// pool, and what the caching allocator reserves for the same buffers (one
// tensor per declared buffer; its segment, budget.AllocatorBlock, which
// free memory sees whether or not the remainder is split off; spec V12).
func (g gpuLayout) sglangBytes(units map[string]int64) (bytes, charged int64) {
	for _, q := range g.pools {
		rows := units[q.Name] + g.pad(q)
		bytes += rows * q.BytesPerUnit
		for _, b := range q.Buffers {
			n, _ := b.Bytes()
			_, seg, _ := budget.AllocatorBlock(rows * n)
			charged += seg
		}
	}
	return bytes, charged
}

// mapped is what kvhost maps for units: every buffer's (units + pad) rows
// rounded up to the VMM granularity.
func (g gpuLayout) mapped(units map[string]int64, gran int64) int64 {
	var sum int64
	for _, q := range g.pools {
		rows := units[q.Name] + g.pad(q)
		for _, b := range q.Buffers {
			n, _ := b.Bytes()
			sum += alignUp(rows*n, gran)
		}
	}
	return sum
}

// rows is the per-buffer row bytes of every pool, in declaration order
// (post-capture sizing maps buffer by buffer).
func (g gpuLayout) rows() []int64 {
	var out []int64
	for _, q := range g.pools {
		for _, b := range q.Buffers {
			n, _ := b.Bytes()
			out = append(out, n)
		}
	}
	return out
}

// fit is kvhost's no-over-commit sizing: the largest units the plugin
// gives for a budget whose real mapping (padding rows and granules
// included) still fits available bytes. The plugin sizes against its cell
// alone, so the budget handed to it shrinks by the overshoot until the
// mapping fits.
func (g gpuLayout) fit(ctx context.Context, available int64, tokenCap, requestCap int, gran int64) (map[string]int64, int64, error) {
	target := available
	for range 64 {
		units, err := g.size(ctx, target, tokenCap, requestCap)
		if err != nil {
			return nil, 0, err
		}
		m := g.mapped(units, gran)
		if m <= available {
			return units, m, nil
		}
		target -= m - available
	}
	return nil, 0, fmt.Errorf("plan: configurator %s: no sizing of %d bytes fits its mapping", g.rec.Plugin, available)
}

// poolPlans lists the pools with SGLang's and the chosen units.
func (g gpuLayout) poolPlans(sgl, chosen map[string]int64, gran int64) []PoolPlan {
	out := make([]PoolPlan, 0, len(g.pools))
	for _, q := range g.pools {
		p := PoolPlan{Name: q.Name, Unit: q.Unit(), CellBytes: q.BytesPerUnit, Buffers: len(q.Buffers), PageSize: int(g.pad(q)),
			SGLangUnits: sgl[q.Name], Units: chosen[q.Name]}
		if sgl != nil {
			p.SGLangBytes = (sgl[q.Name] + g.pad(q)) * q.BytesPerUnit
		}
		if chosen != nil {
			one := gpuLayout{pools: []sdk.Pool{q}, page: g.page}
			p.MappedBytes = one.mapped(map[string]int64{q.Name: chosen[q.Name]}, gran)
		}
		out = append(out, p)
	}
	return out
}
