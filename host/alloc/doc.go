// Package alloc is kvhost's caching allocator: the one way memory for
// tensors is taken from a device.
//
// It follows PyTorch's CUDA caching allocator (spec §6) so that figures are
// comparable with SGLang's: requests round up to 512 B; requests up to 1 MiB
// come from a small pool carved from 2 MiB segments; larger ones from a large
// pool with 20 MiB segments below 10 MiB and 2 MiB-rounded segments above;
// best fit by (size, address); blocks split when the remainder is worth it
// (≥ 512 B small, > 1 MiB large) and merge with free neighbours on release.
// Freed blocks stay cached in their segment; EmptyCache returns fully free
// segments to the device. When the device refuses a new segment the
// allocator empties its cache and retries once before failing.
//
// Private pools hold graph-capture memory apart from the general cache: a
// pool's segments keep their high-water mark until the pool is released, and
// its blocks are never handed to ordinary allocations.
//
// Every allocation is tagged with a Category, so the ledger can explain the
// allocator's bytes by what they hold. Invariants (checked in tests):
// reserved = Σ segment sizes; allocated = Σ sizes of allocated blocks;
// within each segment the blocks tile it exactly.
package alloc
