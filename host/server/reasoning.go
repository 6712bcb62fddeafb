package server

import (
	"slices"
	"strings"

	"github.com/kvhost/kvhost/host/model/chat"
)

// reasoningFields are the reasoning fields of a chat request: OpenAI's
// reasoning_effort and SGLang's separate_reasoning and stream_reasoning.
type reasoningFields struct {
	ReasoningEffort   *string `json:"reasoning_effort"`
	SeparateReasoning *bool   `json:"separate_reasoning"`
	StreamReasoning   *bool   `json:"stream_reasoning"`
}

// planReasoning validates the reasoning fields against the model and
// applies them to plan (the reader of a harmony model; nil for a model
// whose output is plain text). It returns the reasoning effort to render
// with ("" for the template's default).
//
//   - reasoning_effort: one of chat.ReasoningEfforts, for a template that
//     reads it (gpt-oss's); refused for any other.
//   - separate_reasoning (default true): false puts the reasoning in
//     content, ahead of the answer, as SGLang returns a reasoning model's
//     text unparsed (without harmony's markup).
//   - stream_reasoning (default true): false streams the reasoning as one
//     reasoning_content chunk when it ends (SGLang's meaning); a
//     non-streaming response is the same either way.
//
// Both SGLang fields are refused with false for a model whose output
// kvhost does not read for reasoning: nothing is separated there.
func (s *server) planReasoning(f *reasoningFields, plan *toolPlan) (string, error) {
	effort := ""
	if f.ReasoningEffort != nil {
		effort = *f.ReasoningEffort
		if !s.b.Chat().TakesReasoningEffort() {
			return "", badRequest("reasoning_effort", "this model's chat template has no reasoning effort; omit reasoning_effort")
		}
		if !slices.Contains(chat.ReasoningEfforts, effort) {
			return "", badRequest("reasoning_effort", "%q is not one of %s", effort, strings.Join(chat.ReasoningEfforts, ", "))
		}
	}
	harmony := plan != nil && plan.format == chat.ToolsHarmony
	for _, b := range []struct {
		name string
		v    *bool
	}{{"separate_reasoning", f.SeparateReasoning}, {"stream_reasoning", f.StreamReasoning}} {
		if b.v != nil && !*b.v && !harmony {
			return "", badRequest(b.name, "%s false applies to models whose reasoning kvhost reads (harmony: gpt-oss); this model's output is not split, omit it or send true", b.name)
		}
	}
	if harmony {
		plan.inlineReasoning = f.SeparateReasoning != nil && !*f.SeparateReasoning
		plan.holdReasoning = f.StreamReasoning != nil && !*f.StreamReasoning
	}
	return effort, nil
}
