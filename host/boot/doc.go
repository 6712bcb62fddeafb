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
// The phases mean what they meant when the profile forwards ran: "graph
// capture (profile forward)" ends once the runtime peak is measured and the
// decode graphs are captured, its delta the graphs' private pool (the
// profile's activations are freed before it ends). On a device.Recorder
// (the CPU device) the profile forwards are captured and dropped unlaunched
// — the real forward's allocations, through the real allocator, with no
// kernel run — so the phase costs milliseconds; elsewhere they run. The
// decode graphs are captured inside the phase on every device (recording
// only, on the CPU device), so a request never meets a stack without them
// and plan's ledger equals serve's. The output-constraint runner loads on
// the first constrained request (constraint.NewOnDemand) and the KV
// configurator is unloaded once the pools are sized: neither holds device
// memory, so neither moves the ledger.
//
// Every byte the stack takes from the device is held by an allocator the
// ledger knows (weights, caching, kv_arena), so on the CPU device
// "outside" is zero and both ledger invariants hold exactly. Sizing is
// host/plan's arithmetic fed with measurements; a budget that cannot work
// fails Build with a *budget.InsufficientMemoryError naming the phase, the
// shortfall and the flag to change.
package boot
