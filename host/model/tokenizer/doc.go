// Package tokenizer turns text into token ids and back for the model
// families kvhost serves, without depending on any model-file package: the
// GGUF and Hugging Face loaders pass plain slices (or raw tokenizer.json
// bytes) to the constructors.
//
// Two algorithms sit behind the Tokenizer interface:
//
//   - SentencePiece (GGUF tokenizer.ggml.model = "llama"), encoding exactly as
//     llama.cpp's llm_tokenizer_spm: spaces become U+2581, one is prepended
//     (AddSpacePrefix), the text is split into UTF-8 characters and the
//     adjacent pair whose concatenation is a token with the highest score is
//     merged repeatedly (leftmost on ties) through a priority queue, so
//     encoding is O(n log n). Characters left outside the vocabulary fall back
//     to <0xXX> byte tokens, or UNK when a byte token is missing.
//   - Byte-level BPE (GGUF "gpt2" with merges, HF tokenizer.json "BPE"): the
//     text is split by the GPT-2, Llama-3 or Qwen2 pre-tokenizer regex,
//     implemented by hand because Go's regexp lacks the lookahead they use;
//     each piece's bytes are mapped to GPT-2's printable alphabet and merged
//     lowest rank first (leftmost on ties) through a per-piece heap.
//
// Invariants:
//
//   - Tokenizers are immutable after construction and safe for concurrent use.
//   - Special-token text in input is ordinary text unless
//     EncodeOptions.ParseSpecial is set, so user input cannot forge control
//     tokens; chat templates are encoded with ParseSpecial.
//   - Decode is the concatenation of TokenBytes, except that a SentencePiece
//     tokenizer with AddSpacePrefix drops one leading ' ' from the first token
//     that produces any bytes. Control tokens produce no bytes. Decode does
//     not repair invalid UTF-8 (a lone byte token decodes to that raw byte).
//   - StreamDecoder applies the same rule, so its outputs concatenate to
//     Decode of the same ids; it holds back only incomplete UTF-8 sequences.
//   - For valid UTF-8 s without U+2581, Decode(Encode(s)) == s for both
//     tokenizers when every byte has a token. SentencePiece cannot round-trip
//     U+2581 (it is its space marker); with ParseSpecial, the space llama.cpp
//     prepends to text after a special token survives decoding.
package tokenizer
