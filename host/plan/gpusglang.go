package plan

import (
	"context"
	"errors"
	"fmt"

	"github.com/kvhost/kvhost/host/budget"
	"github.com/kvhost/kvhost/sdk"
)

// SGLangGPU is SGLang's arithmetic (spec §2–§5) on a GPU plan's inputs,
// with every intermediate, so each §7 vector can be read off the report.
type SGLangGPU struct {
	SGLang
	ChunkedPrefill       int     `json:"chunked_prefill_size"`
	GraphMaxBS           int     `json:"cuda_graph_max_bs"`
	PrefillGraphBuckets  int     `json:"prefill_graph_buckets"`
	PreCaptureReserveMiB float64 `json:"pre_capture_reserve_mib"`
	// WorldSize > 1 sends P and A through the float32 all-reduce (§1):
	// PFloat32Bytes and AFloat32Bytes are what SGLang then computes with.
	WorldSize     int     `json:"world_size"`
	PFloat32Bytes int64   `json:"p_world_bytes"`
	AFloat32Bytes int64   `json:"a_world_bytes"`
	PGiB          float64 `json:"p_gib"`
	AGiB          float64 `json:"a_gib"`
	RestGiB       float64 `json:"rest_gib"`
	// Units per declared pool (Mamba: state slots including the padding
	// slot); MambaSlots is K and MambaRatio the slots one request holds.
	Units      map[string]int64 `json:"units,omitempty"`
	MambaSlots int              `json:"mamba_slots,omitempty"`
	MambaRatio int              `json:"mamba_ratio,omitempty"`
	// PoolBytes is what SGLang allocates for the pools, (units + page) ·
	// cell; AllocatorBytes is the caching allocator's charge for the same
	// buffers (spec V12) and AllocatorRoundingBytes the difference.
	PoolBytes              int64 `json:"pool_bytes"`
	AllocatorBytes         int64 `json:"allocator_bytes"`
	AllocatorRoundingBytes int64 `json:"allocator_rounding_bytes"`
	// KSizeGiB and VSizeGiB are the "KV Cache is allocated … K size: …,
	// V size: …" log figures (MHA pools).
	KSizeGiB    float64                   `json:"k_size_gib,omitempty"`
	VSizeGiB    float64                   `json:"v_size_gib,omitempty"`
	PostCapture *budget.PostCaptureResult `json:"post_capture,omitempty"`

	err error
}

func (s *SGLangGPU) fail(err error) {
	s.err, s.Error = err, err.Error()
}

// asFlag renames SGLang's knob to the plan's flag so that an error's
// advice can be typed as it reads.
func asFlag(err error) error {
	var ime *budget.InsufficientMemoryError
	if errors.As(err, &ime) && ime.Knob == "mem_fraction_static" {
		c := *ime
		c.Knob = "--mem-fraction-static"
		return &c
	}
	return err
}

// mambaRatio is the state slots one request holds (spec §3), with the
// overlap scheduler on as SGLang's default.
func mambaRatio(in GPUInput) int {
	return budget.MambaRatio(!in.DisableRadixCache, false, in.MambaExtraBuffer, true, false)
}

// sglangGPU runs spec §2's f, §3's budget with the world's float32 minima,
// the configurator's units and §3's request count, and with PostCapture
// §5's resize. A sizing that runs out is recorded in Error (the plan fails
// only when the SGLang-compatible policy was chosen); a knob combination
// SGLang itself refuses is an error.
func sglangGPU(ctx context.Context, in GPUInput, dev GPUDevice, g gpuLayout, ri budget.ReserveInput, maxBS int, st statics) (SGLangGPU, error) {
	s := SGLangGPU{ChunkedPrefill: in.ChunkedPrefill, GraphMaxBS: maxBS, WorldSize: in.TP}
	s.ReserveMiB = budget.ReserveMiB(ri)
	s.PreCaptureReserveMiB = budget.PreCaptureReserveMiB(ri)
	if !in.DisablePrefillGraph {
		s.PrefillGraphBuckets = len(budget.PrefillTokenBuckets(ri.PrefillGraphMaxTokens()))
	}
	s.MemFractionStatic = in.MemFractionStatic
	if !(s.MemFractionStatic > 0) {
		s.MemFractionStatic = budget.MemFractionStatic(ri)
	}
	if in.PostCapture {
		if err := postCaptureGate(in, g, maxBS); err != nil {
			return s, err
		}
	}
	kvb, err := budget.KVBudget(budget.KVBudgetInput{PBytes: dev.PBytes, ABytes: dev.ABytes, MemFractionStatic: s.MemFractionStatic, WorldSize: in.TP})
	s.PGiB, s.AGiB, s.SlackGiB, s.RestGiB = kvb.PGiB, kvb.AGiB, kvb.SlackGiB, kvb.RestGiB
	s.PFloat32Bytes, s.AFloat32Bytes = int64(kvb.PGiB*budget.GiB), int64(kvb.AGiB*budget.GiB)
	if err != nil {
		s.fail(asFlag(err))
		return s, nil
	}
	s.BudgetBytes = kvb.BudgetBytes
	units, err := g.size(ctx, kvb.BudgetBytes, in.MaxTotalTokens, 0)
	if err != nil {
		// SGLang: "Not enough memory. Please try to increase
		// --mem-fraction-static." The smallest f whose budget the
		// configurator sizes (one page of every pool; a window pool's
		// sliding_window + page tokens): A − P·(1−f) ≥ need.
		need, ok := g.minBudget(ctx, kvb.BudgetBytes, in.MaxTotalTokens)
		if !ok {
			s.fail(fmt.Errorf("plan: SGLang's sizing: configurator %s sizes no budget under --max-total-tokens %d: %w", g.rec.Plugin, in.MaxTotalTokens, err))
			return s, nil
		}
		minF := 1 - (kvb.AGiB-float64(need)/budget.GiB)/kvb.PGiB
		s.fail(fmt.Errorf("plan: SGLang's sizing: not enough memory, increase --mem-fraction-static (configurator: %v): %w", err,
			&budget.InsufficientMemoryError{Phase: "kv-budget", NeedBytes: need, HaveBytes: kvb.BudgetBytes, Knob: "--mem-fraction-static",
				Suggest: fmt.Sprintf("%.3f", fractionCeil(minF)), SuggestValue: fractionCeil(minF), Minimum: minF}))
		return s, nil
	}
	s.setUnits(in, g, units)
	if in.PostCapture {
		pc := budget.PostCaptureInput{PBytes: dev.PBytes, ABytes: dev.ABytes, WorldSize: in.TP, MemFractionStatic: s.MemFractionStatic,
			RowBytes: g.rows(), PageSize: in.PageSize, MaxTotalTokens: in.MaxTotalTokens,
			ReserveFloor: maxBS < s.MaxRunning, ReserveMiB: s.PreCaptureReserveMiB}
		if len(in.FreeAfterCapture) > 0 {
			pc.FreeAfterCaptureBytes = worldMin(in.FreeAfterCapture)
		} else {
			// Predicted: the boot backing, req_to_token, workspaces and
			// graphs come out of A before the resize reads free memory.
			pc.FreeAfterCaptureBytes = dev.ABytes - g.mapped(nil, budget.DefaultVMMGranularity) - s.ReqToTokenBytes - st.sum()
		}
		res, err := budget.PostCaptureKV(pc)
		s.PostCapture = &res
		if err != nil {
			s.fail(asFlag(err))
			return s, nil
		}
		s.setUnits(in, g, map[string]int64{g.main: int64(res.Tokens)})
		s.BudgetBytes = res.BudgetBytes
		s.PoolBytes, s.AllocatorBytes, s.AllocatorRoundingBytes = res.MappedBytes, res.MappedBytes, 0
	}
	return s, nil
}

// setUnits fills the token, request and byte figures for units.
func (s *SGLangGPU) setUnits(in GPUInput, g gpuLayout, units map[string]int64) {
	s.Units = units
	s.Tokens = int(units[g.main])
	s.MaxRunning = budget.MaxRunningRequests(s.Tokens, in.ContextLen, in.MaxRunning, 1)
	s.PaddingBytes = 0
	for _, q := range g.pools {
		if q.Unit() == sdk.UnitRequest {
			s.MambaRatio = mambaRatio(in)
			s.MambaSlots = int(units[q.Name]) - 1 // one padding slot
			s.MaxRunning = min(s.MaxRunning, s.MambaSlots/s.MambaRatio)
			continue
		}
		s.PaddingBytes += g.pad(q) * q.BytesPerUnit
		if q.Name != g.main {
			continue
		}
		rows := units[q.Name] + g.pad(q)
		s.KSizeGiB, s.VSizeGiB = 0, 0
		for _, b := range q.Buffers {
			n, _ := b.Bytes()
			switch b.Name {
			case "k":
				s.KSizeGiB += float64(rows*n) / budget.GiB
			case "v":
				s.VSizeGiB += float64(rows*n) / budget.GiB
			}
		}
	}
	s.ReqToTokenBytes = budget.ReqToTokenBytes(s.MaxRunning, in.ContextLen, 0)
	s.PoolBytes, s.AllocatorBytes = g.sglangBytes(units)
	s.AllocatorRoundingBytes = s.AllocatorBytes - s.PoolBytes
}

// postCaptureGate is spec §5's list of conditions under which SGLang sizes
// the KV pool after capture; a plan asking for it where SGLang would not
// do it is refused with the reason.
func postCaptureGate(in GPUInput, g gpuLayout, maxBS int) error {
	why := ""
	switch {
	case in.Model.MLA != nil:
		why = "SGLang does not size MLA pools after capture"
	case in.KVCacheDType == sdk.KVFP4:
		why = "the FP4 pool does not take the VMM path"
	case maxBS == 0:
		why = "it needs the decode graph (--cuda-graph-max-bs > 0)"
	case in.DisablePrefillGraph:
		why = "it needs the prefill graph"
	case len(g.pools) != 1:
		why = fmt.Sprintf("this plan sizes one token pool after capture; configurator %s declared %d pools", g.rec.Plugin, len(g.pools))
	}
	if why != "" {
		return fmt.Errorf("plan: --post-capture: %s (spec §5)", why)
	}
	return nil
}

// sglangBudget is the SGLang-compatible policy's budget.
func sglangBudget(in GPUInput, dev GPUDevice, g gpuLayout, s *SGLangGPU, st statics, maxBS int) Budget {
	gran := int64(budget.DefaultVMMGranularity)
	b := Budget{Policy: "sglang-compat", TotalBytes: dev.TotalBytes, PBytes: dev.PBytes, ABytes: dev.ABytes, WeightBytes: dev.WeightBytes,
		MemFractionStatic: s.MemFractionStatic, FractionFromFlag: in.MemFractionStatic > 0, ChunkedPrefill: in.ChunkedPrefill,
		MaxRunning: s.MaxRunning, ContextLen: in.ContextLen, MaxTotalTokens: in.MaxTotalTokens, PageSize: max(1, g.page), Granularity: 1,
		HeadroomBytes: int64(s.SlackGiB * budget.GiB), Tokens: s.Tokens, UpperBoundTokens: s.Tokens, KVBudgetBytes: s.BudgetBytes,
		KVConfigurator: g.rec, GraphBuckets: budget.DecodeCaptureBatches(maxBS), GraphPoolBytes: st.graphPool + st.shared, SGLang: &s.SGLang}
	b.KVMappedBytes, b.PrefixMappedBytes = s.AllocatorBytes, s.AllocatorBytes
	if pc := s.PostCapture; pc != nil {
		b.Granularity = gran
		b.UpperBoundTokens, b.PrefixTokens, b.PrefixMappedBytes = pc.UpperBoundTokens, in.PageSize, pc.BootBackingBytes
		b.ReservedAddressBytes = g.mapped(map[string]int64{g.main: int64(pc.UpperBoundTokens)}, gran)
		b.FreeAfterCapture = pc.FreeAfterBytes + pc.MappedBytes - pc.BootBackingBytes
		b.HeadroomBytes = int64(pc.HeadroomGiB * budget.GiB)
	}
	reqTok, _, _ := budget.AllocatorBlock(s.ReqToTokenBytes)
	b.Reservations = []Reservation{
		{Name: "padding page (unbudgeted)", Bytes: s.PaddingBytes, Device: true},
		{Name: reservationReqToTokenSGLang, Bytes: reqTok, Device: true, Note: fmt.Sprintf("%d B requested", s.ReqToTokenBytes)},
		{Name: "allocator rounding of the KV buffers (unbudgeted)", Bytes: s.AllocatorRoundingBytes, Device: true},
		{Name: "attention workspace (inside the slack)", Bytes: st.flashInfer, Device: true},
		{Name: "cuBLAS workspace (inside the slack)", Bytes: st.cublas, Device: true},
		{Name: "decode graph pool and shared logits (inside the slack)", Bytes: st.graphPool + st.shared, Device: true},
	}
	if s.PostCapture != nil {
		b.Reservations[2] = Reservation{Name: "post-capture over-commit (mapped beyond the budget)", Bytes: s.PostCapture.OverCommitBytes, Device: true}
	}
	return b
}
