package server

import (
	"net/http"

	"github.com/kvhost/kvhost/host/model/chat"
)

// handleChatCompletions serves POST /v1/chat/completions.
func (s *server) handleChatCompletions(w http.ResponseWriter, r *http.Request) {
	var req chatRequest
	if err := s.decodeBody(w, r, &req, chatFields); err != nil {
		s.writeError(w, r, err)
		return
	}
	p, prompt, err := s.prepareChat(&req)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.generate(w, r, p, [][]int32{prompt}, s.newResponder(w, r, chatEndpoint, p))
}

// prepareChat validates a chat request, renders its messages with the
// model's template (with the generation prompt) and tokenizes the result
// (chatPrompt).
func (s *server) prepareChat(req *chatRequest) (genParams, []int32, error) {
	if len(req.Messages) == 0 {
		return genParams{}, nil, badRequest("messages", "messages must contain at least one message")
	}
	maxTokens, name := req.MaxCompletionTokens, "max_completion_tokens"
	if maxTokens == nil {
		maxTokens, name = req.MaxTokens, "max_tokens"
	}
	p, err := s.common(&req.samplingFields, maxTokens, name, "")
	if err != nil {
		return p, nil, err
	}
	p.promptParam = "messages"
	wantLP := req.Logprobs != nil && *req.Logprobs
	if req.TopLogprobs != nil {
		n := *req.TopLogprobs
		if n < 0 || n > maxTopLogprobs {
			return p, nil, badRequest("top_logprobs", "%d is out of range [0, %d]", n, maxTopLogprobs)
		}
		if n > 0 && !wantLP {
			return p, nil, badRequest("top_logprobs", "top_logprobs requires logprobs to be true")
		}
		p.topLogprobs = n
	}
	p.logprobs = wantLP

	plan, render, tools, err := s.planTools(&req.toolFields)
	if err != nil {
		return p, nil, err
	}
	suffix := ""
	if plan != nil && plan.mode != "none" {
		spec, err := plan.toolConstraint(tools, p.structured)
		if err != nil {
			return p, nil, err
		}
		if spec != nil {
			p.constraint = spec
		}
		if plan.forced {
			suffix = plan.prefix
		}
	}
	p.tools = plan
	effort, err := s.planReasoning(&req.reasoningFields, plan)
	if err != nil {
		return p, nil, err
	}
	ids, err := s.chatPrompt(req.Messages, true, nil, chat.Options{Tools: render, ReasoningEffort: effort}, suffix)
	return p, ids, err
}
