// Package layout holds the KV-pool arithmetic of the built-in configurator
// plugins (mha, mla, swa, mamba, fp4). It is an ordinary Go package: the
// plugins in ../<kind> are thin wasip1 main packages around it, and the same
// code is table-tested natively here and through wasm in host/plugin.
//
// Every number follows ../../shared/spec/memory-budget.md §3 (cell sizes,
// token sizing, SWA ratio, Mamba state) and is checked against the §7
// vectors. The package does not import the host's budget package on
// purpose: a plugin must reproduce the spec on its own.
//
// Invariants:
//   - Configure and Size are pure functions of their inputs.
//   - Each pool's buffers add up exactly to its bytes_per_unit, so the cell
//     size the spec quotes is the sum of what is declared, never a separate
//     number that could drift from the buffers.
//   - Token counts are floored to a multiple of the page size; Size never
//     returns units whose bytes exceed the available bytes or a cap.
package layout
