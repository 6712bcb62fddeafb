// Package server is kvhost's HTTP layer: an OpenAI-compatible API over one
// Backend (a model, its tokenizer and chat template, and the engine that
// generates). It owns request parsing and validation, chat rendering and
// tokenization, streaming (SSE), stop strings, logprob formatting and the one
// mapping from errors to HTTP statuses. It owns no model state: everything it
// knows about the model comes through the consumer-defined Backend and
// Tokenizer interfaces, which tests satisfy with fakes.
//
// Routes (chi v5):
//
//	GET  /health               200 {"status":"ok"}; 503 while an optional HealthChecker fails
//	GET  /v1/models            the one model, with max_model_len
//	POST /v1/completions       prompt: string | [string] | [id] | [[id]] (a batch: one choice each)
//	POST /v1/chat/completions  messages rendered by Backend.Chat()
//
// # Request rules
//
// Unknown fields are ignored, as OpenAI does; a known field of the wrong JSON
// type is a 400 whose param names it. n must be 1. stop is a string or up to
// 4 non-empty strings (each at most 256 bytes, which bounds the per-token
// hold-back scan). Defaults: temperature 1, top_p 1 (top_p 0 means greedy),
// max_tokens = context length minus prompt length, clipped to
// Options.MaxTokensCap. Extensions: top_k (0 or -1 disable), min_p, ignore_eos.
// Accepted and unused: model (the response names the served model), user.
// echo is refused. presence/frequency penalties are ignored.
//
// # Generation invariants
//
//   - Text is produced by an incremental detokenizer over Tokenizer.TokenBytes
//     that never emits broken UTF-8: bytes of an incomplete character are held
//     back until a later token completes it (impossible sequences become
//     U+FFFD at once, so at most 3 bytes wait). End-of-generation tokens
//     contribute no text.
//   - Stop strings end generation as soon as the text contains one; the stop
//     string and everything after it are trimmed, any suffix that could begin
//     a stop string is held back while streaming so it is never sent, the
//     engine request is cancelled through its context, and finish_reason is
//     "stop".
//   - Every engine request's context derives from the HTTP request's: a client
//     that disconnects cancels generation (and frees its KV pages).
//   - Logprobs are reported for exactly the tokens whose text starts inside
//     the returned text (not for end-of-generation tokens, nor tokens wholly
//     inside a trimmed stop string). Streaming attaches them to the chunk that
//     carries their text. -Inf/NaN become -9999 (JSON has no infinities).
//     Completions text_offset counts bytes of the generated text.
//   - usage counts prompt tokens as submitted and every token the engine
//     generated, including one that completed a stop string.
//
// Streaming follows OpenAI: `data: {json}\n\n` chunks flushed one by one; chat
// starts with a delta {"role":"assistant","content":""}, then content deltas,
// then a chunk with an empty delta and finish_reason; with
// stream_options.include_usage every chunk carries "usage": null and a last
// chunk with empty choices carries the usage; `data: [DONE]` ends the stream.
// An error after streaming began is sent as a `data: {"error":...}` event
// before [DONE].
//
// # Errors
//
// errorResponse is the single mapping: bad JSON, wrong types, out-of-range
// values, *engine.InvalidRequestError and template rejections (a chat
// template's raise_exception) → 400 invalid_request_error; an oversized body
// → 413; engine.ErrQueueFull → 429; engine.ErrShuttingDown → 503; anything
// else → 500 with a generic message (the detail is logged, never sent). The
// body is always {"error":{"message","type","param","code"}}.
//
// Requests are logged with slog (method, path, status, duration, bytes); no
// header or query string is ever logged, so Authorization never is.
package server
