package budget

import (
	"fmt"
	"math"
)

// Tokens is the KV token capacity (§3 "Tokens" and constraints):
// T = floor(budget/cell) (CPython float floor division), floored to a
// multiple of pageSize, then capped at maxTotalTokens (> 0; --max-total-tokens)
// and page-realigned. V3: 55 923 118 899 B / 131 072 → 426 659 (page 64:
// 426 624). It returns 0 for a non-positive budget or cell; SGLang then
// raises "Not enough memory".
func Tokens(budgetBytes int64, cellBytes float64, pageSize int, maxTotalTokens int) int {
	if budgetBytes <= 0 || !(cellBytes > 0) || math.IsInf(cellBytes, 0) {
		return 0
	}
	t := int(pyFloorDiv(float64(budgetBytes), cellBytes))
	t = floorMultiple(t, pageSize)
	if maxTotalTokens > 0 && maxTotalTokens < t {
		t = floorMultiple(maxTotalTokens, pageSize)
	}
	return t
}

// MaxRunningRequests is R (§3 "Requests"):
// est = clamp(int(T/context_len·512), 2048, 4096);
// R = min(userR//attnDP if userR > 0 else est, T//2). V3: est 26 666 → 4096;
// V6: est 1979 → 2048. Apply the Mamba cap with min(R, K//ratio).
func MaxRunningRequests(tokens, contextLen, userR, attnDP int) int {
	r := 0
	if userR > 0 {
		r = userR / max(1, attnDP)
	} else {
		est := 4096
		if contextLen > 0 {
			est = int(float64(float64(tokens)/float64(contextLen)) * 512)
		}
		r = min(max(est, 2048), 4096)
	}
	return min(r, tokens/2)
}

// SWATokens splits a hybrid sliding-window capacity maxTotal into the full
// and SWA pools (§3): full = page_floor(T), swa = page_floor(int(full·r)).
// It fails when slidingWindow + pageSize >= swa. V7: 1 213 629 →
// 1 213 629 / 970 903 (page 64: 1 213 568 / 970 816).
func SWATokens(maxTotal int, ratio float64, pageSize, slidingWindow int) (full, swa int, err error) {
	if !(ratio > 0) || math.IsInf(ratio, 0) {
		return 0, 0, invalid("SWATokens ratio", ratio, "> 0")
	}
	full = floorMultiple(maxTotal, pageSize)
	swa = floorMultiple(int(float64(full)*ratio), pageSize)
	if slidingWindow+max(1, pageSize) >= swa {
		return full, swa, fmt.Errorf("budget: SWA pool of %d tokens cannot hold sliding window %d plus one page of %d; raise swa_full_tokens_ratio or the KV budget",
			swa, slidingWindow, max(1, pageSize))
	}
	return full, swa, nil
}

// SWAFixedCap is the fixed SWA pool used with explicit max_running_requests,
// radix cache off and chunked prefill (§3):
// ceil_page(reqs·(window + eviction_interval·draft + page + decode_alloc) +
// inflight_chunks·chunk + page).
func SWAFixedCap(reqs, window, evictionInterval, draft, pageSize, decodeAlloc, inflightChunks, chunk int) int {
	p := max(1, pageSize)
	n := reqs*(window+evictionInterval*draft+p+decodeAlloc) + inflightChunks*chunk + p
	return int(alignUp(int64(n), int64(p)))
}

// ReqToTokenBytes is the req_to_token table, (R+1)·(context_len + 4 +
// draft_tokens) int32 (§3 "What is actually allocated"), which is not in
// the cell budget. V3: 134 316 048; V5: 671 318 032.
func ReqToTokenBytes(maxRunning, contextLen, draftTokens int) int64 {
	return int64(maxRunning+1) * int64(contextLen+4+draftTokens) * 4
}

// PoolBytes is what a paged KV pool really allocates: (T + page)·cell, one
// dummy page for padded writes beyond the budget (§3). V3: 55 923 179 520;
// V6: 44 510 846 976.
func PoolBytes(tokens, pageSize int, cellBytes int64) int64 {
	return int64(tokens+max(1, pageSize)) * cellBytes
}
