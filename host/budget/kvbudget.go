package budget

import (
	"fmt"
	"math"
)

// KVBudgetInput is the state at KV sizing time (§3
// KVCacheConfigurator._profile_available_bytes).
type KVBudgetInput struct {
	// PBytes is pre_model_load_memory: world-minimum free bytes after
	// distributed init (§1 phase 1).
	PBytes int64 `json:"p_bytes"`
	// ABytes is the world-minimum free bytes at sizing time (§1 phase 3).
	ABytes int64 `json:"a_bytes"`
	// MemFractionStatic is f, in (0, 1].
	MemFractionStatic float64 `json:"mem_fraction_static"`
	// WorldSize > 1 sends P and A through the float32 all-reduce; 0 means 1.
	WorldSize int `json:"world_size"`
	// MMReserveMiB is SGLANG_VLM_CACHE_SIZE_MB (+ SGLANG_MM_FEATURE_CACHE_MB)
	// for multimodal models, else 0.
	MMReserveMiB float64 `json:"mm_reserve_mib"`
	// HybridMambaPostCapture raises the slack to PreCaptureReserveMiB/1024
	// (hybrid Mamba with post-capture sizing active).
	HybridMambaPostCapture bool    `json:"hybrid_mamba_post_capture"`
	PreCaptureReserveMiB   float64 `json:"pre_capture_reserve_mib"`
	// Mamba, when set, carves the Mamba state out of the rest.
	Mamba *MambaInput `json:"mamba,omitempty"`
}

// Validate reports the first field outside its allowed range.
func (in KVBudgetInput) Validate() error {
	switch {
	case in.PBytes <= 0:
		return invalid("KVBudgetInput.PBytes", in.PBytes, "> 0")
	case in.ABytes < 0:
		return invalid("KVBudgetInput.ABytes", in.ABytes, ">= 0")
	case !(in.MemFractionStatic > 0 && in.MemFractionStatic <= 1):
		return invalid("KVBudgetInput.MemFractionStatic", in.MemFractionStatic, "in (0, 1]")
	case in.WorldSize < 0:
		return invalid("KVBudgetInput.WorldSize", in.WorldSize, ">= 0 (0 means 1)")
	case !finite(in.MMReserveMiB) || in.MMReserveMiB < 0:
		return invalid("KVBudgetInput.MMReserveMiB", in.MMReserveMiB, ">= 0")
	case !finite(in.PreCaptureReserveMiB) || in.PreCaptureReserveMiB < 0:
		return invalid("KVBudgetInput.PreCaptureReserveMiB", in.PreCaptureReserveMiB, ">= 0")
	}
	if in.Mamba != nil {
		if err := in.Mamba.Validate(); err != nil {
			return fmt.Errorf("KVBudgetInput.Mamba: %w", err)
		}
	}
	return nil
}

// KVBudgetResult carries every intermediate of the §3 budget so that logs
// and the ledger can print them.
type KVBudgetResult struct {
	PGiB         float64           `json:"p_gib"`
	AGiB         float64           `json:"a_gib"`
	SlackGiB     float64           `json:"slack_gib"`
	MMReserveGiB float64           `json:"mm_reserve_gib"`
	RestGiB      float64           `json:"rest_gib"`
	Mamba        *MambaSplitResult `json:"mamba,omitempty"`
	BudgetBytes  int64             `json:"budget_bytes"`
}

// KVBudget computes the KV cache byte budget (§3):
//
//	slack = P·(1 − f)            (max with the pre-capture reserve, hybrid Mamba post-capture)
//	rest  = A − slack − mm_reserve
//	rest  = MambaSplit(rest).RestGiB   (Mamba-ish models)
//	budget_bytes = int(rest · 2^30)
//
// with P and A in GiB through float32 when WorldSize > 1. V3: budget
// 55 923 118 899 B. When rest ≤ 0 it returns *InsufficientMemoryError
// (phase "kv-budget") recommending mem_fraction_static =
// ceil(1000·(1 − A/P))/1000 with the exact minimum 1 − A/P (V13: 0.898,
// 0.8974).
func KVBudget(in KVBudgetInput) (KVBudgetResult, error) {
	if err := in.Validate(); err != nil {
		return KVBudgetResult{}, err
	}
	var r KVBudgetResult
	r.PGiB = worldMinGiB(in.PBytes, in.WorldSize)
	r.AGiB = worldMinGiB(in.ABytes, in.WorldSize)
	r.SlackGiB = float64(r.PGiB * (1 - in.MemFractionStatic)) // explicit rounding: no FMA with the subtraction below
	if in.HybridMambaPostCapture {
		r.SlackGiB = math.Max(r.SlackGiB, in.PreCaptureReserveMiB/1024)
	}
	r.MMReserveGiB = in.MMReserveMiB / 1024
	r.RestGiB = r.AGiB - r.SlackGiB - r.MMReserveGiB
	if r.RestGiB <= 0 {
		return r, kvBudgetError(r)
	}
	if in.Mamba != nil {
		m, err := MambaSplit(r.RestGiB, *in.Mamba)
		if err != nil {
			return r, err
		}
		r.Mamba = &m
		r.RestGiB = m.RestGiB
		if r.RestGiB <= 0 {
			return r, kvBudgetError(r)
		}
	}
	r.BudgetBytes = int64(r.RestGiB * GiB)
	return r, nil
}

// kvBudgetError is SGLang's "Loaded weights leave no GPU memory for the KV
// cache" with its recommendation (§3), as data.
func kvBudgetError(r KVBudgetResult) *InsufficientMemoryError {
	min := 1 - r.AGiB/r.PGiB
	return &InsufficientMemoryError{
		Phase:        "kv-budget",
		NeedBytes:    int64(math.Ceil((r.AGiB - r.RestGiB) * GiB)),
		HaveBytes:    int64(r.AGiB * GiB),
		Knob:         "mem_fraction_static",
		Suggest:      formatCeil3(min),
		SuggestValue: ceil3(min),
		Minimum:      min,
	}
}

// ceil3 is SGLang's ceil(1000·x)/1000.
func ceil3(x float64) float64 { return math.Ceil(1000*x) / 1000 }

// formatCeil3 prints ceil3(x) with %.3f as SGLang does.
func formatCeil3(x float64) string { return fmt.Sprintf("%.3f", ceil3(x)) }
