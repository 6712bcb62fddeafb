// Package dry is a device that computes nothing: its memory is address
// space only and its kernels check shapes and return. `kvhost plan` runs
// host/model's own forward, its captured decode step and its weight loading
// over it to learn, to the byte, what the caching allocator will be asked
// for (spec §4's profile forward, ../../../../shared/spec/memory-budget.md),
// without weights in memory and without arithmetic — so a new architecture's
// activation peak is predicted by the code that serves it, never by a copy.
//
// Invariants: Malloc hands out descending, never-reused addresses as the
// CPU device's top-down mappings do (the caching allocator's choices depend
// on address order, so the replay takes the same ones); no method touches
// memory; every scratch figure (AttentionScratch, MambaScanScratch) is the
// Sizer's of the device the run stands for; every optional capability of
// host/device is implemented, so any architecture dry-runs.
package dry
