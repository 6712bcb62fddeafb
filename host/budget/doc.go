// Package budget is the pure arithmetic of GPU memory sizing: the default
// server knobs by device class, the mem_fraction_static heuristic, the KV
// cache budget and token capacity, the runtime peaks that the slack must
// hold, PyTorch caching-allocator rounding and post-capture KV sizing.
//
// The reference for every formula is /work/shared/spec/memory-budget.md
// ("the spec"); each exported function cites its section. The package
// reproduces SGLang's numbers bit for bit, so that the host and the
// WebAssembly configurators can be checked against the spec's worked
// vectors (§7, V1–V15), and then offers corrected variants where the spec
// lists a weak spot (§8), e.g. [PostCaptureKVNoOvercommit].
//
// Beyond SGLang's arithmetic, [MoEPeak] is kvhost's own routed-experts
// instant (the §4 "MoE" moment of its grouped gather–GEMM–scatter form):
// [rows,H] ×2 + grouping indices and weights + gathered rows [n,H] + gate
// and up [n,I] with n = rows·k, which GPU plans estimate from config.json
// and the CPU plan's dry run measures (equal within 0.1 %).
//
// # Invariants
//
//   - No I/O, no global state, no imports beyond the standard library. Every
//     function is deterministic and safe for concurrent use.
//   - Float arithmetic follows CPython float64 semantics step by step:
//     int() truncates toward zero ([math.Trunc]), // on floats is CPython's
//     floor division ([pyFloorDiv]), round(x, 3) is correctly rounded
//     half-to-even on the exact binary value ([pyRound]), and world-minimum
//     readings pass through float32 when the world has more than one rank
//     (§1). Products that feed sums are wrapped in explicit float64
//     conversions so that the compiler cannot fuse them into an FMA, which
//     would change the last bit on arm64.
//   - Byte counts are int64; token and request counts are int.
//   - Units: MiB = 2^20 B, GiB = 2^30 B. Inputs named *GiB or *MiB are
//     floats in those units, *Bytes are exact integers.
//   - Input structs have a Validate method that names the bad field; the
//     functions taking them call it and wrap [ErrInvalidInput].
//   - Running out of memory is reported as *[InsufficientMemoryError], which
//     says which phase ran out, by how many bytes and which knob to set to
//     what value.
package budget
