// Package guest is the Go side of the plugin ABI (../ABI.md) for plugins
// built with GOOS=wasip1 GOARCH=wasm -buildmode=c-shared. A configurator
// author writes a type implementing Configurator and calls
// RegisterConfigurator from init(); this package supplies every export
// (//go:wasmexport) and binds the host imports (//go:wasmimport).
//
// The ABI-independent half — decoding the input, calling the
// implementation, forwarding declarations, keeping the last error — lives in
// Dispatcher, which compiles natively too, so a plugin's behaviour can be
// tested with go test against a Recorder before it is ever built to wasm.
//
// Invariants:
//   - The guest library does not recover panics: a panic traps the call, and
//     the host discards the instance (the host is the fault boundary).
//   - The library does not check that buffers add up to a pool's
//     bytes_per_unit or that units respect caps; the host checks both and
//     refuses a plugin that gets them wrong.
//   - Memory handed to the host (descriptor, last error, kvhost_malloc
//     blocks) stays reachable until replaced or freed, so the Go collector
//     never moves or frees what the host is about to read.
package guest
