package budget

import (
	"strings"
	"testing"
)

func TestTokensVectors(t *testing.T) {
	tests := []struct {
		name   string
		budget int64
		cell   float64
		page   int
		cap    int
		want   int
	}{
		{"V3 f=0.85", 55923118899, 131072, 1, 0, 426659},
		{"V3 f=0.83", 54228892712, 131072, 1, 0, 413733},
		{"V3 page 64", 55923118899, 131072, 64, 0, 426624},
		{"V3 cap", 55923118899, 131072, 1, 400000, 400000},
		{"V3 cap larger", 55923118899, 131072, 1, 500000, 426659},
		{"V3 cap page-realigned", 55923118899, 131072, 64, 400100, 400064},
		{"V4 fp8", 55923118899, 65536, 1, 0, 853319},
		{"V4 fp4", 55923118899, 38912, 1, 0, 1437168},
		{"V5 Qwen3-8B", 55602170675, 147456, 1, 0, 377076},
		{"V6 DeepSeek-V3", 44506430603, 70272, 64, 0, 633344},
		{"V7 hybrid SWA", 50 * GiB, 44236.8, 1, 0, 1213629},
		{"V7 no hybrid", 50 * GiB, 49152, 1, 0, 1092266},
		{"V8 Qwen3-Next", 16971350016, 12288, 1, 0, 1381132},
		{"V14 T_ub", 66935589109, 131072, 1, 0, 510678},
		{"V14 T", 65239991541, 131072, 1, 0, 497741},
		{"zero budget", 0, 131072, 1, 0, 0},
		{"zero cell", 1 << 40, 0, 1, 0, 0},
		{"budget below one page", 131072 * 63, 131072, 64, 0, 0},
	}
	for _, tc := range tests {
		if got := Tokens(tc.budget, tc.cell, tc.page, tc.cap); got != tc.want {
			t.Errorf("%s: Tokens = %d, want %d", tc.name, got, tc.want)
		}
		// Reference: integer division for integral cells.
		if tc.cell == float64(int64(tc.cell)) && tc.cell > 0 && tc.cap == 0 && tc.budget > 0 {
			ref := int(tc.budget / int64(tc.cell))
			ref -= ref % max(1, tc.page)
			if ref != tc.want {
				t.Errorf("%s: integer reference %d != %d", tc.name, ref, tc.want)
			}
		}
	}
	// V8: the KV budget left after the Mamba split.
	rest := 15.805801391601562
	if b := int64(rest * GiB); b != 16971350016 {
		t.Errorf("V8 budget bytes = %d", b)
	}
}

func TestMaxRunningRequests(t *testing.T) {
	tests := []struct {
		name                  string
		tokens, ctx, user, dp int
		want                  int
	}{
		{"V3 est 26666 clamps to 4096", 426659, llamaCtx, 0, 1, 4096},
		{"V5 Qwen3-8B", 377076, qwenCtx, 0, 1, 4096},
		{"V6 est 1979 clamps to 2048", 633344, dsCtx, 0, 1, 2048},
		{"V8 est 2697", 1381132, 262144, 0, 1, 2697},
		{"T//2 bound", 3000, 8192, 0, 1, 1500},
		{"user R", 426659, llamaCtx, 512, 1, 512},
		{"user R over attn DP", 426659, llamaCtx, 512, 4, 128},
		{"user R bounded by T//2", 100, llamaCtx, 512, 1, 50},
	}
	for _, tc := range tests {
		if got := MaxRunningRequests(tc.tokens, tc.ctx, tc.user, tc.dp); got != tc.want {
			t.Errorf("%s: R = %d, want %d", tc.name, got, tc.want)
		}
	}
	// The unclamped estimates named in the spec.
	for _, tc := range []struct{ tokens, ctx, est int }{{426659, llamaCtx, 26666}, {633344, dsCtx, 1979}, {1381132, 262144, 2697}} {
		if est := int(float64(tc.tokens) / float64(tc.ctx) * 512); est != tc.est {
			t.Errorf("est(%d, %d) = %d, want %d", tc.tokens, tc.ctx, est, tc.est)
		}
	}
}

func TestSWATokensV7(t *testing.T) {
	tests := []struct {
		page, full, swa int
	}{
		{1, 1213629, 970903},
		{64, 1213568, 970816},
	}
	for _, tc := range tests {
		full, swa, err := SWATokens(1213629, 0.8, tc.page, 128)
		if err != nil || full != tc.full || swa != tc.swa {
			t.Errorf("page %d: SWATokens = %d, %d, %v; want %d, %d", tc.page, full, swa, err, tc.full, tc.swa)
		}
		// Reference: straight Python transcription.
		f := 1213629 / tc.page * tc.page
		s := int(float64(f)*0.8) / tc.page * tc.page
		if f != full || s != swa {
			t.Errorf("reference %d %d", f, s)
		}
	}
	if _, _, err := SWATokens(160, 0.8, 1, 128); err == nil || !strings.Contains(err.Error(), "sliding window 128") {
		t.Errorf("window ≥ swa: err = %v", err)
	}
	if _, _, err := SWATokens(1000, 0, 1, 128); err == nil {
		t.Error("ratio 0 accepted")
	}
}

func TestSWAFixedCap(t *testing.T) {
	// 8 requests · (window 128 + 4·2 + page 16 + decode 16) + 2·2048 + 16 = 1344+4096+16 = 5456 (already a page multiple).
	if got := SWAFixedCap(8, 128, 4, 2, 16, 16, 2, 2048); got != 5456 {
		t.Errorf("SWAFixedCap = %d, want 5456", got)
	}
	// Rounding up to the page: 1·(100+0+64+0) + 0 + 64 = 228 → 256.
	if got := SWAFixedCap(1, 100, 0, 0, 64, 0, 0, 0); got != 256 {
		t.Errorf("SWAFixedCap = %d, want 256", got)
	}
}

func TestUnbudgetedAllocations(t *testing.T) {
	tests := []struct {
		name string
		got  int64
		want int64
	}{
		{"V3 req_to_token", ReqToTokenBytes(4096, llamaCtx, 0), 134316048},
		{"V5 req_to_token", ReqToTokenBytes(4096, qwenCtx, 0), 671318032},
		{"V3 K+V pool", PoolBytes(426659, 1, 131072), 55923179520},
		{"V6 MLA pool", PoolBytes(633344, 64, 70272), 44510846976},
		{"req_to_token with draft", ReqToTokenBytes(1, 10, 2), 2 * 16 * 4},
	}
	for _, tc := range tests {
		if tc.got != tc.want {
			t.Errorf("%s = %d, want %d", tc.name, tc.got, tc.want)
		}
	}
	if over := PoolBytes(426659, 1, 131072) - 55923118899; over != 60621 {
		t.Errorf("V3 pool over budget by %d, want 60 621", over)
	}
}
