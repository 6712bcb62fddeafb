package plan

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/kvhost/kvhost/host/budget"
	"github.com/kvhost/kvhost/sdk"
)

// kvhostGPU is kvhost's own policy on a GPU. The runtime headroom is sized
// for the batch the plan admits: every moment's live tensors are summed
// (the penalty buffers of the running batch in each), the largest moment
// is kept, plus one allocator segment. The request table, the attention
// and cuBLAS workspaces and the graph memory are reserved apart. The KV
// pools take the rest, sized by the configurator and mapped in whole
// granules without over-commit.
//
// Admission: an explicit --max-running-requests is sized for as given.
// Otherwise the plan starts from SGLang's request count and admits the
// largest batch whose runtime memory (headroom, request table, workspaces,
// graphs) fits in the slack P·(1 − f) that SGLang's default f — or the
// given --mem-fraction-static — keeps, and says so when that is fewer.
// With --mem-fraction-static the headroom is that slack less the
// reservations, as in SGLang, where P·(1 − f) holds everything at runtime.
func kvhostGPU(ctx context.Context, in GPUInput, dev GPUDevice, g gpuLayout, reconf func(rows int) (gpuLayout, error), sg *SGLangGPU, s peakShapes, maxBS int, st statics) (Budget, map[string]int64, Admission, []Moment, error) {
	gran := int64(budget.DefaultVMMGranularity)
	fraction := in.MemFractionStatic > 0
	f := sg.MemFractionStatic
	adm := Admission{Explicit: in.MaxRunning > 0, SlackBytes: FractionHeadroom(dev.PBytes, f)}
	switch {
	case adm.Explicit:
		adm.Requested = in.MaxRunning
	case sg.MaxRunning > 0:
		adm.Requested = sg.MaxRunning
	default: // SGLang's sizing failed: its estimate for kvhost's upper bound
		ub := 0
		if u, err := g.size(ctx, dev.ABytes, in.MaxTotalTokens, 0); err == nil {
			ub = int(u[g.main])
		}
		adm.Requested = max(1, budget.MaxRunningRequests(ub, in.ContextLen, 0, 1))
	}
	runtime := func(rows int) (int64, []Moment) {
		ms := gpuMoments(s, in.ChunkedPrefill, rows, in.LogprobChunk)
		peak, frag := gpuHeadroom(ms)
		return peak + frag + budget.ReqToTokenBytes(rows, in.ContextLen, 0) + st.sum(), ms
	}
	rows := adm.Requested
	need, ms := runtime(rows)
	if need > adm.SlackBytes && !adm.Explicit {
		fit := sort.Search(rows, func(b int) bool { n, _ := runtime(b + 1); return n > adm.SlackBytes })
		adm.Note = fmt.Sprintf("admits %d running requests, not %d: at %d rows the live runtime peaks, request table, workspaces and graphs need %d B, more than the %d B slack P·(1−%.3f)",
			max(1, fit), rows, rows, need, adm.SlackBytes, f)
		rows = max(1, fit)
		need, ms = runtime(rows)
	}
	// Without a fraction the runtime must also leave one context of KV in
	// what the weights left (A): on a small device that bounds the batch
	// before the slack does.
	if ctxKV := g.mapped(map[string]int64{g.main: int64(in.ContextLen)}, gran); !fraction && !adm.Explicit && need+ctxKV > dev.ABytes {
		fit := sort.Search(rows, func(b int) bool { n, _ := runtime(b + 1); return n+ctxKV > dev.ABytes })
		if fit >= 1 {
			adm.Note = fmt.Sprintf("admits %d running requests, not %d: at %d rows the runtime (%d B) and one context of KV (%d B) exceed the %d B the weights leave",
				fit, adm.Requested, rows, need, ctxKV, dev.ABytes)
			rows = fit
			need, ms = runtime(rows)
		}
	}
	adm.Admitted, adm.RuntimeBytes = rows, need
	if g.windowed() && reconf != nil {
		var err error
		if g, err = reconf(rows); err != nil {
			return Budget{}, nil, adm, ms, fmt.Errorf("plan: KV configurator for %d running requests: %w", rows, err)
		}
	}
	peak, frag := gpuHeadroom(ms)
	reqTok := budget.ReqToTokenBytes(rows, in.ContextLen, 0)
	b := Budget{Policy: "kvhost", TotalBytes: dev.TotalBytes, PBytes: dev.PBytes, ABytes: dev.ABytes, WeightBytes: dev.WeightBytes,
		ChunkedPrefill: in.ChunkedPrefill, MaxRunning: rows, ContextLen: in.ContextLen, MaxTotalTokens: in.MaxTotalTokens,
		PageSize: max(1, g.page), Granularity: gran, ProfilePeakBytes: peak, FragmentationBytes: frag, HeadroomBytes: peak + frag,
		KVConfigurator: g.rec, GraphBuckets: budget.DecodeCaptureBatches(maxBS), GraphPoolBytes: st.graphPool + st.shared, SGLang: &sg.SGLang}
	if fraction {
		b.MemFractionStatic, b.FractionFromFlag = in.MemFractionStatic, true
		b.HeadroomBytes = adm.SlackBytes - reqTok - st.sum()
		if need > adm.SlackBytes {
			return b, nil, adm, ms, fractionShort(in, dev, rows, need, adm.SlackBytes, runtime)
		}
	}
	b.PrefixTokens = in.PageSize
	b.PrefixMappedBytes = g.mapped(nil, gran)
	b.FreeAfterCapture = dev.ABytes - reqTok - b.PrefixMappedBytes - st.sum()
	avail := b.FreeAfterCapture + b.PrefixMappedBytes - b.HeadroomBytes
	b.KVBudgetBytes = max(0, avail)
	reqCap := 0
	for _, q := range g.pools {
		if q.Unit() == sdk.UnitRequest {
			reqCap = rows*mambaRatio(in) + 1 // state slots for the admitted batch, plus the padding slot
		}
	}
	if u, err := g.size(ctx, dev.ABytes-reqTok, in.MaxTotalTokens, reqCap); err == nil {
		b.UpperBoundTokens = int(u[g.main])
		b.ReservedAddressBytes = g.mapped(u, gran)
	}
	b.Reservations = []Reservation{
		{Name: reservationReqToToken, Bytes: reqTok, Device: true, Note: fmt.Sprintf("(%d+1) requests × (context %d + 4) int32", rows, in.ContextLen)},
		{Name: "attention workspace", Bytes: st.flashInfer, Device: true},
		{Name: "cuBLAS workspace", Bytes: st.cublas, Device: true},
		{Name: "decode graph pool", Bytes: st.graphPool, Device: true},
		{Name: "graph-shared logits", Bytes: st.shared, Device: true},
		{Name: "runtime headroom (largest live moment + one allocator segment)", Bytes: b.HeadroomBytes, Device: true},
	}
	units, mapped, err := g.fit(ctx, avail, in.MaxTotalTokens, reqCap, gran)
	if err != nil || units[g.main] < int64(in.ContextLen) {
		short := &budget.InsufficientMemoryError{Phase: "post-capture-kv",
			NeedBytes: g.mapped(map[string]int64{g.main: int64(in.ContextLen)}, gran) + dev.ABytes - avail, HaveBytes: dev.ABytes}
		if fraction {
			// Smallest f whose slack leaves one context: P·(1−f) ≤ slack − short.
			minF := 1 - float64(adm.SlackBytes-(short.NeedBytes-short.HaveBytes))/float64(dev.PBytes)
			short.Knob, short.Suggest, short.SuggestValue, short.Minimum = "--mem-fraction-static", fmt.Sprintf("%.3f", fractionCeil(minF)), fractionCeil(minF), minF
		}
		if err != nil {
			return b, nil, adm, ms, fmt.Errorf("plan: kvhost policy: the configurator sizes no KV pool in %d B (%v): %w", avail, err, short)
		}
		return b, nil, adm, ms, fmt.Errorf("plan: kvhost policy: the KV pools get %d tokens of pool %q, less than one context of %d: %w",
			units[g.main], g.main, in.ContextLen, short)
	}
	b.Tokens, b.KVMappedBytes = int(units[g.main]), mapped
	for _, q := range g.pools {
		// The state pool holds ratio slots per request plus the padding
		// slot; when the configurator's memory ratio gave fewer than the
		// batch needs, the batch is what the slots hold.
		if r := mambaRatio(in); q.Unit() == sdk.UnitRequest && int(units[q.Name]-1)/r < rows {
			held := max(1, int(units[q.Name]-1)/r)
			adm.Note = strings.TrimPrefix(fmt.Sprintf("%s; the %d state slots (%d per request) hold %d running requests", adm.Note, units[q.Name]-1, r, held), "; ")
			adm.Admitted, b.MaxRunning = held, held
		}
	}
	return b, units, adm, ms, nil
}

// fractionShort is the error of a --mem-fraction-static whose slack cannot
// hold the runtime of an explicit batch: lower the batch, or lower f.
func fractionShort(in GPUInput, dev GPUDevice, rows int, need, slack int64, runtime func(int) (int64, []Moment)) error {
	fit := sort.Search(rows, func(b int) bool { n, _ := runtime(b + 1); return n > slack })
	maxF := 1 - float64(need)/float64(dev.PBytes)
	e := &budget.InsufficientMemoryError{Phase: "runtime-headroom", NeedBytes: need, HaveBytes: slack,
		Knob: "--max-running-requests", Suggest: fmt.Sprint(fit), SuggestValue: float64(fit), Minimum: float64(fit)}
	if fit < 1 {
		e.Knob, e.Suggest, e.SuggestValue, e.Minimum = "--mem-fraction-static", fmt.Sprintf("%.3f", fractionFloor(maxF)), fractionFloor(maxF), maxF
	}
	return fmt.Errorf("plan: kvhost policy: %d running requests need %d B at runtime (live peaks %d rows, request table, workspaces, graphs), the slack P·(1−%.3f) is %d B: %w",
		rows, need, rows, in.MemFractionStatic, slack, e)
}

// fractionFloor is the largest f with three decimals at or below x.
func fractionFloor(x float64) float64 { return float64(int64(x*1000+1e-9)) / 1000 }
