// Package cpu is kvhost's embedded default device: host memory presented the
// way a GPU presents its memory, and kernels from kernels/cpu.
//
// Memory is a capacity-bounded "driver": every Malloc is an anonymous mmap
// counted against the capacity at page granularity, so MemGetInfo is exact and
// an allocation beyond the capacity fails with a *device.OutOfMemoryError
// carrying the requested and free bytes, exactly as cuMemAlloc would. Virtual
// reservations cost nothing until ranges are mapped, at a 2 MiB granularity
// like CUDA's VMM, so the KV pool can be grown after capture with the same
// protocol on both devices.
//
// Device pointers are the real host addresses of the mappings, but the host
// never converts a pointer back to memory: Bytes looks the address up in the
// table of live mappings and returns a bounds-checked view, so a stale or
// out-of-range pointer is an error, not a wild write.
package cpu
