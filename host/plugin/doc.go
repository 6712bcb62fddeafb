// Package plugin is kvhost's one WebAssembly runtime: every plugin kind —
// KV configurators (../../sdk/ABI.md) and sampling policies
// (../../sdk/SAMPLER_ABI.md) — is loaded, bounded, pooled and swapped here,
// on one wazero runtime (Runtime), with one error family (errors.go) and
// one registry of sources for both kinds (Registry). Package fuel
// instruments modules; package builtin embeds the built-in set of both
// kinds.
//
// Loading a version (Runtime.prepare, then a kind adapter) goes:
//
//  1. Load limits and index checks (fuel.Instrument, before wazero decodes
//     anything): module size (Config.MaxModuleBytes, also the upload and
//     plugins-folder cap), functions, code size, body size, locals, entries
//     per section; every global, function, table, type, local, element and
//     data index inside the original module's counts. A refusal is a
//     *RefusedError at stage "limits" or "instrument" (3 million empty
//     functions are refused in milliseconds).
//  2. The kind, from the exports (kindOf): a plugin of another kind is a
//     *KindError, before anything is compiled.
//  3. Validation of the original by wazero's interpreter, then the compile
//     of the instrumented module (which wazero validates again), both in a
//     bounded worker — one compile at a time — that a caller abandons when
//     its context ends or Config.CompileTimeout passes; the worker then
//     discards the result.
//  4. The import rule of the kind (*ImportError), an instance, the
//     handshake (ABI version *ABIError, exports *MissingExportError, a
//     descriptor of the right kind), the kind's checks and self-test.
//  5. Accepted: a record (below) is written, the first instance pooled.
//
// Invariants:
//
//   - A guest can fail its own call, never stall, freeze or crash the host.
//     Every call runs with a fuel budget (package fuel: one unit per loop
//     iteration or function entry, bulk memory and table operations and
//     growth charged by their length, so a budget bounds time) and a
//     wall-clock deadline enforced by the watchdog, which drains an overdue
//     instance's fuel so it traps at its next check (watchdog.go explains
//     why, and what wazero offers instead). Memories and tables are capped
//     per kind (Config.MemoryLimitPages, SamplerMemoryLimitPages,
//     MaxTableElements): declared maxima are lowered to the cap, growth
//     past it fails in the guest. No goroutine is ever left inside wasm.
//   - A failed call (*TrapError, *FuelError, *DeadlineError, a broken
//     contract) discards its instance; the version keeps serving from fresh
//     ones. IsGuestFault tells the plugin's faults from the caller's.
//   - Host functions are registered with WithGoModuleFunction and touch
//     guest memory only through api.Memory's bounds-checked Read/Write,
//     re-taken on every access; a sampler's I/O views are re-derived and
//     checked after every call.
//   - Nothing a plugin declares is trusted: a configurator's pools must
//     add up and fit (*ContractError), a sampler's answers must be its
//     rows' candidates.
//   - The compilation cache lives in Config.CacheDir with a record per
//     accepted (or described) module, keyed by the sha256 of its bytes:
//     its kind, descriptor and compiled files. A refused or abandoned
//     module leaves no compiled code behind; the cache is evicted by size,
//     least recently used first, across wazero versions, never touching a
//     file being written. Registry.ForArchitecture decides which
//     configurator claims a model from the records, or else by asking the
//     interpreter (Runtime.Describe), and compiles only the claimant.
//     A built-in set's SHA256SUMS (SumsFile, written by make plugins)
//     gives its modules' sums without reading them (source.go): a warm
//     start pages in none of the embedded modules, and bytes that are
//     read are checked against their listed sum.
//     Registry.Configure walks the same claimants and takes the first
//     that does not decline the model (sdk.StatusDeclined): where two
//     configurators claim an architecture (Mistral: mha and swa), the
//     config they read decides which serves it, never the host.
//   - With Config.RecallAnswers a configurator's configure and size
//     answers are recorded beside the records, keyed by the module's
//     sha256, the export and the exact input, and recalled when the same
//     version is asked the same question (answers.go; at most 2,048,
//     least recently used removed first): they are pure
//     functions of the bytes and the input (no clock, randomness or files
//     reach a guest). A recalled answer passes the checks a fresh one
//     does, and a claimant recorded as accepted and self-tested is
//     returned deferred, loaded on the first question it was never asked.
//   - With Config.InterpretConfigurators a configurator's instrumented
//     module runs on the interpreter instead of being compiled: the same
//     fuel and caps, and the same deadline, enforced there through the
//     call's context (the interpreter stops a guest whose context ends)
//     rather than the watchdog (TestInterpretedConfigurators runs the
//     hostile configurators there); nothing is written to the
//     compilation cache. Samplers and constraint plugins are always
//     compiled (they run on every decode step).
//   - Versions are swapped with Generation and Current: a new version is
//     built and checked completely, published atomically, and the old one
//     closes when its last call returns (drains). The sampling registry
//     swaps policies this way.
//   - The plugins folder is read as regular files within the size cap
//     only (ScanFolder, ReadPluginFile); anything else is skipped with its
//     reason. With an allow-list (package allowlist) every plugin that is
//     not a built-in must be pinned, checked before it is described or
//     compiled.
//
// How a kind plugs in (the configurator and the sampler are the two
// adapters; an output constraint — per-sequence state, an allowed-token
// mask each step, issue 19 — is the third): the sdk names its exports and
// descriptor; here, one kindSpec in kinds.go (its descriptor kind, ABI
// version, the marker export that identifies it, required exports with
// signatures, allowed import modules, memory cap, descriptor limit) added
// to kinds; and one adapter file holding a typed wrapper around *module — a
// Load function that calls Runtime.open, parses the descriptor, runs the
// kind's per-instance setup (module.setup, e.g. allocating the I/O region)
// and self-test, then accept or refuse — and its call methods, each a
// module.call or callFn with the kind's fuel budget and deadline. Pooling,
// limits, caps, fuel, deadlines, caching, typed errors and swapping come
// from the core; the kind's own registry (like package sampling's) lists
// its sources from Registry with Kind.
package plugin
