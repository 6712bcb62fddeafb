// Package chat turns an OpenAI-style list of chat messages into the single
// prompt string a model was trained on, by rendering the model's own Jinja
// chat template (the "chat_template" of a Hugging Face tokenizer_config.json
// or the "tokenizer.chat_template" key of a GGUF file).
//
// Templates are compiled once by New with github.com/ardanlabs/jinja and then
// rendered concurrently; a *Template is immutable after New.
//
// Render exposes the variables Hugging Face's apply_chat_template passes:
// messages (a list of {role, content} mappings), bos_token, eos_token and
// add_generation_prompt. The globals raise_exception(msg) and
// strftime_now(fmt) are built into the jinja library, so templates that
// validate role order (Llama 2, Mistral) or stamp today's date (Llama 3.1+)
// work unchanged. A template that calls raise_exception, or fails in any other
// way while rendering, yields a *RenderError: the messages did not fit the
// template, which a server reports as a client error (400). A template that
// does not compile is refused by New with a *CompileError, at model load time.
//
// # Tools
//
// RenderWith binds Options.Tools (OpenAI tool objects, key order kept) to
// the template's tools variable and gives messages their tool_calls (id,
// type, function {name, arguments as a mapping}), tool_call_id and name,
// each only when set, as transformers does. ToolFormat reads the template
// to tell how the model writes calls: Hermes/Qwen <tool_call> blocks,
// Llama 3 JSON objects with "parameters", Mistral [TOOL_CALLS] lists,
// harmony (gpt-oss: the whole output is channelled messages, read by
// host/model/harmony). A
// template that does not render tools (ToolsGeneric: base models, the
// fallback) gets them in a system message that asks for Hermes-style
// calls, with earlier calls and tool results written the same way.
//
// # Reasoning
//
// A message's Reasoning (what a client sends back as reasoning_content)
// is bound to the message's thinking (gpt-oss) and reasoning_content
// (Qwen 3, DeepSeek); templates that read neither drop it, as
// transformers does. Options.ReasoningEffort is bound to reasoning_effort
// only for a template that reads it (TakesReasoningEffort) and only as
// one of ReasoningEfforts; anything else is a *RenderError.
//
// # Fallback
//
// A model without a template (base models such as the tiny stories260K) gets
// FallbackTemplate: a plain transcript, one "role: content" line per message,
// ending with "assistant:" when a generation prompt is asked for:
//
//	system: Be brief.
//	user: Hi
//	assistant:
//
// Why this shape: it uses no special tokens, so it tokenizes the same with any
// vocabulary; a base model continues a transcript of this kind naturally
// (it is the prevalent "dialogue" layout in web text); and a human reading a
// log sees exactly what the model saw. The transcript ends with "assistant:"
// and no trailing space because SentencePiece and BPE vocabularies attach the
// leading space to the next word ("▁Hello", "ĠHello"): a trailing space would
// force an unnatural space-only token. The BOS token is not written by the
// fallback; the server asks the tokenizer to add it (the rendered text does not
// start with the BOS text).
//
// # Invariants
//
//   - Render never panics: a panic inside the jinja library is recovered and
//     returned as a *RenderError with Panicked set (tests treat that as a bug).
//   - Render never mutates the caller's messages.
package chat
