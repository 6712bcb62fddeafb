// Package cuda is the NVIDIA GPU device of kvhost, compiled only with the
// build tag cuda (go build -tags cuda): gorgonia.org/cu calls cuInit in its
// package init and exits the process on a machine without a GPU, and linking
// it adds NEEDED libcuda.so.1, so the default binary must never import it.
//
// Files without the tag hold the driver-free logic, tested everywhere: the
// cuBLAS library search order (libsearch.go), the decode batch buckets and
// their padding table (buckets.go), kernel launch geometry (geometry.go,
// mamba_geometry.go), the Mamba-2 batch checks (mamba_batch.go), the
// pinned staging ring (ring.go), the batched-decode metadata layout and its
// checks (decode_meta.go).
//
// Threading: every driver call runs on one goroutine locked to its OS thread
// with the device's primary context current (the device owner). Public
// methods hand closures to it; code already on the owner thread (inside
// Device.Run, as a model forward or a capture is) calls straight through.
// Stream capture uses THREAD_LOCAL mode on that thread.
//
// Integer side arrays (token ids, positions, page tables) and host floats are
// written into a pinned host ring and copied asynchronously on the device's
// stream into fixed device buffers before each launch.
//
// Graph capture (device.Capturer, used by host/model's CaptureDecodeGraphs):
//
//  1. BeginCapture opens a recording. Until EndCapture every kernel call,
//     staged copy, cuBLAS GEMM and CopyToHost runs eagerly, exactly as
//     without a capture, and is recorded with its resolved addresses. The
//     caching allocator (host/alloc BeginCapture, a private pool) may still
//     call Malloc: the recording pass IS the warm-up that sizes the pool and
//     the GEMM conversion scratch. Each host slice a call staged is bound:
//     its pinned span and a closure that re-encodes the slice's current
//     contents. A slice staged twice in one recording (positions for every
//     layer) shares one span.
//  2. EndCapture sizes the pinned output buffer, then issues the recorded
//     work again under cuStreamBeginCapture(THREAD_LOCAL) — launches, copies
//     and GEMMs only, so nothing allocates; Malloc and Free fail with a clear
//     error while the stream capture is open — and instantiates the graph.
//     A recording never wraps the staging ring (its spans are the graph's):
//     when one does not fit, the ring is replaced by a larger one and the
//     old buffers are retired, still holding the spans taken so far.
//  3. Graph.Launch waits for the stream, refills every bound span from its
//     host slices (re-checking positions and page tables against the KV
//     cache and token ids against the embedding table; a bad one refuses
//     the launch instead of faulting the context),
//     launches the graph, waits, and copies each captured device → host
//     result from pinned memory into the slice CopyToHost was given.
//
// Scalars passed by value (Attention's startPos) are replayed as captured;
// only the DecodeKernels path (WriteKVRows, DecodeAttention) reads
// per-step positions and page tables, as the device package specifies.
// Staging and output buffers that graphs use are never freed while graphs
// exist: a buffer that has to grow is retired and freed at Close.
//
// KV caches: every device.KVDType, in kernels/cpu's byte layout and with its
// rounding (the write kernels encode as its EncodeKV does, byte for byte, so
// gpu-check compares the caches exactly); attention decodes element by
// element, honours the sliding window (pages before it are neither checked
// nor read), soft-capping and sinks, and takes a value head dim of its own
// or MLA's latent rows (values inside the key row). Head dims up to 576
// (keys) and 512 (values): DeepSeek's 512+64 latent.
//
// GEMMs: a matvec kernel of ours for small M (decode); cuBLAS (dlopened at
// run time, sonames .13, .12, .11, with a fixed workspace) for larger M in
// f32, f16 and bf16; and for the block-quantized weights (Q8_0, Q4_0, Q4_1,
// Q5_0, Q5_1, Q2_K–Q6_K, IQ4_NL, IQ4_XS, MXFP4, kept as the file stores them)
// matvec_q, which decodes them on the fly, at every M.
package cuda
