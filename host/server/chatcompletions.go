package server

import (
	"fmt"
	"net/http"
	"strings"

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
// model's template (with the generation prompt) and tokenizes the result.
// The template usually writes the BOS text itself; then the tokenizer must
// not add a second BOS, so special tokens are added only when the rendered
// text does not already start with the BOS text.
func (s *server) prepareChat(req *chatRequest) (genParams, []int32, error) {
	if len(req.Messages) == 0 {
		return genParams{}, nil, badRequest("messages", "messages must contain at least one message")
	}
	msgs := make([]chat.Message, len(req.Messages))
	for i, m := range req.Messages {
		if m.Role == "" {
			return genParams{}, nil, badRequest(fmt.Sprintf("messages[%d].role", i), "role is required")
		}
		msgs[i] = chat.Message{Role: m.Role, Content: m.Content.Text}
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

	tmpl := s.b.Chat()
	text, err := tmpl.Render(msgs, true)
	if err != nil {
		return p, nil, err
	}
	addSpecial := tmpl.BOS() == "" || !strings.HasPrefix(text, tmpl.BOS())
	ids, err := s.b.Tokenizer().Encode(text, addSpecial)
	if err != nil {
		return p, nil, fmt.Errorf("server: tokenize rendered chat: %w", err)
	}
	return p, ids, nil
}
