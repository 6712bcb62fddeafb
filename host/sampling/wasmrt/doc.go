// Package wasmrt runs sampling-policy plugins (sampler ABI 1,
// sdk/SAMPLER_ABI.md) with wazero on the hot path: once per decode step for
// a whole batch, with no allocation and no copy beyond the candidates.
//
// Termination without wazero's close-on-context-done checks (4–9× on a C
// sampler, shared/research/wasm-toolchain.md §5): every module is rewritten
// at load time by host/plugin/fuel, and each call runs with a fuel budget
// of FuelBase + batch × (k + history) × FuelPerCandidate loop iterations. A guest that
// loops forever traps when the budget runs out (a *StepError of kind
// StepFuel); the instance is discarded and the module keeps serving from
// fresh instances. Config.Termination can select the context-check runtime
// instead (for comparison benchmarks) or nothing at all.
//
// Invariants:
//   - Guest memory is touched only through views re-derived, bounds- and
//     alignment-checked, from the guest's I/O header after every call into
//     the guest (memory growth moves the backing array); Instance.IO is
//     valid only between Acquire/Sample and the next call or Release.
//   - A module imports nothing but functions of wasi_snapshot_preview1
//     that the host provides, with the host's signatures (Go guests; C
//     guests import nothing), and no memory: Load refuses anything else at
//     stage "imports" before instantiating it.
//   - Each instance's memory is capped at Config.MemoryLimitPages: a module
//     whose minimum exceeds it is refused at compile; memory.grow past it
//     fails in the guest, and a guest that then traps fails its step with
//     an error naming the cap.
//   - Load refuses a module (a *RefusedError naming the stage) unless it
//     decodes, compiles, has the sampler exports with their signatures,
//     answers the handshake with a valid descriptor, allocates a consistent
//     I/O region and passes a self-test: a synthetic batch whose every
//     answer is one of its row's candidates.
//   - Every step's answers are checked the same way; a wrong answer, a
//     trap, a negative status or an exhausted budget fails that step with a
//     *StepError and closes the instance, never the process.
//   - Instances are used by one goroutine at a time; Module is safe for
//     concurrent use.
package wasmrt
