package plan

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"

	"github.com/kvhost/kvhost/host/alloc"
	"github.com/kvhost/kvhost/host/budget"
	"github.com/kvhost/kvhost/host/device"
	"github.com/kvhost/kvhost/host/ledger"
	"github.com/kvhost/kvhost/host/plugin"
	"github.com/kvhost/kvhost/sdk"
)

// GPUInput is a model and a GPU to plan for: a described GPU (a preset),
// the figures a user reads from their own server's log, or both (measured
// figures override the preset's assumptions), with SGLang's and serve's
// knobs. Zero values take the defaults named on each field.
type GPUInput struct {
	Name string `json:"model"`
	// Config is the Hugging Face config.json the configurator reads; Model
	// is parsed from it when zero.
	Config json.RawMessage `json:"-"`
	Model  HFModel         `json:"model_facts"`
	// WeightBytes is the weights' size over all ranks when known exactly
	// (a safetensors index, a GGUF header); 0 takes Model.WeightBytes.
	WeightBytes  int64  `json:"weight_bytes,omitempty"`
	WeightSource string `json:"weight_source,omitempty"`

	// GPU is a preset name (Presets); TotalBytes is memory.total and
	// overrides the preset's. One of them is required.
	GPU        string `json:"gpu,omitempty"`
	TotalBytes int64  `json:"total_bytes,omitempty"`
	// Measured free bytes, one per rank or one for all (spec §1): before
	// weight load (P, "Load weight begin. avail mem"), at KV sizing (A),
	// after graph capture (post-capture sizing), and every phase boundary
	// F0 … F_end for the ledger identity (V15).
	FreeBeforeWeights []int64 `json:"free_before_weights,omitempty"`
	FreeAtKVSizing    []int64 `json:"free_at_kv_sizing,omitempty"`
	FreeAfterCapture  []int64 `json:"free_after_capture,omitempty"`
	FreeReadings      []int64 `json:"free_readings,omitempty"`

	TP int `json:"tp"` // 0: 1
	// KVCacheDType is auto (the serving dtype), f32, f16, bf16, fp8_e4m3,
	// fp8_e5m2, mxfp8 or nvfp4 (sdk spellings fp32, fp16, fp4 too).
	KVCacheDType      string  `json:"kv_cache_dtype"`
	ContextLen        int     `json:"context_length"`       // 0: the config's
	PageSize          int     `json:"page_size"`            // 0: 1
	ChunkedPrefill    int     `json:"chunked_prefill_size"` // 0: spec §2 by memory class
	MaxRunning        int     `json:"max_running_requests"` // 0: SGLang's R, capped by kvhost's slack
	MaxTotalTokens    int     `json:"max_total_tokens"`
	MemFractionStatic float64 `json:"mem_fraction_static"` // 0: the policy's own
	SGLangCompat      bool    `json:"sglang_compat"`
	// PostCapture is SGLANG_ENABLE_POST_CAPTURE_KV_SIZING=1 (spec §5).
	PostCapture bool `json:"post_capture"`
	// GraphMaxBS: -1 spec §2's default for the memory class, 0 no decode
	// graphs.
	GraphMaxBS           int     `json:"cuda_graph_max_bs"`
	DisablePrefillGraph  bool    `json:"disable_prefill_graph"`
	SWAFullTokensRatio   float64 `json:"swa_full_tokens_ratio"`   // 0: 0.8
	MambaFullMemoryRatio float64 `json:"mamba_full_memory_ratio"` // 0: 0.9
	// MambaExtraBuffer is --mamba-scheduler-strategy extra_buffer (with the
	// overlap scheduler: 5 state slots per request instead of 3).
	MambaExtraBuffer  bool `json:"mamba_extra_buffer"`
	DisableRadixCache bool `json:"disable_radix_cache"`
	DraftLayers       int  `json:"speculative_draft_layers"`
	LogprobChunk      int  `json:"logprob_chunk_size"` // 0: 2048
	// Configurators sizes the pools (nil: the built-in set), as serve's.
	Configurators *plugin.Registry `json:"-"`
}

// Validate names the first field out of range.
func (in GPUInput) Validate() error {
	bad := func(field string, v any, want string) error {
		return fmt.Errorf("plan: %s = %v, want %s", field, v, want)
	}
	tp := max(1, in.TP)
	lists := []struct {
		name string
		v    []int64
	}{{"free_before_weights", in.FreeBeforeWeights}, {"free_at_kv_sizing", in.FreeAtKVSizing}, {"free_after_capture", in.FreeAfterCapture}}
	for _, l := range lists {
		if len(l.v) > 1 && len(l.v) != tp {
			return bad(l.name, fmt.Sprintf("%d readings", len(l.v)), fmt.Sprintf("one, or one per rank (%d)", tp))
		}
		for _, x := range l.v {
			if x <= 0 {
				return bad(l.name, x, "> 0 bytes")
			}
		}
	}
	if _, ok := Presets[in.GPU]; in.GPU != "" && !ok {
		return fmt.Errorf("plan: unknown GPU %q; presets:\n%s", in.GPU, PresetHelp())
	}
	switch {
	case in.GPU == "" && in.TotalBytes <= 0:
		return errors.New("plan: a GPU plan needs --gpu PRESET or --gpu-memory-total (nvidia-smi's memory.total)")
	case in.TotalBytes < 0:
		return bad("total_bytes", in.TotalBytes, ">= 0")
	case in.TP < 0 || in.TP > 1024:
		return bad("tp", in.TP, "1..1024")
	case in.PageSize < 0 || in.PageSize > 1<<20:
		return bad("page_size", in.PageSize, "0..1048576")
	case in.ChunkedPrefill < 0:
		return bad("chunked_prefill_size", in.ChunkedPrefill, ">= 0")
	case in.MaxRunning < 0:
		return bad("max_running_requests", in.MaxRunning, ">= 0")
	case in.MaxTotalTokens < 0:
		return bad("max_total_tokens", in.MaxTotalTokens, ">= 0")
	case in.ContextLen < 0:
		return bad("context_length", in.ContextLen, ">= 0")
	case !(in.MemFractionStatic >= 0 && in.MemFractionStatic <= 1):
		return bad("mem_fraction_static", in.MemFractionStatic, "in (0, 1], or 0 for the policy's own")
	case in.GraphMaxBS < -1:
		return bad("cuda_graph_max_bs", in.GraphMaxBS, ">= -1")
	case !(in.SWAFullTokensRatio >= 0 && in.SWAFullTokensRatio <= 1):
		return bad("swa_full_tokens_ratio", in.SWAFullTokensRatio, "in (0, 1], or 0 for 0.8")
	case !(in.MambaFullMemoryRatio >= 0 && in.MambaFullMemoryRatio <= sdk.MaxMambaFullMemoryRatio):
		return bad("mamba_full_memory_ratio", in.MambaFullMemoryRatio, "in (0, 100], or 0 for 0.9")
	case in.DraftLayers < 0 || in.DraftLayers > 64:
		return bad("speculative_draft_layers", in.DraftLayers, "0..64")
	case in.LogprobChunk < 0:
		return bad("logprob_chunk_size", in.LogprobChunk, ">= 0")
	case in.WeightBytes < 0:
		return bad("weight_bytes", in.WeightBytes, ">= 0")
	}
	if _, err := kvDTypeFact(in.KVCacheDType, ""); err != nil {
		return err
	}
	return nil
}

// kvDTypeFact is a --kv-cache-dtype value as the configurator ABI spells
// it; auto is the serving dtype (bf16, fp16 for a float16 checkpoint).
func kvDTypeFact(s, torchDType string) (string, error) {
	if s == "" || s == "auto" {
		if torchDType == "float16" {
			return sdk.KVFP16, nil
		}
		return sdk.KVBF16, nil
	}
	d, err := device.ParseKVDType(s)
	if err != nil {
		return "", fmt.Errorf("plan: kv_cache_dtype: %w (or auto)", err)
	}
	return map[device.KVDType]string{
		device.KVF32: sdk.KVFP32, device.KVF16: sdk.KVFP16, device.KVBF16: sdk.KVBF16,
		device.KVFP8E4M3: sdk.KVFP8E4M3, device.KVFP8E5M2: sdk.KVFP8E5M2,
		device.KVMXFP8: sdk.KVMXFP8, device.KVNVFP4: sdk.KVFP4,
	}[d], nil
}

// GPUDevice is the device side of a GPU plan, each figure with its source.
type GPUDevice struct {
	Name         string  `json:"name"`
	TotalBytes   int64   `json:"total_bytes"`
	GPUMemMiB    float64 `json:"gpu_mem_mib"`
	ComputeMajor int     `json:"compute_major"`
	// PBytes and ABytes are world minima in int64 (kvhost); SGLang's
	// float32 view of them is in the SGLang figures.
	PBytes  int64  `json:"p_bytes"`
	ABytes  int64  `json:"a_bytes"`
	PSource string `json:"p_source"`
	ASource string `json:"a_source"`
	// WeightBytes is one rank's share of the weights (total / tp).
	WeightBytes  int64  `json:"weight_bytes_per_rank"`
	WeightSource string `json:"weight_source"`
	CublasBytes  int64  `json:"cublas_workspace_bytes"`
}

func worldMin(v []int64) int64 {
	m := v[0]
	for _, x := range v[1:] {
		m = min(m, x)
	}
	return m
}

// resolveDevice turns the preset and the measured figures into P and A:
// measured ones are taken as they are (the world minimum), missing ones
// predicted (P = total − context; A = P − weights/tp − 20 MiB).
func resolveDevice(in GPUInput) GPUDevice {
	d := GPUDevice{Name: "GPU", ComputeMajor: 9}
	pr, preset := Presets[in.GPU]
	if preset {
		d.Name, d.TotalBytes, d.ComputeMajor = pr.Name, pr.MemMiB*budget.MiB, pr.ComputeMajor
	}
	if in.TotalBytes > 0 {
		d.TotalBytes = in.TotalBytes
	}
	d.GPUMemMiB = float64(d.TotalBytes) / budget.MiB
	d.CublasBytes = device.CublasWorkspaceBytes(d.ComputeMajor)
	tp := max(1, in.TP)
	d.WeightBytes, d.WeightSource = in.Model.WeightBytes/int64(tp), "estimated from config.json shapes"
	if in.WeightBytes > 0 {
		d.WeightBytes, d.WeightSource = in.WeightBytes/int64(tp), in.WeightSource
	}
	ctx := int64(contextTP1)
	if preset {
		ctx = pr.ContextTP1
	}
	if tp > 1 {
		ctx += contextTPN
	}
	switch {
	case len(in.FreeBeforeWeights) > 0:
		d.PBytes, d.PSource = worldMin(in.FreeBeforeWeights), fmt.Sprintf("measured (minimum of %d readings)", len(in.FreeBeforeWeights))
	default:
		d.PBytes, d.PSource = d.TotalBytes-ctx, fmt.Sprintf("total − assumed context %d B", ctx)
	}
	switch {
	case len(in.FreeAtKVSizing) > 0:
		d.ABytes, d.ASource = worldMin(in.FreeAtKVSizing), fmt.Sprintf("measured (minimum of %d readings)", len(in.FreeAtKVSizing))
	default:
		d.ABytes, d.ASource = d.PBytes-d.WeightBytes-LoadOverhead, "P − weights per rank − 20 MiB load overhead"
	}
	return d
}

// GPUReport is a GPU plan: the chosen policy's budget and ledger, every
// declared pool, SGLang's figures, kvhost's runtime moments and the
// admitted batch.
type GPUReport struct {
	Input  GPUInput   `json:"input"`
	Device GPUDevice  `json:"device"`
	Pools  []PoolPlan `json:"pools"`
	Budget Budget     `json:"budget"`
	SGLang *SGLangGPU `json:"sglang"`
	// KVHost is kvhost's own figure beside an SGLang-compatible plan, or
	// the reason it does not fit there (KVHostError).
	KVHost      *Budget         `json:"kvhost,omitempty"`
	KVHostError string          `json:"kvhost_error,omitempty"`
	Admission   Admission       `json:"admission"`
	Moments     []Moment        `json:"moments"`
	Ledger      ledger.Snapshot `json:"ledger"`
	Measured    *MeasuredLedger `json:"measured_ledger,omitempty"`
	// Decode is the weight bytes a decoded token reads, for a model
	// kvhost serves (set by the caller that has its tensors: DecodeBytes).
	Decode *DecodeRead `json:"decode_read,omitempty"`
}

// Admission is the decode batch kvhost sizes its runtime peaks for.
type Admission struct {
	// Requested is --max-running-requests, or SGLang's R for these inputs.
	Requested int  `json:"requested"`
	Explicit  bool `json:"explicit"`
	Admitted  int  `json:"admitted"`
	// SlackBytes is P·(1 − f) with f the given or SGLang's default
	// fraction: everything at runtime (peaks, request table, workspaces,
	// graphs) must fit in it when the batch is not explicit.
	SlackBytes   int64  `json:"slack_bytes"`
	RuntimeBytes int64  `json:"runtime_bytes"`
	Note         string `json:"note,omitempty"`
}

// MeasuredLedger is spec §1's identity over free-memory readings taken at
// every phase boundary: F0 = Σ Δi + F_end.
type MeasuredLedger struct {
	Readings []int64 `json:"readings"`
	Deltas   []int64 `json:"deltas"`
	Sum      int64   `json:"sum_deltas"`
	Error    string  `json:"error,omitempty"`
}

// PlanGPU plans in. A plan that does not fit returns an *AdviceError
// listing the settings found, by planning again, to fit.
func PlanGPU(in GPUInput) (GPUReport, error) {
	r, err := planGPUOnce(in)
	if err != nil {
		return GPUReport{}, advise(in, r, err)
	}
	return r, nil
}

func (in GPUInput) withDefaults() (GPUInput, error) {
	if err := in.Validate(); err != nil {
		return in, err
	}
	if in.Model.Architecture == "" {
		m, err := ParseHFModel(in.Config)
		if err != nil {
			return in, err
		}
		in.Model = m
	}
	in.TP = max(1, in.TP)
	in.PageSize = max(1, in.PageSize)
	if in.ContextLen == 0 {
		in.ContextLen = in.Model.ContextLen
	}
	if in.LogprobChunk == 0 {
		in.LogprobChunk = budget.LogprobChunkSize
	}
	kv, err := kvDTypeFact(in.KVCacheDType, in.Model.DType)
	in.KVCacheDType = kv
	return in, err
}

func planGPUOnce(in GPUInput) (GPUReport, error) {
	ctx := context.Background()
	in, err := in.withDefaults()
	if err != nil {
		return GPUReport{}, err
	}
	dev := resolveDevice(in)
	if dev.ABytes > dev.PBytes || dev.PBytes > dev.TotalBytes {
		return GPUReport{}, fmt.Errorf("plan: free memory must fall from total %d B to P %d B to A %d B", dev.TotalBytes, dev.PBytes, dev.ABytes)
	}
	if dev.ABytes <= 0 {
		return GPUReport{}, fmt.Errorf("plan: the weights (%d B per rank, %s) do not fit in P = %d B: %w", dev.WeightBytes, dev.WeightSource, dev.PBytes,
			&budget.InsufficientMemoryError{Phase: "weights", NeedBytes: dev.WeightBytes + LoadOverhead, HaveBytes: dev.PBytes})
	}
	reg := in.Configurators
	if reg == nil {
		if reg, err = DefaultConfigurators(); err != nil {
			return GPUReport{}, err
		}
	}
	facts := sdk.HostFacts{KVDType: in.KVCacheDType, PageSize: int64(in.PageSize), TPSize: int64(in.TP), ContextLength: int64(in.ContextLen),
		DraftLayers: int64(in.DraftLayers), SWAFullTokensRatio: in.SWAFullTokensRatio, MambaFullMemoryRatio: in.MambaFullMemoryRatio}.WithDefaults()
	g, err := configureGPU(ctx, reg, in.Config, in.Model.Architecture, facts)
	if err != nil {
		return GPUReport{}, fmt.Errorf("plan: KV configurator: %w", err)
	}
	ri := budget.ReserveInput{GPUMemMiB: dev.GPUMemMiB, TP: in.TP, ChunkedPrefillSize: in.ChunkedPrefill, DecodeGraphMaxBS: max(0, in.GraphMaxBS),
		DisableDecodeGraph: in.GraphMaxBS == 0, DisablePrefillGraph: in.DisablePrefillGraph, MLA: in.Model.MLA != nil,
		PostCapture: in.PostCapture, VisionLayers: in.Model.VisionLayers, VisionHidden: in.Model.VisionHidden}
	if in.ChunkedPrefill == 0 {
		in.ChunkedPrefill = budget.ChunkedPrefillSize(dev.GPUMemMiB)
	}
	maxBS := in.GraphMaxBS
	if maxBS < 0 {
		maxBS = budget.GraphMaxBatch(dev.GPUMemMiB, in.TP)
	}
	s := shapesOf(in.Model, in.TP)
	gp, shared := graphMoments(s, maxBS)
	st := statics{flashInfer: flashInferWorkspace(in.Model.Architecture), cublas: dev.CublasBytes, graphPool: gp.Bytes, shared: shared.AllocatorBytes}
	sg, err := sglangGPU(ctx, in, dev, g, ri, maxBS, st)
	if err != nil {
		return GPUReport{}, err
	}
	r := GPUReport{Input: in, Device: dev, SGLang: &sg}
	// kvhost's own split of a window pool is sized for the requests it
	// admits (configurators/layout WindowPoolTokens): once the admission
	// is known, the configurator is asked again with it and the chunk.
	reconf := func(rows int) (gpuLayout, error) {
		h := facts
		h.MaxRunningRequests, h.ChunkedPrefill = int64(rows), int64(in.ChunkedPrefill)
		return configureGPU(ctx, reg, in.Config, in.Model.Architecture, h)
	}
	own, ownUnits, adm, moments, ownErr := kvhostGPU(ctx, in, dev, g, reconf, &sg, s, maxBS, st)
	r.Admission, r.Moments = adm, append(moments, gp, shared)
	var chosen Budget
	var units map[string]int64
	switch {
	case in.SGLangCompat:
		if sg.Error != "" {
			return GPUReport{}, sg.err
		}
		chosen, units = sglangBudget(in, dev, g, &sg, st, maxBS), sg.Units
		if ownErr != nil {
			r.KVHostError = ownErr.Error()
		} else {
			r.KVHost = &own
		}
	case ownErr != nil:
		return r, ownErr
	default:
		chosen, units = own, ownUnits
	}
	r.Budget = chosen
	r.Pools = g.poolPlans(sg.Units, units, budget.DefaultVMMGranularity)
	r.Ledger = gpuLedger(dev, g, chosen, units, st)
	if len(in.FreeReadings) > 0 {
		m := &MeasuredLedger{Readings: in.FreeReadings}
		if d, err := budget.PhaseDeltas(in.FreeReadings); err != nil {
			m.Error = err.Error()
		} else {
			m.Deltas = d
			for _, x := range d {
				m.Sum += x
			}
			if err := budget.CheckLedger(in.FreeReadings[0], in.FreeReadings[len(in.FreeReadings)-1], d); err != nil {
				m.Error = err.Error()
			}
		}
		r.Measured = m
	}
	return r, nil
}

// statics are the runtime allocations made once and held: the attention
// backend's workspace, the cuBLAS workspace, the decode graph pool and the
// graph-shared logits buffer.
type statics struct{ flashInfer, cublas, graphPool, shared int64 }

func (s statics) sum() int64 { return s.flashInfer + s.cublas + s.graphPool + s.shared }

// gpuLedger predicts the phases and allocators of the chosen policy.
func gpuLedger(dev GPUDevice, g gpuLayout, b Budget, units map[string]int64, st statics) ledger.Snapshot {
	ph := &phaser{free: dev.TotalBytes}
	ph.add("device init", dev.TotalBytes-dev.PBytes)
	ph.add("weights", dev.PBytes-dev.ABytes)
	var reqTok int64
	for _, r := range b.Reservations {
		if r.Name == reservationReqToToken || r.Name == reservationReqToTokenSGLang {
			reqTok = r.Bytes
		}
	}
	kv := ledger.NewUsage("kv_arena", ledger.KindArena)
	if b.Policy == "sglang-compat" && b.ReservedAddressBytes == 0 {
		kv.Kind = ledger.KindCaching // SGLang's pools are torch tensors unless VMM-backed
	}
	ph.add("KV pools", b.PrefixMappedBytes+reqTok)
	ph.add("workspaces", st.flashInfer+st.cublas)
	ph.add("graph capture", st.graphPool+st.shared)
	if b.KVMappedBytes != b.PrefixMappedBytes {
		ph.add("post-capture KV growth", b.KVMappedBytes-b.PrefixMappedBytes)
	}
	ph.add("ready", 0)
	w := ledger.NewUsage("weights", ledger.KindDirect)
	// Measured readings are the truth: an estimate above P − A is cut to it.
	wt := min(dev.WeightBytes, dev.PBytes-dev.ABytes)
	w.DeviceBytes, w.Categories[alloc.Weights.String()], w.Categories[alloc.Workspace.String()] = dev.PBytes-dev.ABytes, wt, dev.PBytes-dev.ABytes-wt
	caching := ledger.NewUsage("caching", ledger.KindCaching)
	caching.Categories[alloc.Workspace.String()] = st.flashInfer
	caching.Categories[alloc.Metadata.String()] = reqTok
	caching.DeviceBytes = st.flashInfer + reqTok
	cub := ledger.NewUsage("cublas", ledger.KindDirect)
	cub.DeviceBytes, cub.Categories[alloc.Workspace.String()] = st.cublas, st.cublas
	graph := ledger.NewUsage("caching/graphs", ledger.KindGraphPool)
	graph.DeviceBytes, graph.Categories[alloc.Graph.String()] = st.graphPool+st.shared, st.graphPool+st.shared
	kv.DeviceBytes = b.KVMappedBytes
	var held int64
	for _, p := range g.pools {
		held += units[p.Name] * p.BytesPerUnit
	}
	kv.Categories[alloc.KVCache.String()] = held
	kv.Rounding = kv.DeviceBytes - held
	snap := snapshot(device.Info{Name: dev.Name, Kind: "cuda", Total: dev.TotalBytes}, dev.TotalBytes, ph, []ledger.Usage{w, caching, cub, graph, kv}, b)
	snap.KVPools = snap.KVPools[:0]
	for _, p := range g.pools {
		u := int(units[p.Name])
		page := int(max(1, g.pad(p)))
		kp := ledger.KVPool{Name: p.Name, Kind: p.Kind, Unit: p.Unit().String(), PageSize: page, Pages: u / page, FreePages: u / page,
			CapacityTokens: u, CellBytes: p.BytesPerUnit, Bytes: int64(u) * p.BytesPerUnit}
		if p.Unit() == sdk.UnitRequest {
			kp.CapacityTokens, kp.Slots = 0, u
		}
		snap.KVPools = append(snap.KVPools, kp)
	}
	return snap
}

// Reservation names shared by the two policies' ledgers.
const (
	reservationReqToToken       = "req_to_token"
	reservationReqToTokenSGLang = "req_to_token (unbudgeted)"
)

// fractionCeil is the smallest f with three decimals at or above x.
func fractionCeil(x float64) float64 { return math.Ceil(x*1000-1e-9) / 1000 }

// planGPU is Plan for a GPU preset: the model.Config's Hugging Face
// equivalent planned by PlanGPU, with the weight tensors' bytes when given
// (else params × 2, bf16).
func planGPU(in Input) (Report, error) {
	raw, err := ConfigJSON(in.Config)
	if err != nil {
		return Report{}, err
	}
	g := GPUInput{Name: in.Name, Config: raw, GPU: in.Device, TP: in.TP, PageSize: in.PageSize, ChunkedPrefill: max(0, in.ChunkedPrefill),
		MaxRunning: in.MaxRunning, MaxTotalTokens: in.MaxTotalTokens, MemFractionStatic: in.MemFractionStatic, SGLangCompat: in.SGLangCompat,
		GraphMaxBS: in.GraphMaxBS, LogprobChunk: in.LogprobChunk, Configurators: in.Configurators,
		WeightBytes: in.Config.Params() * 2, WeightSource: "parameters × 2 (bf16)"}
	if w, _ := WeightCost(in.Weights, 1); w > 0 {
		g.WeightBytes, g.WeightSource = w, "weight tensors"
	}
	r, err := PlanGPU(g)
	if err != nil {
		return Report{}, err
	}
	_, big := liveMax(r.Moments)
	return Report{Input: in, Budget: r.Budget, Ledger: r.Ledger, Peaks: momentsPeaks(r.Moments), Largest: big, KVHost: r.KVHost}, nil
}
