package plan

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/kvhost/kvhost/host/alloc"
	"github.com/kvhost/kvhost/host/budget"
	"github.com/kvhost/kvhost/host/device"
	"github.com/kvhost/kvhost/host/ledger"
	"github.com/kvhost/kvhost/sdk"
)

// Preset is a described GPU: nvidia-smi's memory.total and the assumed
// memory the CUDA context (and, for TP > 1, NCCL) takes before the first
// free-memory reading P.
type Preset struct {
	Name       string `json:"name"`
	MemMiB     int64  `json:"memory_total_mib"`
	ContextTP1 int64  `json:"context_bytes_tp1"`
	// ContextTPN is the extra for tp > 1 (NCCL, custom all-reduce).
	ContextTPN int64 `json:"context_extra_bytes_tpn"`
}

// Assumed overheads. H100-80GB's context is spec V3's: total 81 559 MiB −
// P 84 711 309 312 = 809 500 672 B; the others assume the same per-process
// context. The tp > 1 extra is spec V6's 8×H200 reading less that context
// (150 755 639 296 − 147 312 000 000 − 809 500 672 = 2 634 138 624 B).
const (
	contextTP1 = 809_500_672
	contextTPN = 2_634_138_624
	// LoadOverhead is what weight loading leaves beyond the weights (spec
	// V3: A = P − weights − 20 MiB).
	LoadOverhead = 20 << 20
	// FlashInferWorkspace is SGLANG_FLASHINFER_WORKSPACE_SIZE (spec §4).
	FlashInferWorkspace = 384 << 20
)

// Presets are the described GPUs of --gpu.
var Presets = map[string]Preset{
	"H100-80GB": {"H100-80GB", 81559, contextTP1, contextTPN},
	"H200":      {"H200", 143771, contextTP1, contextTPN},
	"A100-80GB": {"A100-80GB", 81920, contextTP1, contextTPN},
	"L40S":      {"L40S", 46068, contextTP1, contextTPN},
	"RTX4090":   {"RTX4090", 24564, contextTP1, contextTPN},
}

// PresetHelp lists the presets for --help.
func PresetHelp() string {
	names := make([]string, 0, len(Presets))
	for n := range Presets {
		names = append(names, n)
	}
	sort.Strings(names)
	var sb strings.Builder
	for _, n := range names {
		p := Presets[n]
		fmt.Fprintf(&sb, "  %-10s total %6d MiB, context %d B (tp>1: +%d B)\n", n, p.MemMiB, p.ContextTP1, p.ContextTPN)
	}
	return sb.String()
}

// planGPU applies SGLang's arithmetic (spec §2–§3) and kvhost's policy to a
// described GPU with bf16 weights and KV: weights params·2/tp, P = total −
// context, A = P − weights − 20 MiB.
func planGPU(in Input) (Report, error) {
	pr, ok := Presets[in.Device]
	if !ok {
		return Report{}, fmt.Errorf("plan: unknown GPU %q; presets:\n%s", in.Device, PresetHelp())
	}
	c := in.Config
	tp := max(1, in.TP)
	in.TP = tp
	total := pr.MemMiB * budget.MiB
	ctx := pr.ContextTP1
	if tp > 1 {
		ctx += pr.ContextTPN
	}
	weights := c.Params() * 2 / int64(tp)
	ph := &phaser{free: total}
	P := ph.add("device init", ctx)
	A := ph.add("weights", weights+LoadOverhead)
	gpuMiB := float64(pr.MemMiB)
	chunk := in.ChunkedPrefill
	if chunk <= 0 {
		chunk = budget.ChunkedPrefillSize(gpuMiB)
	}
	maxBS := budget.GraphMaxBatch(gpuMiB, tp)
	page := max(1, in.PageSize)
	in.PageSize, in.ChunkedPrefill = page, chunk
	if in.KVDType == "" {
		in.KVDType = sdk.KVBF16 // the spec's vectors: bf16 KV on a GPU
	}
	kc, err := gpuKV(in, page, tp, chunk)
	if err != nil {
		return Report{}, err
	}
	l := kc.Layout
	cell := float64(kc.CellBytes)

	base := Budget{TotalBytes: total, PBytes: P, ABytes: A, WeightBytes: weights, ChunkedPrefill: chunk, ContextLen: c.ContextLen, MaxTotalTokens: in.MaxTotalTokens,
		KVDType: kc.StoredAs(), PageSize: page, Granularity: budget.DefaultVMMGranularity, KVConfigurator: kc.Record(), Pad: page}
	base.Caps(false, in.MemFractionStatic)
	sg := SGLangFigures(total, P, A, in.MemFractionStatic, chunk, tp, cell, page, in.MaxTotalTokens, c.ContextLen)
	if sg.Error != "" {
		return Report{}, fmt.Errorf("plan: %s", sg.Error)
	}
	peaks := gpuPeaks(in, maxBS)
	// SGLang: budget from f; pool (T + page)·cell and req_to_token allocated.
	compat := base
	compat.Policy, compat.SGLang = "sglang-compat", &sg
	compat.MemFractionStatic, compat.FractionFromFlag = sg.MemFractionStatic, in.MemFractionStatic > 0
	compat.HeadroomBytes = int64(sg.SlackGiB * budget.GiB)
	compat.Units, err = CompatUnits(context.Background(), kc, &compat, sg, c.ContextLen)
	if err != nil {
		return Report{}, err
	}
	compat.Tokens, compat.KVBudgetBytes, compat.MaxRunning = compat.Units[Primary(l)], sg.BudgetBytes, sg.MaxRunning
	compat.UpperBoundUnits, compat.UpperBoundTokens = compat.Units, compat.Tokens
	compat.KVMappedBytes = l.Bytes(padded(l, compat.Units, page)) // (T + page)·cell
	compat.Reservations = []Reservation{
		{Name: "padding page (unbudgeted)", Bytes: sg.PaddingBytes, Device: true},
		{Name: "req_to_token (unbudgeted)", Bytes: sg.ReqToTokenBytes, Device: true},
	}
	// kvhost: measured-style headroom from the analytic peaks, SGLang's
	// omissions reserved explicitly, post-capture growth without
	// over-commit (padding page and granules inside the budget).
	own := base
	own.Policy, own.SGLang = "kvhost", &sg
	own.MaxRunning = max(sg.MaxRunning, 1)
	runtime := runtimePeak(peaks)
	_, seg, _ := budget.AllocatorBlock(runtime)
	// Allowance: the peak's own segment rounding plus one 20 MiB large
	// segment for fragmentation.
	own.ProfilePeakBytes, own.FragmentationBytes = runtime, seg-runtime+alloc.LargeBuffer
	own.HeadroomBytes = Headroom(own.ProfilePeakBytes, own.FragmentationBytes)
	if in.MemFractionStatic > 0 {
		own.MemFractionStatic, own.FractionFromFlag = in.MemFractionStatic, true
		own.HeadroomBytes = FractionHeadroom(P, in.MemFractionStatic)
	}
	reqTok := budget.ReqToTokenBytes(own.MaxRunning, c.ContextLen, 0)
	graphPool := peakOf(peaks, "graph pool (decode, max batch)")
	shared := peakOf(peaks, "graph-shared logits")
	own.Reservations = []Reservation{
		{Name: "req_to_token", Bytes: reqTok, Device: true},
		{Name: "FlashInfer workspace", Bytes: FlashInferWorkspace, Device: true},
		{Name: "graph pool (decode, max batch)", Bytes: graphPool, Device: true},
		{Name: "graph-shared logits", Bytes: shared, Device: true},
		{Name: "runtime headroom (largest peak + allocator segment)", Bytes: own.HeadroomBytes, Device: true},
	}
	upper, err := FitUnits(context.Background(), kc, A-reqTok, own.Granularity, own.TokenCap, own.RequestCap, own.Pad)
	if err != nil {
		return Report{}, err
	}
	own.UpperBoundUnits, own.UpperBoundTokens = upper, upper[Primary(l)]
	own.PrefixUnits = ProfileUnits(l, 1, upper)
	own.PrefixTokens = own.PrefixUnits[Primary(l)]
	own.PrefixMappedBytes = l.Mapped(own.PrefixUnits, own.Granularity)
	own.FreeAfterCapture = A - reqTok - own.PrefixMappedBytes - FlashInferWorkspace - graphPool - shared
	if err := Grow(context.Background(), kc, &own, c.ContextLen); err != nil {
		return Report{}, err
	}

	chosen := own
	if in.SGLangCompat {
		chosen = compat
	}
	kvAlloc := ledger.NewUsage("kv_arena", ledger.KindArena)
	caching := ledger.NewUsage("caching", ledger.KindCaching)
	caching.Categories[alloc.Workspace.String()] = FlashInferWorkspace
	caching.Categories[alloc.Metadata.String()] = reqTok
	if in.SGLangCompat {
		caching.Categories[alloc.Metadata.String()] = sg.ReqToTokenBytes
		kvAlloc.Kind = ledger.KindCaching
		ph.add("KV pools", compat.KVMappedBytes+sg.ReqToTokenBytes)
		ph.add("workspaces", FlashInferWorkspace)
		ph.add("graph capture", graphPool+shared)
	} else {
		ph.add("KV pools", own.PrefixMappedBytes+reqTok)
		ph.add("workspaces", FlashInferWorkspace)
		ph.add("graph capture", graphPool+shared)
		ph.add("post-capture KV growth", own.KVMappedBytes-own.PrefixMappedBytes)
	}
	ph.add("ready", 0)
	graph := ledger.NewUsage("caching/graphs", ledger.KindGraphPool)
	graph.DeviceBytes, graph.Categories[alloc.Graph.String()] = graphPool+shared, graphPool+shared
	caching.DeviceBytes = FlashInferWorkspace + caching.Categories[alloc.Metadata.String()]
	kvAlloc.DeviceBytes = chosen.KVMappedBytes
	kvAlloc.Categories[alloc.KVCache.String()] = l.Bytes(chosen.Units)
	kvAlloc.Rounding = kvAlloc.DeviceBytes - kvAlloc.Categories[alloc.KVCache.String()]
	w := ledger.NewUsage("weights", ledger.KindDirect)
	w.DeviceBytes, w.Categories[alloc.Weights.String()] = weights+LoadOverhead, weights
	w.Categories[alloc.Workspace.String()] = LoadOverhead
	snap := snapshot(device.Info{Name: pr.Name, Kind: "cuda", Total: total}, total, ph, []ledger.Usage{w, caching, graph, kvAlloc}, chosen)
	r := Report{Input: in, Budget: chosen, Ledger: snap, Peaks: peaks, Largest: largest(peaks)}
	if in.SGLangCompat {
		r.KVHost = &own
	}
	return r, nil
}

// gpuKV asks the configurator for the model's layout on tp ranks of a
// described GPU (the same registry serve would use).
func gpuKV(in Input, page, tp, chunk int) (KVConfig, error) {
	reg := in.Configurators
	if reg == nil {
		var err error
		if reg, err = DefaultConfigurators(); err != nil {
			return KVConfig{}, err
		}
	}
	kc, err := ConfigureKV(context.Background(), reg, KVRequest{Config: in.Config, HFConfig: in.HFConfig, KVDType: in.KVDType, PageSize: page, TP: tp,
		MaxRunning: in.MaxRunning, ChunkedPrefill: chunk})
	if err != nil {
		return KVConfig{}, fmt.Errorf("plan: KV configurator: %w", err)
	}
	return kc, nil
}

// gpuPeaks are spec §4's runtime peaks for a dense bf16 model.
func gpuPeaks(in Input, maxBS int) []Peak {
	c := in.Config
	t, v, h := in.ChunkedPrefill, c.Vocab, c.Hidden
	maxRun := in.MaxRunning
	if maxRun <= 0 {
		maxRun = maxBS
	}
	return []Peak{
		{"dense layer, chunk limit", budget.DenseLayerPeak(t, h, c.Intermediate/max(1, in.TP), 2)},
		{"attention moment, chunk limit", budget.AttentionPeak(t, h, c.Heads/max(1, in.TP), max(1, c.KVHeads/max(1, in.TP)), c.HeadDim, 2)},
		{"MoE caches", 0},
		{"LM head, unpruned (chunk rows)", budget.LMHeadPeak(t, v, h, 2)},
		{"LM head, pruned (max running rows)", budget.LMHeadPeak(maxRun, v, h, 2)},
		{"logprob chunk (2048 rows, FP32 log-softmax)", budget.LogprobPeak(t, budget.LogprobChunkSize, v, 2, true)},
		{"sampler softmax scratch (max batch)", int64(maxBS) * int64(v) * 4},
		{"graph pool (decode, max batch)", budget.DenseLayerPeak(maxBS, h, c.Intermediate/max(1, in.TP), 2) + budget.LMHeadPeak(maxBS, v, h, 2)},
		{"graph-shared logits", budget.GraphSharedLogits(maxBS, v, 1)},
	}
}

// runtimePeak is the largest peak a forward reaches with kvhost's LM head
// pruning (the unpruned head is never materialised; input logprobs are
// chunked), excluding the static graph memory.
func runtimePeak(ps []Peak) int64 {
	var m int64
	for _, p := range ps {
		switch p.Name {
		case "LM head, unpruned (chunk rows)", "graph pool (decode, max batch)", "graph-shared logits":
			continue
		}
		m = max(m, p.Bytes)
	}
	return m
}

func peakOf(ps []Peak, name string) int64 {
	for _, p := range ps {
		if p.Name == name {
			return p.Bytes
		}
	}
	return 0
}
