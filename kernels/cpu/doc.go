// Package cpu holds the CPU kernels an LLM forward pass runs on: matrix
// multiplication over f32/f16/bf16 weights and GGML's block-quantized
// formats (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K–Q6_K, IQ4_NL, IQ4_XS) and
// OCP MXFP4 (gpt-oss's experts, GGML's block_mxfp4 layout), RMSNorm,
// SiLU·mul, softmax, rotary embeddings, and causal attention over a
// paged KV cache stored in any of seven encodings (f32, f16, bf16, FP8
// E4M3/E5M2, MXFP8, NVFP4), with grouped queries, sliding windows,
// soft-capping, attention sinks, separate key and value head dims and MLA's
// latent cache. It is also the one place the quantized layouts are written
// down: their decoders (dequant.go) and llama.cpp's reference quantizers
// (quantize*.go).
//
// Why it looks the way it does:
//
//   - Weights are used exactly as GGUF/GGML stores them (Matrix: row-major,
//     Cols = ne0, quantized rows as whole GGML blocks), so memory-mapped
//     files need no conversion and no second copy.
//   - Quantized weights are multiplied as llama.cpp multiplies them: each
//     call quantizes the m activation rows once to 8 bits (qact.go: 32-value
//     blocks for the 32-value formats and MXFP4, 256-value blocks with
//     16-value sums for the K-quants and IQ4_XS) and every output is an
//     integer dot product of a weight row with an activation row
//     (VPMADDUBSW/VPMADDWD on AVX2; VPDPBUSD and 512-bit vectors with
//     AVX-512 VNNI for Q8_0, Q4_K, Q5_K, Q6_K and MXFP4; portable Go
//     elsewhere), with the float scales applied once per block (MXFP4's
//     E2M1 codes doubled to integers, its E8M0 scale halved, as ggml
//     does). From m = 4 the common formats dot each
//     unpacked weight block with four activation rows at once, and from
//     m = 8 Q8_0, Q5_0, Q4_K, Q6_K and MXFP4 with eight on AVX-512 VNNI
//     (qgemm512_amd64.s: Q4_K and Q6_K scales applied by VPDPWSSD, Q8_0,
//     Q5_0 and MXFP4 two weight rows at a time with the activation codes
//     offset to unsigned once). The integer
//     sums are exact everywhere, but the kernels add the scaled block sums
//     in different orders, so a row's result can differ in its last bits
//     with the batch it is in (matmul_quant.go).
//   - Decode is dominated by MatMul, which is memory-bound at m=1. On amd64
//     with AVX2+FMA+F16C (detected at run time through golang.org/x/sys/cpu)
//     the dot products run in Go assembly; f16 is widened with VCVTPH2PS on the
//     fly. For small m > 1 a weight row is read once and reused across x rows:
//     f32 and f16 use a 3-weight-row × 4-x-row register tile, bf16 a 1 × 4
//     tile, quantized rows stay in L1 in groups of eight while each
//     activation row passes; for m < 4 (decoding), f32/f16/bf16 rows go
//     four at a time against each x vector (rows4; f32 with zmm registers,
//     two cache lines a row a step, where AVX-512 is present:
//     rows4_512_amd64.s, about 10% more weight bandwidth per core than the
//     ymm kernel). exp (SiLU, softmax, attention) is vectorised with the
//     scalar expf's polynomial. Every other CPU uses the portable Go
//     kernels, and tests run the Go, AVX2 and AVX-512 paths against float64
//     references.
//   - Prefill (m at or above a measured threshold, gemmMinM) is compute-bound
//     and uses a packed GEMM (gemm.go): 16-row weight panels are converted to
//     f32 and packed k-major, 256 columns at a time, into a buffer on the
//     worker's stack, and a register tile of out accumulates from broadcasts
//     of x: 16×16 or 12×16 with AVX-512 where the CPU has it, 6×16 with
//     AVX2, or a portable Go tile. Weights are never converted or copied
//     outside that per-call scratch. A work item packs a run of consecutive
//     panels and prefetches the next one while multiplying this one, as the
//     decode matvec (rows4) prefetches its next four rows: the hardware
//     prefetcher does not get ahead of many short row streams.
//   - Batch decode (m up to 16) with AVX-512 and a Pool packs the x rows
//     instead (gemm16.go): once per call, k-major, one zmm of x per k; a
//     16×16 tile accumulates transposed from f32 weight rows read in place
//     (each element an FMA's embedded broadcast) or f16/bf16 rows converted
//     256 columns at a time into a padded f32 buffer, and is transposed in
//     registers into out. The staging is pipelined: the kernel call that
//     multiplies one staged chunk converts the next into a second buffer, a
//     row per sixteen k, and prefetches the tile after it, so the weights'
//     loads wait beside the FMAs; a worker's pipeline runs on across its
//     work items and a MatMuls group's weights (pipeTiles). At
//     sixteen rows the per-call panel packing cost as much as the FMAs; the
//     AVX2 and Go kernels keep the packed GEMM.
//   - The KV cache is encoded on write (WriteKV, WriteKVRows; EncodeKV
//     rounds to nearest even, FP8 saturates, block scales follow the OCP MX
//     and NVFP4 rules — kvformat.go) and decoded inside attention a tile at
//     a time; no f32 copy of the cache exists. Attention (attention.go,
//     attn_tile.go) is a tiled online softmax: a work item is up to 48
//     query vectors (rows × the heads of one KV head) that share each
//     64-key tile, decoded and transposed into 16-key panels; scores and
//     value sums go through a register-tiled microkernel (12×16 AVX-512,
//     4×16 and 1×16 AVX2, portable Go) with a running max and sum per
//     vector. Items of fewer than four vectors (MHA decode) read f32/f16/
//     bf16 rows in place instead, prefetching the next page run's keys and
//     the run's values (a page run is a short stride of its own, which the
//     hardware prefetcher does not follow); with AVX-512 a page of sixteen
//     keys is scored per call and value rows are summed into 64-column
//     register strips (attnrun512_amd64.s). The scratch is a few tiles per
//     worker, independent of the context (AttentionScratch); a call with fewer
//     items than workers splits its keys and merges the parts
//     (flash-decoding). Decoders and the f16/bf16 encoders have AVX2/F16C
//     paths; the FP8 and block-scaled encoders are portable Go (a write is
//     one row per token, attention reads every row per token).
//   - Kernels that take a *Pool split work over its workers through an atomic
//     chunk counter (weight rows for MatMul, (x-row block, 16-row panel) pairs
//     for the GEMM, runs of 16-row weight tiles for the small-batch GEMM, (activation-row block, weight-row chunk) pairs for the
//     quantized MatMul, work items and their key parts for Attention), so a worker
//     descheduled on a shared core does not stall the call. Workers spin
//     briefly between calls instead of parking on a channel (pool.go: a
//     parked goroutine's wake-up on a VM outlasts a decode matvec). A nil
//     *Pool means single-threaded.
//
// Invariants:
//
//   - Hot paths (MatMul, Attention, DecodeAttention, RMSNorm, Rope.Apply,
//     SiLUMul, Softmax, WriteKV, EmbeddingGather) allocate nothing per call;
//     Pool keeps its per-kernel task state inside itself (and the quantized
//     activation rows in a buffer grown by the first call of a size) and
//     Attention takes caller scratch.
//   - Attention never reads a key before its query's window: the pages
//     there may have been released (their page-table entries are not
//     looked at).
//   - One kernel call runs on a Pool at a time; concurrent callers are
//     serialised, never interleaved.
//   - Malformed shapes (short slices, invalid Matrix, page-table slots outside
//     the cache) are programming errors and panic with a "cpu:" message;
//     functions that return an error wrap ErrShape.
//   - Accumulation is float32 (as GGML); reductions that decide normalisation
//     (softmax sums) use float64. Conversions round to nearest even and keep
//     subnormals; f16 and bf16 keep infinities and NaN, the FP8 cache
//     encodings saturate infinities to their largest finite value.
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
