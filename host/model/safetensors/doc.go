// Package safetensors reads safetensors files, single or sharded through a
// model.safetensors.index.json, and writes small ones.
//
// A safetensors file is an 8-byte little-endian header length N, N bytes of
// JSON mapping tensor names to {dtype, shape, data_offsets: [begin, end]}
// (plus an optional "__metadata__" object of string values), then the data
// region; offsets are relative to the data region's start.
//
// Files are untrusted input. Parse guarantees, before returning a File:
//
//   - the header length is at most MaxHeaderSize and fits in the file, and
//     the header is one JSON object with unique keys;
//   - every dtype is known, shapes do not overflow, end-begin equals
//     numel×element size, begin <= end <= data region length;
//   - no two tensors overlap (gaps are tolerated);
//   - failures are *FormatError values naming the file, the field (usually
//     the tensor) and the byte offset; nothing panics.
//
// Allocation is bounded by the header size. Open memory-maps the file;
// Tensor returns zero-copy views valid until Close. A Set opens each shard
// of a sharded checkpoint once and resolves tensor names across them;
// shard names from an index must be plain file names in the same directory.
package safetensors
