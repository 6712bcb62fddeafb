// Package plan is kvhost's KV sizing and `kvhost plan`: the arithmetic
// host/boot uses to size the KV pool from what it measures, and the same
// arithmetic applied to predictions, so that plan can show the ledger serve
// would produce without loading any weights.
//
// The pools are the configurator's: ConfigureKV asks the plugin that claims
// the architecture and KV dtype for its declaration (verified by kv.NewLayout)
// and every bytes → units step asks the plugin again (FitUnits shrinks the
// ask until each buffer's granular mapping fits); the host computes no cell
// size of its own.
//
// Policies. "kvhost" (the default) reserves the pools' upper bound as
// address space, maps a prefix, profiles the worst-case forwards
// (ProfileBatches) against it, keeps the measured peak plus one largest
// segment as headroom and grows the pools into the rest at the device's
// granularity, never over-committing (padding and granules are inside the
// budget). On the CPU device the pools are capped at what the scheduler
// can use (DefaultTokenCap) unless --max-total-tokens or a memory fraction
// asks for more. "sglang-compat" reproduces spec §2–§3 bit for bit
// (host/budget) and refuses pools that cannot hold one request at the
// model's context (CompatUnits).
//
// Invariant: on the CPU device, Plan's phases, allocators, pool and budget
// equal what host/boot measures, to the byte. The profile forward, the
// attention workspace and the decode-graph pool are not modelled here: a
// dry run (dryrun.go) builds host/model's own model of the architecture
// over host/device/dry — weights that are shapes, kernels that compute
// nothing — and runs its real Forward and CaptureDecodeGraphs through the
// real caching allocator, so every registered architecture is planned by
// the code that serves it; host/boot's tests fail if the two differ.
//
// GPU plans (PlanGPU, gpu*.go) need only a model's config.json: the
// configurator plugin that claims its architecture declares the pools
// (any number, token- or request-scoped) under the GPU's host facts, and
// HFModel reads the shapes of the runtime peaks and estimates the weights
// for every architecture a configurator knows, served by kvhost or not.
// The device is a preset (Presets: memory.total and an assumed context,
// constants taken from the spec's vectors and stated in the help) or the
// free-memory figures a user reads from their own server's log (P and A
// per rank, their world minimum; SGLang's view goes through float32).
// Invariants of a GPU plan:
//   - SGLang's figures (SGLangGPU) reproduce spec §2–§5 bit for bit, every
//     §7 vector included, from the command line.
//   - kvhost's headroom holds the largest set of tensors live at one
//     moment (summed, never the largest tensor alone) for the batch the
//     plan admits, plus the batch's persistent penalty buffers; the
//     request table, workspaces and graph memory are reserved apart; the
//     pools are mapped in whole granules without over-commit.
//   - A plan that does not fit fails with an *AdviceError whose every Fix
//     was planned again and fits.
package plan
