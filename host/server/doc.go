// Package server is kvhost's HTTP layer: an OpenAI-compatible API over one
// Backend (a model, its tokenizer and chat template, and the engine that
// generates). It owns request parsing and validation, chat rendering and
// tokenization, streaming (SSE), stop strings, logprob formatting and the one
// mapping from errors to HTTP statuses. It owns no model state: everything it
// knows about the model comes through the consumer-defined Backend and
// Tokenizer interfaces, which tests satisfy with fakes.
//
// Routes (chi v5); New returns a *Server, an http.Handler with Drain:
//
//	GET  /health               200 {"status":"ok"}; 503 while an optional HealthChecker fails or after Drain
//	GET  /ready                readiness: as /health (Gate answers 503 for both while the model loads)
//	GET  /v1/models[/{id}]     the one model, with vLLM's fields (max_model_len, root, permission)
//	POST /tokenize, /detokenize  vLLM's and llama.cpp's shapes (tokenize.go)
//	POST /v1/embeddings        pooled, normalized final hidden states (Embedder capability)
//	POST /v1/completions       prompt: string | [string] | [id] | [[id]] (a batch: n choices each)
//	POST /v1/chat/completions  messages rendered by Backend.Chat()
//	POST /generate             SGLang's native API (see native.go for the shape)
//	GET  /v1/memory, GET /metrics, /admin/..., GET /* (Web)   Options mount points
//	POST /admin/reset_prefix_cache, /admin/flush_cache  ResetPrefixCacheHandler (cache.go), mounted under Admin
//
// # Request rules
//
// Bodies are checked before they are unmarshalled: an object that repeats a
// key, or nesting deeper than 64, is a 400 naming the path. Every field is
// accounted for (fields.go): a field the route implements is parsed; an
// informational one (user, metadata, safety_identifier, prompt_cache_key;
// /generate's log_metrics) is accepted and changes nothing; a field of the
// OpenAI API, or one vLLM or SGLang adds, that kvhost does not implement
// yet (functions, audio, best_of, suffix, min_tokens,
// use_beam_search, guided_decoding_backend, structural_tag, ... —
// unsupportedFields is the one table, a row per field) is a 400 with code
// "unsupported_parameter" naming it, unless its value asks for nothing
// (null, or the API's default such as store false, best_of 1); any other
// field is a 400 with code "unknown_parameter" listing the known ones.
// stream_options and /generate's sampling_params are checked the same way.
// A known field of the wrong JSON type is a 400 whose param names it. n is
// 1..Options.MaxN; choice index = prompt index * n + choice. stop is a
// string or up to 4 non-empty strings (each at most 256 bytes, which
// bounds the per-token hold-back scan). max_tokens defaults to the context
// length minus the prompt length, clipped to Options.MaxTokensCap
// (/generate: max_new_tokens 128, clipped the same way). A prompt longer
// than Options.MaxPromptTokens is a 400 stating the limit. Extensions:
// ignore_eos, stop_token_ids, and sampler + sampler_params.
//
// Sampling fields are host/sampling's (sampling.Fields; the same names at
// the top level of the OpenAI routes and in /generate's sampling_params):
// temperature [0, 2] (default 1, 0 greedy), top_p [0, 1] (0 means greedy),
// top_k (0 or -1 disable it), min_p [0, 1], frequency_penalty and
// presence_penalty [-2, 2] over generated tokens, repetition_penalty
// [0.01, 10] over prompt and generated tokens, logit_bias (token id
// strings to [-100, 100], at most 300, ids in the vocabulary), seed.
// sampling.Fields.Request validates them (400 naming the field and range)
// and, when the request samples through a policy (sampling.UsesPolicy),
// Options.Sampler compiles them with the policy's parameters: a field the
// policy does not take is a 400 naming it, never dropped. A greedy request
// naming no policy is sampled on the host with penalties and bias applied.

// echo (completions) prefixes each choice with the prompt as the model saw
// it: the bytes of its tokens, BOS included. With logprobs the prompt tokens
// come first in the logprobs, the first with null logprob and top_logprobs
// (nothing predicts it), and text_offset counts from the start of the echoed
// text. max_tokens 0 with echo (and max_new_tokens 0 on /generate) scores
// the prompt without returning generated tokens: the engine is asked for
// one token, which is dropped, and usage reports 0 completion tokens.
//
// # Structured output and tool calls
//
// At most one structured-output field per request (structured.go):
// response_format (json_object, json_schema), guided_json, guided_regex,
// guided_grammar, guided_choice, structured_outputs, and SGLang's
// json_schema, regex, ebnf (also in /generate's sampling_params). Each is
// compiled by host/constraint/compile into the engine request's
// constraint; a schema or grammar that cannot be enforced is a 400 whose
// param is the field and whose message names the keyword and where it is.
//
// Chat tools (tools.go): tools are validated (function type, names) and
// rendered by the model's template; tool_choice none drops them, auto
// reads calls out of the reply, required and a named function constrain
// the reply to calls (a grammar over the functions' parameter schemas)
// after appending the format's opening marker to the prompt. auto with a
// structured-output field allows either a reply of that shape or calls.
// The reply is read by toolparse.go in the template's format: content
// streams while text that could open a call is held back; each completed
// call goes out as OpenAI streams one (a delta with id, type and name,
// then one with the arguments); finish_reason is tool_calls (stop for a
// named function). Messages may carry assistant tool_calls (arguments as
// a JSON string or object) and tool results (tool_call_id required).
//
// Harmony (gpt-oss, chat.ToolsHarmony) is one more format through the same
// seam: every chat request to such a model gets a reader (a plan with mode
// none when it has no tools), choiceState spells out harmony's non-EOG
// control tokens for it, and host/model/harmony splits the reply into
// reasoning_content, content and calls; a choice whose turn ends (<|end|>
// after a final message) is finished there as at a stop string (the
// choiceEnder sink capability). reasoning.go: reasoning_effort for templates
// that read it; separate_reasoning and stream_reasoning for harmony models.
// A forced harmony call (a named function, or required with one tool) puts
// the call's header in the prompt and constrains the arguments with the
// function's schema; the reader starts inside that call.
//
// # Access
//
// Options.APIKeys, when set, guards every route with bearer tokens (401 in
// the OpenAI error shape; sha256 digests compared in constant time; never
// logged) except: /health and /ready (probes), GET of the dashboard's
// static shell (web.IsStatic: / and the embedded files under /ui/, which
// hold no host data; its JSON under /ui/api/ needs the key), /admin (its
// own admin key) and CORS preflights. The check is deny-by-default
// middleware, so a route added later needs the key unless isOpen lists it;
// /metrics needs it too (Prometheus sends it with authorization in its
// scrape config) unless Options.PublicMetrics opens it for scrapers that
// send none (the inference extension's endpoint picker). After Server.Drain new inference requests get 503
// "draining" with the reason, while running ones (streams included)
// finish. NewHTTPServer sets read/header/idle timeouts and no
// WriteTimeout: each write gets its own deadline
// (Options.StreamWriteTimeout), so long streams live while clients that
// stop reading are dropped.
//
// # Generation invariants
//
//   - Text is produced by an incremental detokenizer over Tokenizer.TokenBytes
//     that never emits broken UTF-8: bytes of an incomplete character are held
//     back until a later token completes it (impossible sequences become
//     U+FFFD at once, so at most 3 bytes wait). End-of-generation tokens
//     contribute no text.
//   - Stop strings end a choice as soon as its text contains one; the stop
//     string and everything after it are trimmed, any suffix that could begin
//     a stop string is held back while streaming so it is never sent, and
//     finish_reason is "stop". The choice's later events are ignored; its
//     engine request (one context for all n choices) is cancelled once every
//     choice has finished.
//   - With n > 1 events are routed by Event.Choice; an event for a choice the
//     request lacks, or a stream that closes with a choice unfinished, is an
//     internal error. An Err event of any choice ends the whole response.
//   - Every engine request's context derives from the HTTP request's: a client
//     that disconnects cancels generation (and frees its KV pages).
//   - Logprobs are reported for exactly the tokens whose text starts inside
//     the returned text (not for end-of-generation tokens, nor tokens wholly
//     inside a trimmed stop string). Streaming attaches them to the chunk that
//     carries their text. -Inf/NaN become -9999 (JSON has no infinities).
//     Completions text_offset counts bytes of the generated text.
//   - usage counts prompt tokens as submitted (once per prompt, whatever n)
//     and every token the engine generated for every choice, including one
//     that completed a stop string.
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
// Options.Observer receives request start/end, time to first token,
// inter-token gaps and errors by kind (the ErrKind constants) for metrics.
//
// Every request gets an id (X-Request-Id from the client when usable, else
// generated), echoed in the response header and carried by every log line
// of the request. Requests are logged with slog (method, path, status,
// duration, bytes; a 4xx at warn and a 5xx at error, with the reason the
// client got); no header or query string is ever logged, so Authorization
// never is. CORS is off unless Options.AllowedOrigins names origins.
//
// Before the model is loaded the listener serves a Gate: every route answers
// 503 "loading" with the startup phase, so the port is bound (and a busy one
// fails) in the first second.
package server
