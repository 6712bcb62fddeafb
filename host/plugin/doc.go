// Package plugin hosts kvhost's WebAssembly plugins with wazero: it
// compiles each plugin once (file-backed compilation cache, one
// CompiledModule per plugin version keyed by the sha256 of its bytes),
// performs the ABI handshake (../../sdk/ABI.md), pools instances for
// concurrent callers, and implements the host side of the configurator
// contract (Configure, then Layout.Size) with every result verified.
//
// Plugin calls are fault boundaries. Invariants:
//
//   - Only wazero's compiler is used, never the interpreter; the runtime is
//     built WithCloseOnContextDone(true), and every call (instantiation,
//     handshake, configure, size) runs under Config.CallTimeout, so an
//     infinite loop ends that call with a *DeadlineError.
//
//   - A trap (Go panic, unreachable, out of bounds, out of memory under
//     Config.MemoryLimitPages) ends the call with a *TrapError, and the
//     instance that trapped is closed, never returned to the pool. So is any
//     instance whose call timed out or broke the contract.
//
//   - Host functions are registered with WithGoModuleFunction (no
//     reflection) and touch guest memory only through api.Memory's
//     bounds-checked Read/Write, re-taken on every access and copied out at
//     once; guest memory growth moves it.
//
//   - Nothing a plugin declares is trusted: each pool's buffers must add up
//     to its bytes_per_unit, and Size's units must fit the available bytes
//     and the caps; otherwise the call fails with a *ContractError naming the
//     plugin and the numbers.
//
//   - Configure and Size are pure in the ABI; the host checks it: Size on an
//     instance that did not run the layout's configure re-runs it and
//     refuses a plugin whose declarations change.
//
//   - Imports are the ABI's only (*ImportError, checked after compiling,
//     before instantiating): functions of module "kvhost" and, for Go
//     guests, wasi_snapshot_preview1, each one the host provides with the
//     host's signature; never a memory. Each instance's memory is capped
//     at Config.MemoryLimitPages: a larger declared minimum fails to
//     compile, growth past it fails in the guest (Go guests then die with
//     "fatal error: out of memory", a *TrapError).
//
// Registry finds plugins in the embedded built-in set (package builtin)
// and in a --plugins directory, where a file with the same name overrides
// the built-in. With RegistryOptions.AllowSHA256 (package allowlist), a
// plugin whose bytes are neither a built-in's nor listed is refused before
// it is compiled. CheckFile is `kvhost plugin check FILE.wasm`.
package plugin
