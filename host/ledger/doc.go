// Package ledger accounts for every byte of device memory a kvhost process
// holds (ARCHITECTURE.md §3, spec §1).
//
// Startup is a sequence of phases (device init → weights → KV pools →
// workspaces → graph capture → post-capture KV growth → ready). Each phase is
// measured by the device's own free-memory reading (MemGetInfo) before and
// after, logged as "avail mem=… GiB, mem usage=… GiB" with GiB = 2^30 B,
// and recorded. Every holder of device memory is a named allocator: the
// caching allocator (one entry per pool, so each graph private pool is its
// own row), the KV arena, direct allocations such as weights, and "outside",
// what the device reports used that none of ours holds. Each allocator's
// device-level bytes are explained by the seven categories of alloc.Category
// plus two explicit remainders: "cached" (segments the caching allocator
// holds but has not handed out) and "rounding" (what the device or the
// allocator charges beyond the bytes asked for: 512 B block rounding, 4 KiB
// pages of the CPU device, 2 MiB VMM granules).
//
// Invariants (checked by Check and by the tests on the CPU device, to the
// byte):
//
//  1. Σ phase deltas + free after the last phase = free at start.
//  2. Σ allocator device bytes + outside = total − free, with outside ≥ 0;
//     on the CPU device nothing is outside, so outside = 0 exactly.
//  3. For every allocator, Σ categories + cached + rounding = device bytes.
//
// The ledger is safe for concurrent use; Snapshot is what GET /v1/memory
// serves.
package ledger
