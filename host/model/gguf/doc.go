// Package gguf reads and writes GGUF model files (versions 2 and 3), the
// container format of llama.cpp.
//
// A GGUF file is a little-endian header ("GGUF", version, tensor count, KV
// count), a list of typed key/value metadata pairs, a list of tensor infos
// (name, dims with ne0 first, GGML type, offset), padding to the alignment
// (general.alignment, default 32) and the tensor data section.
//
// Model files are untrusted input. The reader upholds these invariants:
//
//   - Every length, count and offset is checked against the bytes that remain
//     before anything is allocated, so a lying header can make the reader
//     allocate at most a small constant multiple of the file size. A KV or
//     tensor count larger than the rest of the file could hold is rejected
//     before the first entry is read.
//   - Arrays nest at most MaxArrayDepth levels.
//   - Tensor types must be known GGML types, dims at most 4, ne0 a multiple
//     of the type's block size, the element count and byte size must not
//     overflow, offsets must be multiples of the alignment, every tensor's
//     bytes must lie inside the file and no two tensors may overlap.
//   - general.alignment must be a non-zero power of two.
//   - Keys and tensor names are unique.
//   - Nothing panics on any input; every rejection is a *FormatError naming
//     the file, the field, the byte offset and the problem.
//
// Parse works on a byte slice; Open memory-maps a file and parses it. Tensor
// returns zero-copy views into the mapping, valid until Close. Metadata
// values are copied out of the mapping, so they outlive Close. A parsed File
// is immutable and safe for concurrent readers; Close must not race with them.
//
// TensorType.DType maps the GGML types the kernels run (F32, F16, BF16,
// Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K–Q6_K, IQ4_NL, IQ4_XS) to
// kernels/cpu.DType; Dequantize and Quantize delegate to the kernels'
// decoders and llama.cpp-style quantizers, the one place each layout is
// written down.
//
// Split models (llama.cpp's gguf-split format, split.go): shards named
// PREFIX-00001-of-0000N.gguf, each a valid GGUF holding some tensors and the
// keys split.no, split.count and split.tensors.count, the first also the
// model's metadata. OpenModel opens one from any shard's path as one File and
// upholds, naming the offending shard's number and path in a *SplitError:
//
//   - every shard the name calls for is present and parses (each under the
//     invariants above, against its own bytes);
//   - each shard's split.count is the named count and its split.no its
//     index; split.tensors.count, where present, is the total;
//   - tensor names are unique across shards;
//   - a file whose split.count is above 1 but whose name is not a shard's is
//     refused (its siblings cannot be found).
//
// Each tensor of a split model is a view of its own shard's mapping
// (TensorInfo.Shard), and TensorFile names that shard's open file and the
// offset, so a device that maps files serves it in place: a split model
// costs exactly the memory of the merged file. WriteSplit and SplitFile
// write shards, grouping tensors as llama-gguf-split --split-max-tensors /
// --split-max-size do.
//
// Write produces version 3 files in the layout llama.cpp and the Python gguf
// package write and read: KVs, tensor infos, padding, then each tensor's data
// at an aligned offset.
package gguf
