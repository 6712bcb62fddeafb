package budget

// Runtime peaks are what the slack P·(1−f) must hold (§4). All are exact
// byte counts for the stated tensor set; elemBytes is the activation dtype
// size (2 for bf16).

// DenseLayerPeak is the widest moment of a Llama-style decoder layer
// prefilling T tokens with fused add-RMSNorm (§4): layer input, residual,
// post-attention normed, gate_up [T,2I], activation [T,I] and down output
// [T,H] alive together, elemBytes·T·(4H + 3I). V9: 973 078 528 B (928 MiB).
func DenseLayerPeak(tokens, hidden, intermediate, elemBytes int) int64 {
	return int64(elemBytes) * int64(tokens) * int64(4*hidden+3*intermediate)
}

// MLPIntermediates is gate_up [T,2I] plus activation [T,I],
// elemBytes·T·3I (V9: 704 643 072 B = 672 MiB).
func MLPIntermediates(tokens, intermediate, elemBytes int) int64 {
	return int64(elemBytes) * int64(tokens) * int64(3*intermediate)
}

// AttentionPeak is the attention moment (§4): four [T,H] tensors plus qkv
// [T,(q+2kv)·head_dim]. V9: 352 MiB.
func AttentionPeak(tokens, hidden, qHeads, kvHeads, headDim, elemBytes int) int64 {
	t, e := int64(tokens), int64(elemBytes)
	return 4*t*int64(hidden)*e + t*int64((qHeads+2*kvHeads)*headDim)*e
}

// LMHeadPeak is the LM head instant (§4 "LM head"): the [rows,V] logits in
// the weight dtype, their FP32 copy and the [rows,H] hidden input.
// rows is the request count when extend states are pruned, else all rows.
// V9: 8192 rows → 6 371 147 776 B.
func LMHeadPeak(rows, vocab, hidden, weightElemBytes int) int64 {
	r := int64(rows)
	logits := r * int64(vocab)
	return logits*int64(weightElemBytes) + logits*4 + r*int64(hidden)*int64(weightElemBytes)
}

// LogprobChunkSize is SGLANG_LOGPROB_CHUNK_SIZE's default (§4).
const LogprobChunkSize = 2048

// LogprobPeak is the input-logprob peak (§4 "Input logprobs"): rows are
// processed in chunks of chunk rows when chunk > 0 and rows > chunk
// (chunk <= 0: unchunked, e.g. under DP-attention gather); each chunk holds
// its logits in elemBytes plus an FP32 copy, plus an FP32 log-softmax unless
// the fast logsumexp path is used. V9: chunk 2048 → 1 576 009 728 B,
// with log-softmax 2 626 682 880 B.
func LogprobPeak(rows, chunk, vocab, elemBytes int, fp32LogSoftmax bool) int64 {
	if chunk > 0 && rows > chunk {
		rows = chunk
	}
	per := int64(elemBytes) + 4
	if fp32LogSoftmax {
		per += 4
	}
	return int64(rows) * int64(vocab) * per
}

// GraphSharedLogits is the process-shared FP32 decode logits buffer
// (max_capture_bs·tokens_per_req, V) (§4 "CUDA graphs"). V10: 131 334 144 B.
func GraphSharedLogits(maxBS, vocab, tokensPerReq int) int64 {
	return int64(maxBS) * int64(max(1, tokensPerReq)) * int64(vocab) * 4
}

// MoEChunkTokens is the Triton fused_moe token chunk bound M (§4).
const MoEChunkTokens = 65536

// MoECache is the Triton fused_moe cache for tokens routed to k experts
// (§4): tokens are processed in chunks of M = min(tokens, 65536); one
// M·k·max(N,H) buffer shared by both GEMM outputs plus (M·k, N/2) for the
// activation, with N = 2·moe_intermediate/tp. V11: 928 MiB.
func MoECache(tokens, topK, n, hidden, elemBytes int) int64 {
	m := int64(min(tokens, MoEChunkTokens))
	mk := m * int64(topK)
	return mk*int64(max(n, hidden))*int64(elemBytes) + mk*int64(n/2)*int64(elemBytes)
}

// SamplingTemporaries are the device tensors one sampling step of rows
// decode rows allocates over a [rows, V] logits tensor (§4 "Sampler", §8.8):
// the same-size FP32 temporary torch.softmax materialises even when it
// writes back in place, and for top-k/top-p the sort's FP32 values and
// int64 indices plus the FP32 cumulative sum of the sorted probabilities.
// They are live together with the FP32 logits themselves.
type SamplingTemporaries struct {
	Softmax     int64 `json:"softmax_fp32"`
	SortValues  int64 `json:"sort_values_fp32"`
	SortIndices int64 `json:"sort_indices_int64"`
	CumSum      int64 `json:"top_p_cumsum_fp32"`
}

// Sampling returns the temporaries of one sampling step over rows rows of a
// vocab-wide distribution: 4 + 4 + 8 + 4 = 20 bytes per row and entry.
func Sampling(rows, vocab int) SamplingTemporaries {
	n := int64(rows) * int64(vocab)
	return SamplingTemporaries{Softmax: 4 * n, SortValues: 4 * n, SortIndices: 8 * n, CumSum: 4 * n}
}

// Total is the sum of the temporaries.
func (s SamplingTemporaries) Total() int64 {
	return s.Softmax + s.SortValues + s.SortIndices + s.CumSum
}

// PenaltyBuffers is the per-batch state of the frequency/presence penalties:
// two FP32 [rows, V] accumulators, allocated for the whole running batch as
// soon as one request asks for a penalty and alive as long as the batch
// runs, so they are live in every forward and sampling moment.
func PenaltyBuffers(rows, vocab int) int64 { return 2 * 4 * int64(rows) * int64(vocab) }
