package layout

import (
	"testing"

	"github.com/kvhost/kvhost/sdk"
)

// TestSWAWindowSplit pins kvhost's own hybrid split (windowSize) with
// figures worked by hand (bf16; gpt-oss-20b F = S = 12·2048 = 24,576 B,
// Gemma-2-9B F = S = 21·8192 = 172,032 B per token; context 8192):
//
//   - gpt-oss-20b, page 64, 32 requests, chunk 512, 50 GiB: a sequence
//     holds (127 + 512)/64 + 2 = 11 pages, so the window pool wants
//     (32·11 + 1)·64 = 22,592 tokens; the full pool gets
//     (53,687,091,200 − 22,592·24,576)/24,576 = 2,161,941.6 → page floor
//     2,161,920 (SGLang's 0.8 split, spec V7: 1,213,568 and 970,816).
//   - Gemma-2-9B, page 16, 4 requests, chunk 512, 8 GiB: (4095 + 512)/16
//   - 2 = 289 pages, (4·289 + 1)·16 = 18,512 tokens;
//     (8,589,934,592 − 18,512·172,032)/172,032 = 31,420.6 → 31,408.
//   - The same with 64 requests wants 295,952 window tokens, more than an
//     even split's 8,589,934,592/344,064 = 24,966 → 24,960: both pools get
//     24,960 (a sequence holds no more window pages than full ones).
//   - A token cap of 100,000 caps the full pool (→ 99,968 in pages of 64),
//     not the window pool.
//   - Chunk 0 (not given) is a whole context: (127 + 8192)/64 + 2 = 131
//     pages, more than the context's 128, so 2 requests want
//     (2·128 + 1)·64 = 16,448 tokens; the full pool
//     (53,687,091,200 − 16,448·24,576)/24,576 = 2,168,084.3 → 2,168,064.
//
// With SGLangCompat the same facts give spec V7's figures: the ratio.
func TestSWAWindowSplit(t *testing.T) {
	const gptBudget = 53687091200
	for _, tt := range []struct {
		name, model     string
		host            sdk.HostFacts
		budget, cap     int64
		full, swa, want int64
	}{
		{"gpt-oss", "gpt-oss-20b", sdk.HostFacts{PageSize: 64, MaxRunningRequests: 32, ChunkedPrefill: 512}, gptBudget, 0, 2161920, 22592, 22592},
		{"gemma2", "gemma-2-9b-it", sdk.HostFacts{PageSize: 16, MaxRunningRequests: 4, ChunkedPrefill: 512}, 8 << 30, 0, 31408, 18512, 18512},
		{"gemma2-even", "gemma-2-9b-it", sdk.HostFacts{PageSize: 16, MaxRunningRequests: 64, ChunkedPrefill: 512}, 8 << 30, 0, 24960, 24960, 295952},
		{"gpt-oss-capped", "gpt-oss-20b", sdk.HostFacts{PageSize: 64, MaxRunningRequests: 32, ChunkedPrefill: 512}, gptBudget, 100000, 99968, 22592, 22592},
		{"gpt-oss-whole-prompts", "gpt-oss-20b", sdk.HostFacts{PageSize: 64, MaxRunningRequests: 2}, gptBudget, 0, 2168064, 16448, 16448},
		{"gpt-oss-compat", "gpt-oss-20b", sdk.HostFacts{PageSize: 64, MaxRunningRequests: 32, ChunkedPrefill: 512, SGLangCompat: true}, gptBudget, 0, 1213568, 970816, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := plan(t, "swa", tt.model, tt.host)
			h := tt.host.WithDefaults()
			full, _ := p.Pool(PoolFull)
			swa, _ := p.Pool(PoolSWA)
			if tt.want > 0 {
				if w := WindowPoolTokens(swa.Window, h.ChunkedPrefill, h.PageSize, h.ContextLength, h.MaxRunningRequests); w != tt.want {
					t.Fatalf("window pool wants %d tokens, by hand %d", w, tt.want)
				}
			}
			u, err := p.Size(tt.budget, tt.cap, 0)
			if err != nil {
				t.Fatal(err)
			}
			if u[PoolFull] != tt.full || u[PoolSWA] != tt.swa {
				t.Fatalf("full %d swa %d, by hand %d / %d", u[PoolFull], u[PoolSWA], tt.full, tt.swa)
			}
			used := u[PoolFull]*full.BytesPerUnit + u[PoolSWA]*swa.BytesPerUnit
			if used > tt.budget {
				t.Fatalf("uses %d bytes of %d", used, tt.budget)
			}
			if tt.host.SGLangCompat || tt.cap > 0 {
				return
			}
			// Nothing is left idle that one more full page (with, in an
			// even split, one more window page) would use.
			more := h.PageSize * full.BytesPerUnit
			if u[PoolFull] == u[PoolSWA] {
				more += h.PageSize * swa.BytesPerUnit
			}
			if used+more <= tt.budget {
				t.Fatalf("%d bytes of %d used: another page fits", used, tt.budget)
			}
		})
	}
}

// TestSWAWindowSplitErrors: a budget whose window pool cannot hold the
// window and a page, or no page at all, is refused with the figures.
func TestSWAWindowSplitErrors(t *testing.T) {
	p := plan(t, "swa", "gpt-oss-20b", sdk.HostFacts{PageSize: 64, MaxRunningRequests: 4, ChunkedPrefill: 512})
	for _, budget := range []int64{0, 100 * 2 * 12 * 2048} { // 100 tokens in each pool: under window 128 + page 64
		if u, err := p.Size(budget, 0, 0); err == nil {
			t.Errorf("budget %d: sized %v, want an error", budget, u)
		}
	}
}
