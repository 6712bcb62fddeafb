// Package fuel makes WebAssembly guests stoppable without wazero's
// close-on-context-done checks, which cost 4–9× on a C sampler loop
// (shared/research/wasm-toolchain.md §5), and bounds what loading one
// costs. Instrument rewrites a module at load time: it appends an exported
// mutable i64 global (GlobalName) and decrements it at every function
// entry and loop header (one unit), and before every operation whose work
// grows with an operand by that operand's length — memory.fill, .copy,
// .init (one unit per ChargeBytesPerUnit bytes), table.fill, .copy, .init,
// .grow (one per element), memory.grow (ChargePerPage per page) — trapping
// (unreachable) once it would go negative, before the operation runs. A
// unit costs about a nanosecond whatever the guest spends it on, so the
// budget the host sets before each call bounds the call's time: a guest
// that loops forever, or fills 64 MiB in a loop, traps within its budget,
// its instance is discarded, and the process's garbage collector (which
// cannot stop a goroutine inside compiled wasm) waits at most one budget.
//
// Invariants:
//   - Nothing the guest can name moves: the new global is appended after
//     the original ones, and functions, types, tables and memories keep
//     their indices. Every index the original names — globals (in code and
//     constant expressions), functions, tables, types, locals, element and
//     data segments, exports — is checked against the original counts and
//     the module is refused (*DecodeError) if one lies beyond: an invalid
//     module (issue 12's `global.set 0` with no globals, which would have
//     become the guest refilling its own fuel) never becomes a valid one.
//     FuzzInstrument checks "Instrument(m) is valid ⇔ m is valid" against
//     wazero's validator; the plugin runtime also validates m itself first.
//   - Memories and tables are capped (Options.MaxMemoryPages,
//     MaxTableElements): a larger declared minimum is refused, a missing or
//     larger maximum is lowered to the cap, so memory.grow and table.grow
//     past it fail in the guest (-1) and never grow host memory.
//   - Cost limits (Options.Max*: module bytes, functions, code bytes, body
//     bytes, locals per function, entries per section) are checked as the
//     sections are framed, before any code is decoded; a module over one is
//     refused with a *LimitError naming the limit and the numbers.
//   - Only code bodies and the table, memory, global and export sections
//     are re-encoded; every other section is copied byte for byte, in order.
//   - Every instruction is decoded (MVP, sign extension, multi-value block
//     types, reference types, tail calls and the 0xFC prefix). 0xFD (SIMD),
//     0xFE (threads), exception handling and multiple memories are refused
//     rather than guessed at, so an immediate byte is never mistaken for an
//     opcode; CoreFeatures is the feature set that matches.
//   - A module that already defines, imports or exports GlobalName is
//     refused. The parser never panics on any input (FuzzInstrument).
package fuel
