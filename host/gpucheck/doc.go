//go:build cuda

// Package gpucheck is `kvhost gpu-check`'s verification of the CUDA device
// on a real GPU: every kernel against kernels/cpu on random inputs
// (kernels.go; attention.go for every KV cache encoding, byte for byte, and
// the attention options and shapes; the Mamba-2 kernels in mamba.go), greedy decoding on the CPU and CUDA devices token for token,
// decode-graph replay against the eager step, decode and prefill throughput
// (model.go), and serve's startup ledger on the GPU beside `kvhost plan`'s
// figure for the matching preset (boot.go).
//
// It sits above the device: it drives host/device/cuda through the
// device.Device and device.Kernels interfaces and a few accessors
// (Facts, NVML, Run, Sync, NewestGraph, CublasMinM), and it may import boot,
// plan, model, kv and ledger, which the device package never does
// (../shared/design/ARCHITECTURE.md §2: lower layers never import higher
// ones). Every function records its own failure in its result and returns,
// so one broken kernel or section does not hide the rest of the report.
//
// Built only with the cuda tag, like the device it checks; `make
// check-cuda` compiles and vets it on machines without a GPU.
package gpucheck
