package budget

import (
	"errors"
	"math"
	"strings"
	"testing"
)

const (
	memH100    = 81559
	memH200    = 143771
	memRTX4090 = 24564
)

// TestReserveV2 reproduces every row of the spec's V2 table (§7).
func TestReserveV2(t *testing.T) {
	tests := []struct {
		name  string
		in    ReserveInput
		r     float64
		f     float64
		chunk int
		maxBS int
	}{
		{"H100 tp1", ReserveInput{GPUMemMiB: memH100, TP: 1}, 13904, 0.830, 8192, 256},
		{"H100 tp8", ReserveInput{GPUMemMiB: memH100, TP: 8}, 15312, 0.812, 8192, 512},
		{"H200 tp1", ReserveInput{GPUMemMiB: memH200, TP: 1}, 13904, 0.903, 8192, 256},
		{"H200 tp8", ReserveInput{GPUMemMiB: memH200, TP: 8}, 15312, 0.893, 8192, 512},
		{"RTX 4090 tp1", ReserveInput{GPUMemMiB: memRTX4090, TP: 1}, 7280, 0.704, 4096, 48},
		{"RTX 4090 tp8", ReserveInput{GPUMemMiB: memRTX4090, TP: 8}, 8400, 0.658, 4096, 160},
		{"H200 MLA tp8", ReserveInput{GPUMemMiB: memH200, TP: 8, MLA: true}, 16384, 0.886, 8192, 512},
		{"H100 post-capture", ReserveInput{GPUMemMiB: memH100, TP: 1, PostCapture: true}, 1664, 0.980, 8192, 256},
		{"H100 prefill graph disabled", ReserveInput{GPUMemMiB: memH100, TP: 1, DisablePrefillGraph: true}, 13440, 0.835, 8192, 256},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.in.Validate(); err != nil {
				t.Fatal(err)
			}
			if got := ReserveMiB(tc.in); got != tc.r {
				t.Errorf("ReserveMiB = %v, want %v", got, tc.r)
			}
			if got := MemFractionStatic(tc.in); got != tc.f {
				t.Errorf("MemFractionStatic = %v, want %v", got, tc.f)
			}
			d := tc.in.withDefaults()
			if d.ChunkedPrefillSize != tc.chunk || d.DecodeGraphMaxBS != tc.maxBS {
				t.Errorf("defaults chunk %d max_bs %d, want %d %d", d.ChunkedPrefillSize, d.DecodeGraphMaxBS, tc.chunk, tc.maxBS)
			}
			// Reference: straightforward float64 f before rounding.
			exact := (tc.in.GPUMemMiB - tc.r) / tc.in.GPUMemMiB
			if math.Abs(exact-tc.f) > 0.0005 {
				t.Errorf("f %v is not within 0.0005 of unrounded %v", tc.f, exact)
			}
		})
	}
	// The spec's decomposition of the H100 row: 512+12288+128+512+464.
	if got := 512 + 1.5*8192 + 1.0/8*1024 + 2*256 + 8*float64(len(PrefillTokenBuckets(8192))); got != 13904 {
		t.Errorf("H100 decomposition = %v", got)
	}
	// Caller's value is not modified by defaults.
	in := ReserveInput{GPUMemMiB: memH100}
	_ = MemFractionStatic(in)
	if in.TP != 0 || in.ChunkedPrefillSize != 0 {
		t.Errorf("MemFractionStatic modified its input: %+v", in)
	}
}

func TestReserveTerms(t *testing.T) {
	base := ReserveInput{GPUMemMiB: memRTX4090, TP: 1} // below 60 GiB: no floor
	baseR := 512 + 1.5*4096 + 128.0
	tests := []struct {
		name string
		in   func(ReserveInput) ReserveInput
		want float64
	}{
		{"defaults", func(in ReserveInput) ReserveInput { return in }, baseR + 2*48 + 8*50},
		{"decode graph off", func(in ReserveInput) ReserveInput { in.DisableDecodeGraph = true; return in }, baseR + 8*50},
		{"PD prefill no decode term", func(in ReserveInput) ReserveInput { in.Disagg = DisaggPrefill; return in }, baseR + 8*50},
		{"PD decode act tokens", func(in ReserveInput) ReserveInput {
			in.Disagg, in.MaxRunningRequests, in.DraftTokens = DisaggDecode, 1024, 4
			return in
		}, 512 + 1.5*4096 + 128 + 2*48 + 8*50},
		{"PD decode small", func(in ReserveInput) ReserveInput { in.Disagg = DisaggDecode; return in }, 512 + 1.5*2048 + 128 + 2*48 + 8*50},
		{"DP attention", func(in ReserveInput) ReserveInput { in.DPAttention, in.DPSize = true, 2; return in }, baseR + 2*48 + 48*2*3 + 8*50},
		{"DP attention big bs", func(in ReserveInput) ReserveInput {
			in.DPAttention, in.DPSize, in.DecodeGraphMaxBS = true, 2, 320
			return in
		}, baseR + 2*320 + 320*2*3 + 1.5*320*2 + 8*50},
		{"MLA", func(in ReserveInput) ReserveInput { in.MLA = true; return in }, baseR + 2*48 + 1536},
		{"DeepEP", func(in ReserveInput) ReserveInput { in.DeepEP = true; return in }, baseR + 2*48 + 8*50 + 1024 + 2048},
		{"DeepEP no graphs", func(in ReserveInput) ReserveInput {
			in.DeepEP, in.DisableDecodeGraph, in.DisablePrefillGraph = true, true, true
			return in
		}, baseR},
		{"XPU", func(in ReserveInput) ReserveInput { in.XPU = true; return in }, baseR + 2*48 + 8*50 + 2048},
		{"pp2 tp2", func(in ReserveInput) ReserveInput { in.TP, in.PP = 2, 2; return in }, 512 + 1.5*4096 + 512 + 2*48 + 8*50},
		{"chunk 3000", func(in ReserveInput) ReserveInput { in.ChunkedPrefillSize = 3000; return in },
			512 + 1.5*3000 + 128 + 2*48 + 8*float64(len(PrefillTokenBuckets(3000)))},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := ReserveMiB(tc.in(base)); got != tc.want {
				t.Errorf("ReserveMiB = %v, want %v", got, tc.want)
			}
		})
	}
	// 10 GiB floor above 60 GiB, applied before DeepEP/XPU.
	small := ReserveInput{GPUMemMiB: 64 * 1024, ChunkedPrefillSize: 2048, DecodeGraphMaxBS: 8, DisablePrefillGraph: true, XPU: true}
	if got := ReserveMiB(small); got != 10240+2048 {
		t.Errorf("floored ReserveMiB = %v, want %v", got, 10240+2048)
	}
	if got := PreCaptureReserveMiB(small); got != 10240 {
		t.Errorf("PreCaptureReserveMiB(>60G) = %v, want 10240", got)
	}
	if got := PreCaptureReserveMiB(ReserveInput{GPUMemMiB: memH100}); got != 512+1.5*8192+128 {
		t.Errorf("PreCaptureReserveMiB(H100) = %v", got)
	}
	if got := PreCaptureReserveMiB(base); got != baseR {
		t.Errorf("PreCaptureReserveMiB(4090) = %v, want %v", got, baseR)
	}
}

func TestMemFractionStaticSpecial(t *testing.T) {
	if got := MemFractionStatic(ReserveInput{}); got != 0.95 {
		t.Errorf("unknown gpu_mem f = %v, want 0.95", got)
	}
	f83, f98, mem := 0.83, 0.98, float64(memH100) // variables: float64 runtime arithmetic, not exact constants
	vlmPost := ReserveInput{GPUMemMiB: memH100, PostCapture: true, VisionLayers: 32, VisionHidden: 1280}
	if got, want := MemFractionStatic(vlmPost), f98-8192/mem; got != want {
		t.Errorf("VLM post-capture f = %v, want %v", got, want)
	}
	// L·h² = 24·1024² gives factor 1; a huge ViT clamps at 0.8, a tiny one at 1.05.
	vlm := ReserveInput{GPUMemMiB: memH100, VisionLayers: 24, VisionHidden: 1024}
	if got, want := MemFractionStatic(vlm), f83*0.95*1.0; got != want {
		t.Errorf("VLM f = %v, want %v", got, want)
	}
	vlm.VisionLayers, vlm.VisionHidden = 64, 4096
	if got, want := MemFractionStatic(vlm), f83*0.95*0.8; got != want {
		t.Errorf("big VLM f = %v, want %v", got, want)
	}
	vlm.VisionLayers, vlm.VisionHidden = 1, 64
	if got, want := MemFractionStatic(vlm), f83*0.95*1.05; got != want {
		t.Errorf("tiny VLM f = %v, want %v", got, want)
	}
	vlm.VisionLayers, vlm.VisionHidden = 27, 1152
	size := float64(27*1152*1152) / (24 * 1024 * 1024)
	if got, want := MemFractionStatic(vlm), f83*0.95*(1-0.1*(size-1)); got != want {
		t.Errorf("mid VLM f = %v, want %v", got, want)
	}
}

func TestReserveInputValidate(t *testing.T) {
	tests := []struct {
		in    ReserveInput
		field string
	}{
		{ReserveInput{GPUMemMiB: math.NaN()}, "GPUMemMiB"},
		{ReserveInput{TP: -1}, "TP"},
		{ReserveInput{PP: -1}, "PP"},
		{ReserveInput{ChunkedPrefillSize: -1}, "ChunkedPrefillSize"},
		{ReserveInput{DecodeGraphMaxBS: -1}, "DecodeGraphMaxBS"},
		{ReserveInput{DPSize: -2}, "DPSize"},
		{ReserveInput{Disagg: "both"}, "Disagg"},
		{ReserveInput{MaxRunningRequests: -1}, "MaxRunningRequests"},
		{ReserveInput{DraftTokens: -1}, "DraftTokens"},
		{ReserveInput{VisionLayers: -1}, "VisionLayers"},
		{ReserveInput{VisionHidden: -1}, "VisionHidden"},
	}
	for _, tc := range tests {
		err := tc.in.Validate()
		if !errors.Is(err, ErrInvalidInput) || !strings.Contains(err.Error(), "ReserveInput."+tc.field) {
			t.Errorf("Validate(%+v) = %v, want an ErrInvalidInput naming %s", tc.in, err, tc.field)
		}
	}
}

func TestPrefillGraphMaxTokens(t *testing.T) {
	if got := (ReserveInput{GPUMemMiB: memH200, MLA: true}).PrefillGraphMaxTokens(); got != 2048 {
		t.Errorf("MLA prefill max = %d, want 2048", got)
	}
	if got := (ReserveInput{GPUMemMiB: memH200}).PrefillGraphMaxTokens(); got != 8192 {
		t.Errorf("H200 prefill max = %d, want 8192", got)
	}
}
