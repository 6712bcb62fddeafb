package plan

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"

	"github.com/kvhost/kvhost/host/alloc"
	"github.com/kvhost/kvhost/host/budget"
	"github.com/kvhost/kvhost/host/device"
	"github.com/kvhost/kvhost/host/engine"
	"github.com/kvhost/kvhost/host/ledger"
	"github.com/kvhost/kvhost/host/model"
	"github.com/kvhost/kvhost/host/plugin"
)

// Input is a model and a device to plan for, with serve's knobs.
type Input struct {
	Name    string       `json:"model"`
	Config  model.Config `json:"config"`
	Weights []Tensor     `json:"-"`
	// Device is "cpu" or a GPU preset name (Presets).
	Device      string `json:"device"`
	DeviceBytes int64  `json:"device_bytes"` // CPU device capacity
	Threads     int    `json:"threads"`      // CPU kernel threads
	TP          int    `json:"tp"`
	// Serve's knobs; 0 takes serve's default (GPU: SGLang's defaults).
	ChunkedPrefill    int     `json:"chunked_prefill_size"`
	MaxRunning        int     `json:"max_running_requests"`
	PageSize          int     `json:"page_size"`
	MaxTotalTokens    int     `json:"max_total_tokens"`
	MemFractionStatic float64 `json:"mem_fraction_static"`
	SGLangCompat      bool    `json:"sglang_compat"`
	// LogprobChunk bounds the logits rows of one LM-head matmul (input
	// logprobs); 0 is 2048 as serve's --logprob-chunk-size.
	LogprobChunk int `json:"logprob_chunk_size"`
	// GraphMaxBS: -1 spec §2's default for the memory class, 0 no graphs.
	GraphMaxBS int `json:"cuda_graph_max_bs"`
	// KVDType is --kv-cache-dtype in the sdk's spelling ("": DefaultKVDType).
	KVDType string `json:"kv_cache_dtype"`
	// HFConfig is the model's own config.json (nil for a GGUF file), which
	// the configurator receives verbatim as serve's does.
	HFConfig json.RawMessage `json:"-"`
	// Configurators sizes the KV pool (nil: the built-in set), exactly as
	// serve's.
	Configurators *plugin.Registry `json:"-"`
}

// Peak is one runtime peak the slack must hold (spec §4).
type Peak struct {
	Name  string `json:"name"`
	Bytes int64  `json:"bytes"`
}

// Report is the ledger serve would produce, with the budget and the runtime
// peaks.
type Report struct {
	Input   Input           `json:"input"`
	Budget  Budget          `json:"budget"`
	Ledger  ledger.Snapshot `json:"ledger"`
	Peaks   []Peak          `json:"peaks"`
	Largest string          `json:"largest_peak"`
	// KVHost is kvhost's own figure when the plan was made with
	// SGLangCompat, for comparison.
	KVHost *Budget `json:"kvhost,omitempty"`
	// Decode is the weight bytes a decoded token reads (nil without the
	// weight tensors).
	Decode *DecodeRead `json:"decode_read,omitempty"`
}

// Plan predicts serve's ledger for in.
func Plan(in Input) (Report, error) {
	if err := in.Config.Validate(); err != nil {
		return Report{}, err
	}
	plan := planGPU
	if in.Device == "cpu" {
		plan = planCPU
	}
	r, err := plan(in)
	if err == nil && len(in.Weights) > 0 {
		d := DecodeBytes(in.Config, in.Weights)
		r.Decode = &d
	}
	return r, err
}

// phaser builds predicted phases from deltas.
type phaser struct {
	free   int64
	phases []ledger.Phase
}

func (p *phaser) add(name string, delta int64) int64 {
	after := p.free - delta
	p.phases = append(p.phases, ledger.Phase{Name: name, FreeBefore: p.free, FreeAfter: after, Delta: delta,
		AvailGiB: float64(after) / ledger.GiB, UsageGiB: float64(delta) / ledger.GiB})
	p.free = after
	return after
}

func cpuDefaults(in Input) Input {
	switch {
	case in.ChunkedPrefill < 0: // chunking disabled: a whole prompt per forward
		in.ChunkedPrefill = in.Config.ContextLen
	case in.ChunkedPrefill == 0:
		in.ChunkedPrefill = 512
	}
	if in.MaxRunning <= 0 {
		in.MaxRunning = 32
	}
	if in.PageSize <= 0 {
		in.PageSize = 16
	}
	if in.Threads <= 0 {
		in.Threads = 1
	}
	return in
}

// planCPU predicts host/boot on the CPU device to the byte: the device
// starts empty, weights cost 4 KiB pages each, the arena maps 2 MiB
// granules and the profile forward is replayed through the same caching
// allocator.
func planCPU(in Input) (Report, error) {
	in = cpuDefaults(in)
	c := in.Config
	const page, gran = 4096, 2 << 20
	req, wdev := WeightCost(in.Weights, page)
	ph := &phaser{free: in.DeviceBytes}
	start := ph.free
	P := ph.add("device init", 0)
	ws, err := AttentionWorkspace(c, in.Threads)
	if err != nil {
		return Report{}, err
	}
	wsBlock, wsSeg := alloc.RoundSize(ws), alloc.SegmentSize(alloc.RoundSize(ws))
	if wsSeg-wsBlock <= alloc.SmallSize && wsBlock > alloc.SmallSize {
		wsBlock = wsSeg // large-pool remainders of 1 MiB or less are not split
	}
	A := ph.add("weights", wdev+wsSeg)
	b := Budget{TotalBytes: in.DeviceBytes, PBytes: P, ABytes: A, WeightBytes: wdev,
		ChunkedPrefill: in.ChunkedPrefill, MaxRunning: in.MaxRunning, ContextLen: c.ContextLen, MaxTotalTokens: in.MaxTotalTokens, Threads: in.Threads,
		MaxChoices: engine.MaxChoices, PageSize: in.PageSize, Granularity: page}
	reg := in.Configurators
	if reg == nil {
		var err error
		if reg, err = DefaultConfigurators(); err != nil {
			return Report{}, err
		}
	}
	ctx := context.Background()
	kc, err := ConfigureKV(ctx, reg, KVRequest{Config: c, HFConfig: in.HFConfig, KVDType: in.KVDType, PageSize: in.PageSize,
		MaxRunning: in.MaxRunning, ChunkedPrefill: in.ChunkedPrefill, SGLangCompat: in.SGLangCompat})
	if err != nil {
		return Report{}, fmt.Errorf("plan: KV configurator: %w", err)
	}
	l := kc.Layout
	b.KVConfigurator, b.KVDType = kc.Record(), kc.StoredAs()
	sgIn := SGLangInput{TotalBytes: b.TotalBytes, PBytes: P, ABytes: A, ChunkedPrefill: in.ChunkedPrefill, TP: 1, CellBytes: float64(kc.CellBytes),
		PageSize: in.PageSize, MaxTotalTokens: in.MaxTotalTokens, ContextLen: c.ContextLen, MLA: LatentLayout(l)}
	sg := SGLangFigures(sgIn)
	arena := ledger.NewUsage("kv_arena", ledger.KindArena)
	graphMax := in.GraphMaxBS
	if graphMax < 0 {
		graphMax = budget.GraphMaxBatch(float64(in.DeviceBytes)/budget.MiB, 1)
	}
	b.GraphBuckets = DecodeBuckets(graphMax, in.MaxRunning)
	var graphRow *ledger.Usage
	if len(b.GraphBuckets) > 0 {
		u, err := GraphPool(c, l, b.GraphBuckets, in.Threads)
		if err != nil {
			return Report{}, err
		}
		graphRow, b.GraphPoolBytes = &u, u.DeviceBytes
	}
	if in.SGLangCompat {
		b.Policy = "sglang-compat"
		b.Caps(false, in.MemFractionStatic)
		if in.MemFractionStatic > 0 {
			sgIn.MemFractionStatic = in.MemFractionStatic
			sg = SGLangFigures(sgIn)
			b.FractionFromFlag = true
		}
		b.MemFractionStatic = sg.MemFractionStatic
		b.HeadroomBytes = int64(sg.SlackGiB * budget.GiB)
		units, err := CompatUnits(ctx, kc, &b, sg, c.ContextLen)
		if err != nil {
			return Report{}, err
		}
		b.Units, b.Tokens, b.KVBudgetBytes = units, units[Primary(l)], sg.BudgetBytes
		b.UpperBoundUnits, b.UpperBoundTokens = units, b.Tokens
		b.KVMappedBytes = l.Mapped(units, page)
		arena.Kind = ledger.KindDirect
		ph.add("KV pools", b.KVMappedBytes)
		ph.add("workspaces", 0)
		ph.add("graph capture (profile forward)", b.GraphPoolBytes)
	} else {
		b.Policy = "kvhost"
		b.Granularity = gran
		b.Caps(true, in.MemFractionStatic)
		if err := b.Reserve(ctx, kc); err != nil {
			return Report{}, err
		}
		ph.add("KV pools", b.PrefixMappedBytes)
		ph.add("workspaces", 0)
		peak, largest, err := ActivationPeak(c, l, ProfileBatches(c.ContextLen, in.ChunkedPrefill, in.MaxRunning), in.Threads, in.LogprobChunk)
		if err != nil {
			return Report{}, err
		}
		b.ProfilePeakBytes, b.FragmentationBytes, b.HeadroomBytes = peak, largest, Headroom(peak, largest)
		if in.MemFractionStatic > 0 {
			b.MemFractionStatic, b.FractionFromFlag = in.MemFractionStatic, true
			b.HeadroomBytes = FractionHeadroom(P, in.MemFractionStatic)
		}
		b.FreeAfterCapture = ph.add("graph capture (profile forward)", b.GraphPoolBytes)
		if err := Grow(ctx, kc, &b, c.ContextLen); err != nil {
			return Report{}, err
		}
		ph.add("post-capture KV growth", b.KVMappedBytes-b.PrefixMappedBytes)
	}
	b.SGLang = &sg
	ph.add("ready", 0)
	b.Reservations = Reservations(c, b)

	w := ledger.NewUsage("weights", ledger.KindDirect)
	w.DeviceBytes, w.Categories[alloc.Weights.String()], w.Rounding = wdev, req, wdev-req
	arena.DeviceBytes = b.KVMappedBytes
	arena.Categories[alloc.KVCache.String()] = l.Bytes(b.Units)
	arena.Rounding = arena.DeviceBytes - arena.Categories[alloc.KVCache.String()]
	rows := []ledger.Usage{w, cachingUsage(ws, wsBlock, wsSeg)}
	if graphRow != nil {
		rows = append(rows, *graphRow)
	}
	snap := snapshot(device.Info{Name: fmt.Sprintf("CPU (%d threads)", in.Threads), Kind: "cpu", Total: in.DeviceBytes, Threads: in.Threads}, start, ph,
		append(rows, arena), b)
	r := Report{Input: in, Budget: b, Ledger: snap, Peaks: cpuPeaks(c, b, ws)}
	r.Largest = largest(r.Peaks)
	return r, nil
}

// Reserve sizes the address-space reservation and the profile prefix of
// kvhost's policy: the configurator's units for everything free after the
// weights (under the caps, in whole granules) bound each pool, and a
// chunk's pages of each token pool (one slot of each state pool) are mapped
// for the profile forward.
func (b *Budget) Reserve(ctx context.Context, kc KVConfig) error {
	l := kc.Layout
	upper, err := FitUnits(ctx, kc, b.ABytes, b.Granularity, b.TokenCap, b.RequestCap, 0)
	if err != nil {
		if !isGuest(err) {
			return err
		}
		need := l.Mapped(minUnits(l, b.ContextLen, b.ChunkedPrefill), b.Granularity)
		return fmt.Errorf("plan: the weights leave %d bytes, which hold no KV pools: %w", b.ABytes, &budget.InsufficientMemoryError{
			Phase: "kv-reserve", NeedBytes: need, HaveBytes: b.ABytes,
			Knob: "--device-memory", Suggest: fmt.Sprintf("%dMiB", (b.TotalBytes-b.ABytes+need)/budget.MiB+1)})
	}
	b.UpperBoundUnits, b.UpperBoundTokens = upper, upper[Primary(l)]
	b.PrefixUnits = ProfileUnits(l, b.ChunkedPrefill, upper)
	b.PrefixTokens = b.PrefixUnits[Primary(l)]
	b.ReservedAddressBytes = l.Mapped(upper, b.Granularity)
	b.PrefixMappedBytes = l.Mapped(b.PrefixUnits, b.Granularity)
	return nil
}

func snapshot(info device.Info, start int64, ph *phaser, us []ledger.Usage, b Budget) ledger.Snapshot {
	s := ledger.Snapshot{Device: info, TotalBytes: info.Total, FreeBytes: ph.free, StartFreeBytes: start, Unit: "bytes; GiB = 2^30 B", Phases: ph.phases, Budget: b}
	var held int64
	for _, u := range us {
		held += u.DeviceBytes
	}
	out := ledger.NewUsage("outside", ledger.KindOutside)
	out.DeviceBytes = s.TotalBytes - s.FreeBytes - held
	out.Categories[alloc.Context.String()] = out.DeviceBytes
	s.Allocators = append(us, out)
	s.ByCategory = map[string]int64{"cached": 0, "rounding": 0}
	for _, u := range s.Allocators {
		for k, v := range u.Categories {
			s.ByCategory[k] += v
		}
		s.ByCategory["rounding"] += u.Rounding
		s.ByCategory["cached"] += u.Cached
	}
	if kc := b.KVConfigurator; kc != nil && kc.Layout != nil {
		for i, p := range kc.Layout.Pools {
			free := b.Units[i]
			if p.Tokens() {
				free /= p.PageSize
				if len(b.GraphBuckets) > 0 && b.Pad == 0 {
					free-- // the decode graphs' padding page, taken from the pool
				}
			} else if len(b.GraphBuckets) > 0 {
				free-- // the decode graphs' padding slot (model.CaptureDecodeGraphs)
			}
			s.KVPools = append(s.KVPools, p.Stat(b.Units[i], free))
		}
	}
	return s
}

// cpuPeaks are the §4 peaks in F32 (the CPU device's activation dtype) for
// the CPU forward's shapes, beside the replayed profile.
func cpuPeaks(c model.Config, b Budget, ws int64) []Peak {
	k, rows := min(b.ChunkedPrefill, c.ContextLen-1), min(b.MaxRunning, b.ChunkedPrefill)
	return []Peak{
		{"profiled forward (caching segments)", b.ProfilePeakBytes},
		{"dense layer, chunk limit", budget.DenseLayerPeak(k, c.Hidden, c.Intermediate, 4)},
		{"attention moment, chunk limit", budget.AttentionPeak(k, c.Hidden, c.Heads, c.KVHeads, c.HeadDim, 4)},
		{"attention scratch", ws},
		{"LM head, pruned (max batch rows)", int64(rows) * int64(c.Vocab+c.Hidden) * 4},
		{"LM head, unpruned (chunk rows)", int64(k) * int64(c.Vocab+c.Hidden) * 4},
	}
}

func largest(ps []Peak) string {
	s := append([]Peak(nil), ps...)
	sort.SliceStable(s, func(i, j int) bool { return s[i].Bytes > s[j].Bytes })
	if len(s) == 0 {
		return ""
	}
	return s[0].Name
}

func cachingUsage(ws, block, seg int64) ledger.Usage {
	u := ledger.NewUsage("caching", ledger.KindCaching)
	u.DeviceBytes, u.Categories[alloc.Workspace.String()] = seg, ws
	u.Rounding, u.Cached = block-ws, seg-block
	return u
}
