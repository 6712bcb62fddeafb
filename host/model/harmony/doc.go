// Package harmony reads what a model trained on OpenAI's harmony format
// (gpt-oss) generates, and splits it into what an OpenAI-style response
// reports: reasoning, content and function calls.
//
// A harmony turn is a run of messages, each a header and a body:
//
//	<|channel|>analysis<|message|>Need the weather.<|end|>
//	<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city":"Paris"}<|call|>
//
// The chat template ends the prompt with "<|start|>assistant", so the
// first message's header starts with its channel; later ones repeat
// "<|start|>" and the role. The header names the channel (analysis,
// commentary, final), optionally a recipient ("to=functions.NAME", before
// or after the channel: the model writes it after, gpt-oss's template
// before) and a content type ("<|constrain|>json", or a bare "json"). The
// body runs to <|end|> (the message ends, another may follow), <|call|>
// (a tool call: the turn ends) or <|return|> (the turn ends).
//
// Parser is fed the generated text with harmony's special tokens spelled
// out (Tokens: the server maps their ids to these texts) and returns, for
// each piece, a Delta:
//
//   - analysis → Reasoning; final (and a header naming no channel) →
//     Content; commentary without a recipient (a preamble, which harmony
//     shows the user) → Content; a
//     message with a recipient other than "assistant" → a Call when it ends
//     (Name without the "functions." namespace; Args the body, trimmed);
//     any other channel, and messages from a role other than assistant →
//     Reasoning (never shown as the answer, never lost).
//   - Done is set by <|return|>, <|call|>, and <|end|> closing a final
//     message; the parser ignores everything after it.
//
// # Invariants
//
//   - No special-token text ever appears in Reasoning, Content or Args; a
//     stray marker (a <|channel|> inside a body) is dropped.
//   - Text arrives in any split: a suffix that may begin a marker ("<|ch")
//     is held until the next Push or End decides it.
//   - Nothing the model wrote is lost: a message whose header never reaches
//     <|message|> (it hits a terminator, or grows past maxHeader bytes) is
//     read as a body of the channel it named (Content when it named none),
//     so a model that ignores the format still answers in Content. A call
//     cut off before it ended (End without <|call|>) is a Call if its body
//     is complete JSON, else its text is given back as Content.
//
// The format: https://cookbook.openai.com/articles/openai-harmony and the
// template at host/model/synth/gpt-oss.jinja.
package harmony
