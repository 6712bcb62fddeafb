// Package cuda holds the kvhost CUDA kernels: the .cu sources, the PTX that
// nvcc 11.8 generates from them for compute_80 and compute_90, and a fatbin
// per source with sm_80 and sm_90 cubins plus compute_90 PTX, all committed
// beside the sources and embedded here.
//
// Why committed: the GPU machine has no toolchain and CI must not need a GPU,
// so the generated code is a reviewed artifact like any other source. Why
// embedded: the host loads each module from memory at startup (all functions
// fetched eagerly, before any graph capture) and needs no files on disk.
//
// Invariants: kernels.sum records the SHA-256 of every source with the nvcc
// release and flags that produced the artifacts; the tests here fail when a
// source changes without regenerating (scripts/build-kernels.sh), and
// `scripts/build-kernels.sh --check` rebuilds into a temporary directory and
// fails on any byte of drift. Every name in Kernels is an entry of the PTX
// of its module for both architectures. The package itself is pure Go and
// imports no driver: it only carries bytes.
package cuda
