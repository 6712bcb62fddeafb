package budget

import "testing"

// Model shapes from spec §7.
const (
	llamaKV, llamaHD, llamaL, llamaH, llamaI, llamaV, llamaCtx = 8, 128, 32, 4096, 14336, 128256, 8192
	qwenKV, qwenHD, qwenL, qwenCtx                             = 8, 128, 36, 40960
	dsRank, dsRope, dsL, dsCtx                                 = 512, 64, 61, 163840
)

// TestCellV1 reproduces V1 (§7) and checks each against a direct
// per-layer sum.
func TestCellV1(t *testing.T) {
	tests := []struct {
		name string
		got  float64
		want float64
	}{
		{"Llama-3-8B bf16", CellMHA(llamaKV, llamaHD, llamaHD, llamaL, 1, 2), 131072},
		{"Llama-3-8B fp8", CellMHA(llamaKV, llamaHD, llamaHD, llamaL, 1, 1), 65536},
		{"Llama-3-8B mxfp8", CellMXFP8(llamaKV, llamaHD, llamaHD, llamaL, 1), 67584},
		{"Llama-3-8B fp4", CellFP4MHA(llamaKV, llamaHD, llamaHD, llamaL, 1), 38912},
		{"Llama-3-8B bf16 TP8", CellMHA(llamaKV, llamaHD, llamaHD, llamaL, 8, 2), 16384},
		{"Llama-3-8B bf16 TP16 (n clamps to 1)", CellMHA(llamaKV, llamaHD, llamaHD, llamaL, 16, 2), 16384},
		{"Qwen3-8B bf16", CellMHA(qwenKV, qwenHD, qwenHD, qwenL, 1, 2), 147456},
		{"DeepSeek-V3 MLA bf16", CellMLA(dsRank, dsRope, dsL, 2), 70272},
		{"DeepSeek-V3 MLA fp8", CellMLA(dsRank, dsRope, dsL, 1), 35136},
		{"DeepSeek-V3 MLA + MTP layer", CellWithDraft(CellMLA(dsRank, dsRope, dsL, 2), 1, dsL), 71424},
		{"DeepSeek-V3 MLA fp4", CellMLAFP4(dsRank, dsRope, dsL), 576*61/2 + 36*61},
		{"MLA DSA fp8 per layer", CellMLADSAFP8(512, 64, 0, 1), 656},
		{"MLA DSA fp8 61 layers idx128", CellMLADSAFP8(512, 64, 128, 61), (656 + 132) * 61},
		{"Qwen3-Next full layers TP4", CellMHA(2, 256, 256, 12, 4, 2), 12288},
		{"gpt-oss-20b hybrid SWA", CellHybridSWA(2048, 2048, 12, 12, 0, 0.8), 44236.8},
		{"all-SWA", CellHybridSWA(0, 2048, 0, 24, 0, 0.8), 49152},
		{"gpt-oss-20b no hybrid", CellMHA(8, 64, 64, 24, 1, 2), 49152},
		{"no draft layers", CellWithDraft(131072, 0, 32), 131072},
	}
	for _, tc := range tests {
		if tc.got != tc.want {
			t.Errorf("%s: cell = %v, want %v", tc.name, tc.got, tc.want)
		}
	}
	// FP4 components from V1: 32 768 packed + 4 096 scales + 2 048 dequant.
	packed, scales, deq := 8*256*32/2, 8*128*32*2/16, 8*128*2
	if packed != 32768 || scales != 4096 || deq != 2048 {
		t.Errorf("FP4 parts %d %d %d", packed, scales, deq)
	}
	// Reference: sum per layer of K and V rows.
	var ref float64
	for range llamaL {
		ref += 8*128*2 + 8*128*2
	}
	if got := CellMHA(llamaKV, llamaHD, llamaHD, llamaL, 1, 2); got != ref {
		t.Errorf("CellMHA %v != per-layer sum %v", got, ref)
	}
	// The hybrid cell is the Python float sum, not the exact decimal.
	f, r := 2048.0, 0.8
	if got, want := CellHybridSWA(f, f, 12, 12, 1, r), f*13+r*f*12; got != want {
		t.Errorf("hybrid with draft full layer = %v, want %v", got, want)
	}
}
