package synth

import _ "embed"

// GptOSSTemplate is gpt-oss's chat template (harmony: system, developer
// and channelled assistant messages, tools as a TypeScript namespace),
// which generated gpt-oss models carry as tokenizer.chat_template. Source:
// the chat_template of openai/gpt-oss-20b (Apache-2.0), as vendored in
// github.com/ardanlabs/jinja v1.8.0 testdata/templates/gpt-oss-20b-Q8_0.jinja
// (the template of the Q8_0 GGUF); unchanged.
//
//go:embed gpt-oss.jinja
var GptOSSTemplate string

// HarmonyTokens are harmony's special tokens, control tokens at the end
// of a generated gpt-oss vocabulary (after the tokenizer's own pieces) so
// the template's prompts tokenize as gpt-oss's do and a server can read
// the channels of what the model writes.
var HarmonyTokens = []string{"<|start|>", "<|end|>", "<|message|>", "<|channel|>", "<|constrain|>", "<|return|>", "<|call|>"}

// archTokens are the control tokens s's architecture appends to the
// vocabulary, and its chat template ("" keeps the tokenizer's).
func archTokens(s Spec) ([]string, string) {
	if s.Arch == "gpt-oss" {
		return HarmonyTokens, GptOSSTemplate
	}
	return nil, ""
}
