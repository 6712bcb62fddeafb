// Package boot assembles a serving stack in the order the memory ledger
// records it: device init, weights, KV pools (address-space reservation and
// a mapped prefix), workspaces, graph capture (on the CPU device the profile
// forward), post-capture KV growth, ready. It is the one place that knows
// how the parts fit together; host/cmd only turns flags into a Config.
//
// The KV pools are the configurator plugin's declaration (host/plan's
// ConfigureKV, verified by host/kv against the model's layers), in the KV
// encoding of --kv-cache-dtype: the arena reserves and maps every declared
// buffer of every pool on its own, and nothing here computes a cell size.
//
// Every byte the stack takes from the device is held by an allocator the
// ledger knows (weights, caching, kv_arena), so on the CPU device
// "outside" is zero and both ledger invariants hold exactly. Sizing is
// host/plan's arithmetic fed with measurements; a budget that cannot work
// fails Build with a *budget.InsufficientMemoryError naming the phase, the
// shortfall and the flag to change.
package boot
