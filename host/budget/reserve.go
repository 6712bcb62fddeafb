package budget

import "math"

// Disaggregation modes for ReserveInput.Disagg (prefill/decode split serving).
const (
	DisaggNone    = ""
	DisaggPrefill = "prefill"
	DisaggDecode  = "decode"
)

// ReserveInput describes a server configuration for the §2 reserve and
// mem_fraction_static heuristic. Zero values mean SGLang's defaults: sizes
// of 0 are filled from the §2 table, TP/PP/DPSize of 0 mean 1, and graphs
// are on unless disabled.
type ReserveInput struct {
	// GPUMemMiB is nvidia-smi memory.total (minimum over visible GPUs) in
	// MiB; <= 0 means unknown.
	GPUMemMiB float64 `json:"gpu_mem_mib"`
	TP        int     `json:"tp"`
	PP        int     `json:"pp"`
	// ChunkedPrefillSize of 0 takes ChunkedPrefillSize(GPUMemMiB).
	ChunkedPrefillSize int `json:"chunked_prefill_size"`
	// DecodeGraphMaxBS of 0 takes GraphMaxBatch(GPUMemMiB, TP).
	DecodeGraphMaxBS    int  `json:"decode_graph_max_bs"`
	DisableDecodeGraph  bool `json:"disable_decode_graph"`
	DisablePrefillGraph bool `json:"disable_prefill_graph"`
	MLA                 bool `json:"mla"`
	DPAttention         bool `json:"dp_attention"`
	DPSize              int  `json:"dp_size"`
	// PostCapture is true when post-capture KV sizing is planned (§5); the
	// reserve is then only 1536 + tp·pp/8·1024 MiB.
	PostCapture bool `json:"post_capture"`
	// Disagg is DisaggNone, DisaggPrefill or DisaggDecode.
	Disagg string `json:"disagg"`
	// MaxRunningRequests and DraftTokens size PD-decode activations:
	// act_tokens = max(max_running_or_graph_max_bs × draft_tokens, 2048).
	MaxRunningRequests int  `json:"max_running_requests"`
	DraftTokens        int  `json:"draft_tokens"`
	DeepEP             bool `json:"deepep"`
	XPU                bool `json:"xpu"`
	// VisionLayers and VisionHidden describe a VLM's ViT (0 = not a VLM).
	VisionLayers int `json:"vision_layers"`
	VisionHidden int `json:"vision_hidden"`
}

// Validate reports the first field outside its allowed range.
func (in ReserveInput) Validate() error {
	switch {
	case math.IsNaN(in.GPUMemMiB) || math.IsInf(in.GPUMemMiB, 0):
		return invalid("ReserveInput.GPUMemMiB", in.GPUMemMiB, "a finite number (<= 0 for unknown)")
	case in.TP < 0:
		return invalid("ReserveInput.TP", in.TP, ">= 0 (0 means 1)")
	case in.PP < 0:
		return invalid("ReserveInput.PP", in.PP, ">= 0 (0 means 1)")
	case in.ChunkedPrefillSize < 0:
		return invalid("ReserveInput.ChunkedPrefillSize", in.ChunkedPrefillSize, ">= 0 (0 means the default)")
	case in.DecodeGraphMaxBS < 0:
		return invalid("ReserveInput.DecodeGraphMaxBS", in.DecodeGraphMaxBS, ">= 0 (0 means the default)")
	case in.DPSize < 0:
		return invalid("ReserveInput.DPSize", in.DPSize, ">= 0 (0 means 1)")
	case in.Disagg != DisaggNone && in.Disagg != DisaggPrefill && in.Disagg != DisaggDecode:
		return invalid("ReserveInput.Disagg", in.Disagg, `"", "prefill" or "decode"`)
	case in.MaxRunningRequests < 0:
		return invalid("ReserveInput.MaxRunningRequests", in.MaxRunningRequests, ">= 0")
	case in.DraftTokens < 0:
		return invalid("ReserveInput.DraftTokens", in.DraftTokens, ">= 0")
	case in.VisionLayers < 0:
		return invalid("ReserveInput.VisionLayers", in.VisionLayers, ">= 0")
	case in.VisionHidden < 0:
		return invalid("ReserveInput.VisionHidden", in.VisionHidden, ">= 0")
	}
	return nil
}

// withDefaults returns a copy with zero (or out-of-range) sizes replaced by
// SGLang's defaults; the caller's value is never modified.
func (in ReserveInput) withDefaults() ReserveInput {
	if in.TP <= 0 {
		in.TP = 1
	}
	if in.PP <= 0 {
		in.PP = 1
	}
	if in.DPSize <= 0 {
		in.DPSize = 1
	}
	if in.ChunkedPrefillSize <= 0 {
		in.ChunkedPrefillSize = ChunkedPrefillSize(in.GPUMemMiB)
	}
	if in.DecodeGraphMaxBS <= 0 {
		in.DecodeGraphMaxBS = GraphMaxBatch(in.GPUMemMiB, in.TP)
	}
	return in
}

// PrefillGraphMaxTokens is the prefill graph's largest bucket (§2):
// chunked_prefill_size, or 2048 for MLA models.
func (in ReserveInput) PrefillGraphMaxTokens() int {
	d := in.withDefaults()
	if d.MLA {
		return 2048
	}
	return d.ChunkedPrefillSize
}

// actTokens is the §2 activation token count: max(chunked_prefill_size,
// 2048), or for PD-decode max(max_running_or_graph_max_bs × draft, 2048).
func (in ReserveInput) actTokens() int {
	act := in.ChunkedPrefillSize
	if in.Disagg == DisaggDecode {
		n := in.MaxRunningRequests
		if n <= 0 {
			n = in.DecodeGraphMaxBS
		}
		act = n * max(1, in.DraftTokens)
	}
	return max(act, 2048)
}

// baseReserveMiB is 512 + 1.5·act_tokens + tp·pp/8·1024 in Python's order.
func (in ReserveInput) baseReserveMiB() float64 {
	r := 512 + float64(1.5*float64(in.actTokens()))
	return r + float64(float64(in.TP*in.PP)/8*1024)
}

// ReserveMiB is the runtime reserve r in MiB that the §2 heuristic keeps out
// of mem_fraction_static. With PostCapture it is 1536 + tp·pp/8·1024;
// otherwise the full formula: activations, decode graph (2 MiB per batch),
// DP attention, prefill graph (8 MiB per bucket, 1536 MiB for MLA), the
// 10 GiB floor above 60 GiB of device memory, then DeepEP and XPU terms.
// Zero-valued sizes take their defaults (see ReserveInput); call Validate
// first for untrusted input.
func ReserveMiB(in ReserveInput) float64 {
	d := in.withDefaults()
	if d.PostCapture {
		return 1536 + float64(float64(d.TP*d.PP)/8*1024)
	}
	r := d.baseReserveMiB()
	decodeGraph := !d.DisableDecodeGraph
	if decodeGraph && d.Disagg != DisaggPrefill {
		r += float64(2 * d.DecodeGraphMaxBS)
	}
	if d.DPAttention {
		r += float64(d.DecodeGraphMaxBS * d.DPSize * 3)
		if d.DecodeGraphMaxBS > 300 {
			r += float64(1.5 * float64(d.DecodeGraphMaxBS*d.DPSize))
		}
	}
	if !d.DisablePrefillGraph {
		if d.MLA {
			r += 1536
		} else {
			r += float64(8 * len(PrefillTokenBuckets(d.PrefillGraphMaxTokens())))
		}
		if d.DeepEP {
			r += 1024
		}
	}
	if d.GPUMemMiB > class60G {
		r = math.Max(r, 10240)
	}
	if d.DeepEP && decodeGraph {
		r += 2048
	}
	if d.XPU {
		r += 2048
	}
	return r
}

// PreCaptureReserveMiB is pre_capture_activation_reserve_mb (§3):
// 512 + 1.5·act_tokens + tp·pp/8·1024, floored at 10240 when the device has
// more than 60 GiB. It bounds the slack of hybrid-Mamba models and the
// headroom of eager-decode post-capture sizing (§5 step 4).
func PreCaptureReserveMiB(in ReserveInput) float64 {
	d := in.withDefaults()
	r := d.baseReserveMiB()
	if d.GPUMemMiB > class60G {
		r = math.Max(r, 10240)
	}
	return r
}

// MemFractionStatic is the default mem_fraction_static f (§2):
// round((gpu_mem − r)/gpu_mem, 3), 0.95 when gpu_mem is unknown, then the
// VLM adjustment (post-capture: f − 8192/gpu_mem; otherwise
// f × 0.95 × clamp(1 − 0.1·(L·h²/(24·1024²) − 1), 0.8, 1.05)), which SGLang
// does not round again.
func MemFractionStatic(in ReserveInput) float64 {
	d := in.withDefaults()
	known := d.GPUMemMiB > 0
	f := 0.95
	if known {
		f = pyRound((d.GPUMemMiB-ReserveMiB(d))/d.GPUMemMiB, 3)
	}
	if d.VisionLayers > 0 && d.VisionHidden > 0 {
		if d.PostCapture {
			if known {
				f -= 8192 / d.GPUMemMiB
			}
		} else {
			size := float64(d.VisionLayers*d.VisionHidden*d.VisionHidden) / (24 * 1024 * 1024)
			factor := 1 - float64(0.1*(size-1))
			factor = math.Max(0.8, math.Min(1.05, factor))
			f = float64(f*0.95) * factor
		}
	}
	return f
}
