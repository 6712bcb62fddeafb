// Package fuel makes WebAssembly guests stoppable without wazero's
// close-on-context-done checks, which cost 4–9× on a C sampler loop
// (shared/research/wasm-toolchain.md §5). Instrument rewrites a module at
// load time: it appends an exported mutable i64 global (GlobalName) and, at
// every function entry and every loop header, decrements it and traps
// (unreachable) once it goes negative. The host sets the global before each
// call to a budget proportional to the work it asks for; a guest that loops
// forever runs out of fuel and traps within that budget, its instance is
// discarded, and the process's garbage collector is never stalled for
// longer than one budget.
//
// Invariants:
//   - The rewrite changes no existing index: the new global is appended
//     after the imported and defined ones, functions, types, tables and
//     memories are untouched, and only code bodies and the global and
//     export sections are re-encoded; every other section is copied byte
//     for byte, in order.
//   - Every instruction is decoded (MVP, sign extension, multi-value block
//     types, reference types, tail calls and the 0xFC prefix: saturating
//     truncation, bulk memory, tables). 0xFD (SIMD), 0xFE (threads) and
//     exception handling are refused with a *DecodeError rather than
//     guessed at, so an immediate byte is never mistaken for an opcode.
//   - A module that already defines or exports GlobalName is refused.
//   - The parser never panics on any input (FuzzInstrument).
package fuel
