// Package hf reads a Hugging Face model directory: config.json, the
// safetensors weight files (single model.safetensors or sharded through
// model.safetensors.index.json) and the raw tokenizer files.
//
// It parses only what the host needs to pick an architecture and size
// buffers (the Llama-family fields of config.json); the raw config bytes are
// kept for consumers that need more. Tokenizer files are returned as raw
// bytes and parsed elsewhere; only the chat template is extracted from
// tokenizer_config.json (or chat_template.jinja).
//
// Directory contents are untrusted: every file read is size-capped, and
// shard names from the index must be plain file names in the directory.
// Open does not map weights; OpenWeights does, and the caller closes the
// returned set.
package hf
