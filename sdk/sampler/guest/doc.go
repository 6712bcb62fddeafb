// Package guest is the Go library for writing a sampling policy as a
// wasip1 reactor (GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared).
// A plugin calls Register from init with its descriptor and a per-row
// function; the package provides the four exports of sampler ABI 1
// (../../SAMPLER_ABI.md) and allocates the I/O region once, in
// kvhost_sampler_init, as Go slices kept alive for the instance's life (Go's
// collector does not move them).
//
// Go guests are 5–7× slower than native on sampler loops
// (shared/research/wasm-toolchain.md §5); write hot policies in C with
// ../c/kvhost_sampler.h. Go guests import WASI for the Go runtime, which
// the host provides with deterministic clocks and randomness.
package guest
