// Package synth generates deterministic Llama-architecture GGUF models for
// demos, tests and benchmarks (`kvhost gen-model`).
//
// The files are ordinary GGUF v3 with the tensor names, metadata keys and
// 32-byte alignment llama.cpp writes, so other GGUF readers accept them. The
// weights are pseudo-random from a fixed seed, scaled like a trained model's
// (embeddings and projections ~ N(0, 1/fan_in), norms at 1) with attention
// sharpened enough that greedy output depends on the whole context, not just
// the last token. The tokenizer is a real SentencePiece-style vocabulary:
// control tokens, the 256 byte-fallback tokens, pieces learned by
// byte-pair merging an embedded English corpus, then letter n-grams so every
// word can be spelled with few tokens. gpt-oss models append harmony's
// special tokens to it and carry gpt-oss's own chat template
// (gpt-oss.jinja, source in harmony.go), so a server renders and reads
// harmony with them.
package synth
