// Package cpu holds the CPU kernels an LLM forward pass (Llama family) runs
// on: matrix multiplication over f32/f16/bf16/Q8_0 weights, RMSNorm, SiLU·mul,
// softmax, rotary embeddings, and causal grouped-query attention over a paged
// KV cache.
//
// Why it looks the way it does:
//
//   - Weights are used exactly as GGUF/GGML stores them (Matrix: row-major,
//     Cols = ne0, Q8_0 blocks of an f16 scale and 32 int8), so memory-mapped
//     files need no conversion and no second copy.
//   - Decode is dominated by MatMul, which is memory-bound at m=1. On amd64
//     with AVX2+FMA+F16C (detected at run time through golang.org/x/sys/cpu)
//     the dot products run in Go assembly; f16 is widened with VCVTPH2PS on the
//     fly. For small m > 1 a weight row is read once and reused across x rows:
//     f32 and f16 use a 3-weight-row × 4-x-row register tile, bf16 and Q8_0 a
//     1 × 4 tile; for m < 4 (decoding), f32/f16/bf16 rows go four at a time
//     against each x vector (rows4). exp (SiLU, softmax, attention) is
//     vectorised with the scalar expf's polynomial. Every other CPU uses the
//     portable Go kernels, and tests run both paths against float64
//     references.
//   - Prefill (m at or above a measured threshold, gemmMinM) is compute-bound
//     and uses a packed GEMM (gemm.go): 16-row weight panels are converted to
//     f32 and packed k-major, 256 columns at a time, into a buffer on the
//     worker's stack, and a register tile of out accumulates from broadcasts
//     of x: 12×16 with AVX-512 where the CPU has it, 6×16 with AVX2, or a
//     portable Go tile. Weights are never converted or copied outside that
//     per-call scratch.
//   - Kernels that take a *Pool split work over its workers through an atomic
//     chunk counter (weight rows for MatMul, (x-row block, 16-row panel) pairs
//     for the GEMM, (query row, head) pairs for Attention), so a worker
//     descheduled on a shared core does not stall the call. Workers spin
//     briefly between calls instead of parking on a channel (pool.go: a
//     parked goroutine's wake-up on a VM outlasts a decode matvec). A nil
//     *Pool means single-threaded.
//
// Invariants:
//
//   - Hot paths (MatMul, Attention, RMSNorm, Rope.Apply, SiLUMul, Softmax,
//     WriteKV, EmbeddingGather) allocate nothing per call; Pool keeps its
//     per-kernel task state inside itself and Attention takes caller scratch.
//   - One kernel call runs on a Pool at a time; concurrent callers are
//     serialised, never interleaved.
//   - Malformed shapes (short slices, invalid Matrix, page-table slots outside
//     the cache) are programming errors and panic with a "cpu:" message;
//     functions that return an error wrap ErrShape.
//   - Accumulation is float32 (as GGML); reductions that decide normalisation
//     (softmax sums) use float64. Conversions round to nearest even and keep
//     subnormals, infinities and NaN.
//   - The host is little-endian (GGUF is little-endian and f32 weight bytes are
//     reinterpreted in place).
//   - The kernels of the newer architectures follow their reference code
//     exactly and are tested against float64 transcriptions of it: YaRN and
//     rotation at an offset (rope_scaling.go, rope.go; DeepSeek, gpt-oss),
//     the mixture-of-experts router with its tie rule (moe.go), grouping by
//     expert with a deterministic scatter-add (moe_group.go), GeGLU,
//     gpt-oss's clamped SwiGLU and soft-capping (act.go), MXFP4 decoding
//     (mxfp4.go). Route, ScatterAdd and the activations allocate nothing per
//     call; ExpertGroups is sized once.
//
// The Mamba-2 kernels (mamba.go, mamba_scan.go, mamba_norm.go: the causal
// convolution with its rolling state, the selective scan — the chunked SSD
// form for prefill, the recurrence for decode — and the grouped gated
// RMSNorm) run over batches of sequences that each carry their own conv and
// SSM states, updated in place. They allocate nothing per call (a Pool
// grows its per-sequence index slices on the first call of a batch size)
// and the scan takes caller scratch (MambaScanScratch). The model side is
// docs/architectures/mamba2-hybrids.md.
package cpu
