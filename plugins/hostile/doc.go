// Package hostile holds misbehaving plugins that host/plugin's tests load to
// prove each failure is refused or stopped with a clear error while the host
// keeps working:
//
//   - loop: configure never returns (stopped by its fuel budget, or the
//     call deadline, whichever ends first)
//
//   - membomb: configure allocates until the memory limit (trap, OOM)
//
//   - panic: configure panics (trap)
//
//   - badabi: reports ABI version 99 (refused at the handshake)
//
//   - abi1: a configurator as ABI 1 built it (version 1, ABI 1's
//     declare_pool and declare_buffer signatures): refused by version
//
//   - noexport: the current ABI version but no describe/configure exports
//     (refused)
//
//   - liar: declares pools whose buffers do not add up, or sizes pools past
//     the available bytes, past the caps, or names undeclared pools — the
//     mode comes from the model config's "hostile_mode" key
//
//   - constraint: an output-constraint plugin that runs the grammar engine
//     except for specs whose type names a misbehaviour (a step that loops
//     or allocates without end, an open that panics, a mask that allows
//     nothing, only ids past the vocabulary, or only the end too early)
//
// Each is a wasip1 main package built by scripts/build-plugins.sh into
// host/plugin/testdata/wasm/hostile-<name>.wasm (the constraint one into
// host/constraint/testdata/wasm/hostile-constraint.wasm); none ships in
// the binary. The shapes no Go toolchain emits (an invalid module that
// writes a global it never declared, bulk memory and table stall loops, a
// table growth bomb, millions of empty functions) are assembled byte by
// byte in host/plugin/wasmtest.
package hostile
