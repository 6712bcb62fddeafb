// Package cuda is the NVIDIA GPU device of kvhost, compiled only with the
// build tag cuda (go build -tags cuda): gorgonia.org/cu calls cuInit in its
// package init and exits the process on a machine without a GPU, and linking
// it adds NEEDED libcuda.so.1, so the default binary must never import it.
//
// Files without the tag hold the driver-free logic, tested everywhere: the
// cuBLAS library search order (libsearch.go), the decode batch buckets and
// their padding table (buckets.go), kernel launch geometry (geometry.go), the
// pinned staging ring (ring.go) and the capture tape that proves a graph
// replay issues exactly the work that was captured (tape.go).
//
// Threading: every driver call runs on one goroutine locked to its OS thread
// with the device's primary context current (the device owner). Public
// methods hand closures to it; code already on the owner thread (inside
// Device.Run, as a model forward or a capture is) calls straight through.
// Stream capture uses THREAD_LOCAL mode on that thread.
//
// Integer side arrays (token ids, positions, page tables) and host floats are
// written into a pinned host ring and copied asynchronously on the device's
// stream into fixed device buffers before each launch, so a captured graph
// reads them from the same addresses at every replay; a replay re-runs the
// host code in stage-only mode (it fills the ring, launches nothing) and the
// tape checks that every launch argument matches the capture.
//
// GEMMs: a matvec kernel of ours for small M (decode) and for Q8_0 weights;
// cuBLAS (dlopened at run time, sonames .13, .12, .11, with a fixed
// workspace) for larger M in f32, f16 and bf16.
package cuda
