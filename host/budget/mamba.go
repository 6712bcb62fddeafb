package budget

import "math"

// MambaLayerState is one linear-attention layer's per-request state (§3
// "Mamba state"): a conv state of shape Conv with ConvBytes per element and
// a temporal (SSM) state of shape Temporal with SSMBytes per element.
type MambaLayerState struct {
	Conv      []int `json:"conv"`
	ConvBytes int   `json:"conv_bytes"`
	Temporal  []int `json:"temporal"`
	SSMBytes  int   `json:"ssm_bytes"`
}

// Bytes is prod(conv)·conv_bytes + prod(temporal)·ssm_bytes.
func (s MambaLayerState) Bytes() int64 {
	prod := func(shape []int) int64 {
		p := int64(1)
		for _, d := range shape {
			p *= int64(d)
		}
		return p
	}
	return prod(s.Conv)*int64(s.ConvBytes) + prod(s.Temporal)*int64(s.SSMBytes)
}

// GDNState is the GDN / Qwen3-Next layer state at tensor parallel size tp
// (§3): conv ((2·kh·kd + vh·vd)/tp, kernel−1) in bf16, temporal
// (vh/tp, kd, vd) in fp32. V8 (TP4): conv 12 288 B + temporal 524 288 B.
func GDNState(keyHeads, keyDim, valueHeads, valueDim, convKernel, tp int) MambaLayerState {
	tp = max(1, tp)
	return MambaLayerState{
		Conv:      []int{(2*keyHeads*keyDim + valueHeads*valueDim) / tp, convKernel - 1},
		ConvBytes: 2,
		Temporal:  []int{valueHeads / tp, keyDim, valueDim},
		SSMBytes:  4,
	}
}

// Mamba2State is the Mamba2 layer state at tensor parallel size tp (§3):
// conv ((I + 2·groups·state)/tp, kernel−1) in bf16, temporal
// (heads/tp, head_dim, state) in fp32.
func Mamba2State(intermediate, groups, state, heads, headDim, convKernel, tp int) MambaLayerState {
	tp = max(1, tp)
	return MambaLayerState{
		Conv:      []int{(intermediate + 2*groups*state) / tp, convKernel - 1},
		ConvBytes: 2,
		Temporal:  []int{heads / tp, headDim, state},
		SSMBytes:  4,
	}
}

// MambaPerRequest is per_req = Σ over the linear-attention layers of the
// layer state, for layers identical layers (§3; V8: 19 316 736 at TP4).
func MambaPerRequest(layers int, s MambaLayerState) int64 {
	return int64(layers) * s.Bytes()
}

// MambaRatio is the number of state slots one request may hold (§3
// "Requests"): 1 without the radix cache; otherwise 3 (2 with
// SGLANG_OPT_MAMBA_SKIP_DECODE_LOCK), plus 2 for the extra buffer with the
// overlap scheduler or 1 for the extra buffer when lazy or not overlapped.
func MambaRatio(radixCache, skipDecodeLock, extraBuffer, overlap, lazy bool) int {
	if !radixCache {
		return 1
	}
	r := 3
	if skipDecodeLock {
		r--
	}
	if extraBuffer {
		if overlap && !lazy {
			r += 2
		} else {
			r++
		}
	}
	return r
}

// MambaInput sizes the Mamba state pool out of the KV rest (§3
// _handle_max_mamba_cache).
type MambaInput struct {
	// PerReqBytes is MambaPerRequest for the model at this TP.
	PerReqBytes int64 `json:"per_req_bytes"`
	// FullMemoryRatio is mamba_full_memory_ratio m; 0 means 0.9.
	FullMemoryRatio float64 `json:"full_memory_ratio"`
	// ExplicitSlots is a user-given state slot count (0 = derive K).
	ExplicitSlots int `json:"explicit_slots"`
	// DraftTokens is the speculative draft token count D (0 = no spec).
	DraftTokens int `json:"draft_tokens"`
	// Ratio is MambaRatio for this configuration; 0 means 1.
	Ratio int `json:"ratio"`
	// MaxRunningRequests is R for the speculative intermediate charge;
	// 0 means K//ratio.
	MaxRunningRequests int `json:"max_running_requests"`
}

// Validate reports the first field outside its allowed range.
func (in MambaInput) Validate() error {
	switch {
	case in.PerReqBytes <= 0:
		return invalid("MambaInput.PerReqBytes", in.PerReqBytes, "> 0")
	case !finite(in.FullMemoryRatio) || in.FullMemoryRatio < 0:
		return invalid("MambaInput.FullMemoryRatio", in.FullMemoryRatio, ">= 0 (0 means 0.9)")
	case in.ExplicitSlots < 0:
		return invalid("MambaInput.ExplicitSlots", in.ExplicitSlots, ">= 0")
	case in.DraftTokens < 0:
		return invalid("MambaInput.DraftTokens", in.DraftTokens, ">= 0")
	case in.Ratio < 0:
		return invalid("MambaInput.Ratio", in.Ratio, ">= 0 (0 means 1)")
	case in.MaxRunningRequests < 0:
		return invalid("MambaInput.MaxRunningRequests", in.MaxRunningRequests, ">= 0")
	}
	return nil
}

// MambaSplitResult is the Mamba share of the KV rest.
type MambaSplitResult struct {
	// BudgetGiB is rest·m/(1+m) (0 with explicit slots).
	BudgetGiB float64 `json:"budget_gib"`
	// Slots is K, the usable state slots (one more, the padding slot, is
	// allocated).
	Slots int `json:"slots"`
	// StateBytes is (K+1)·per_req.
	StateBytes int64 `json:"state_bytes"`
	// IntermediateBytes is the speculative per_req·(min(R, K//ratio)+1)·D.
	IntermediateBytes int64 `json:"intermediate_bytes"`
	// RestGiB is what is left for the KV pool.
	RestGiB float64 `json:"rest_gib"`
}

// MambaSplit carves the Mamba state pool out of restGiB (§3):
// mamba_budget = rest·m/(1+m); K = int((budget·2^30 − per_req)//per_req),
// or with D draft tokens K = (B − per_req(1+D))//(per_req(1+D/ratio)) plus
// the intermediate per_req·(min(R, K//ratio)+1)·D; then
// rest −= ((K+1)·per_req + intermediate)/2^30. V8: rest 30 GiB → K = 788,
// state 15 240 904 704 B, rest 15.805801391601562 GiB. It fails with
// *InsufficientMemoryError (phase "mamba-state") when K < 1.
func MambaSplit(restGiB float64, in MambaInput) (MambaSplitResult, error) {
	if err := in.Validate(); err != nil {
		return MambaSplitResult{}, err
	}
	m := in.FullMemoryRatio
	if m == 0 {
		m = 0.9
	}
	ratio := max(1, in.Ratio)
	per := float64(in.PerReqBytes)
	var res MambaSplitResult
	k := in.ExplicitSlots
	if k == 0 {
		res.BudgetGiB = float64(restGiB*m) / (1 + m)
		b := float64(res.BudgetGiB * GiB)
		if in.DraftTokens == 0 {
			k = int(pyFloorDiv(b-per, per))
		} else {
			d := float64(in.DraftTokens)
			num := b - float64(per*(1+d))
			den := float64(per * (1 + d/float64(ratio)))
			k = int(pyFloorDiv(num, den))
		}
	}
	if k < 1 {
		need := 2 * in.PerReqBytes // one usable slot plus the padding slot
		e := &InsufficientMemoryError{
			Phase:     "mamba-state",
			NeedBytes: need,
			HaveBytes: int64(math.Max(0, res.BudgetGiB*GiB)),
		}
		// m/(1+m) >= x  <=>  m >= x/(1−x); no ratio helps when x >= 1.
		if x := float64(need) / GiB / restGiB; restGiB > 0 && x < 1 {
			min := x / (1 - x)
			e.Knob, e.Suggest, e.SuggestValue, e.Minimum = "mamba_full_memory_ratio", formatCeil3(min), ceil3(min), min
		}
		return MambaSplitResult{}, e
	}
	res.Slots = k
	res.StateBytes = int64(k+1) * in.PerReqBytes
	if in.DraftTokens > 0 {
		r := k / ratio
		if in.MaxRunningRequests > 0 {
			r = min(in.MaxRunningRequests, r)
		}
		res.IntermediateBytes = in.PerReqBytes * int64(r+1) * int64(in.DraftTokens)
	}
	res.RestGiB = restGiB - float64(res.StateBytes)/GiB
	if res.IntermediateBytes > 0 {
		res.RestGiB -= float64(res.IntermediateBytes) / GiB
	}
	return res, nil
}
