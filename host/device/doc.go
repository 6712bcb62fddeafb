// Package device is the seam between kvhost and the hardware it owns.
//
// A Device is deliberately narrow: memory facts (MemGetInfo must be exact, as
// the ledger subtracts readings to the byte), driver-level allocation that
// fails like a GPU does (a typed *OutOfMemoryError carrying the requested and
// free bytes), virtual-memory reservation and mapping (so the KV pool can be
// grown after graph capture), and a kernel set the model's forward is written
// against. Everything above this package — the caching allocator, the ledger,
// the model — sees only these interfaces, so the CPU device (the embedded
// default) and the CUDA device (build tag cuda) are interchangeable.
//
// Invariant every implementation keeps: free + Σ(bytes currently allocated or
// mapped through this device) + outside = total, where "outside" is memory the
// device itself holds (a CUDA context; zero on the CPU device).
package device
