package server

import (
	"fmt"
	"net/http"
)

// handleCompletions serves POST /v1/completions.
func (s *server) handleCompletions(w http.ResponseWriter, r *http.Request) {
	var req completionRequest
	if err := s.decodeBody(w, r, &req, completionFields); err != nil {
		s.writeError(w, r, err)
		return
	}
	p, prompts, err := s.prepareCompletion(&req)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.generate(w, r, p, prompts, s.newResponder(w, r, completionsEndpoint, p))
}

// prepareCompletion validates a completions request and tokenizes its
// prompts (text prompts get the tokenizer's special tokens, BOS included;
// token-id prompts are used as given).
func (s *server) prepareCompletion(req *completionRequest) (genParams, [][]int32, error) {
	if !req.Prompt.Set {
		return genParams{}, nil, badRequest("prompt", "prompt is required")
	}
	// max_tokens 0 with echo scores the prompt without generating (the
	// lm-eval-harness idiom).
	maxTokens, discard := req.MaxTokens, false
	if req.Echo && maxTokens != nil && *maxTokens == 0 {
		maxTokens, discard = nil, true
	}
	p, err := s.common(&req.samplingFields, maxTokens, "max_tokens", "")
	if err != nil {
		return p, nil, err
	}
	p.echo, p.discard = req.Echo, discard
	if req.Logprobs != nil {
		n := *req.Logprobs
		if n < 0 || n > maxCompletionLogprobs {
			return p, nil, badRequest("logprobs", "%d is out of range [0, %d]", n, maxCompletionLogprobs)
		}
		p.logprobs, p.topLogprobs = true, n
		if p.echo {
			p.promptLogprobs, p.promptTopLogprobs = true, n
		}
	}
	count := len(req.Prompt.Texts) + len(req.Prompt.Tokens)
	if count > s.opts.MaxPrompts {
		return p, nil, badRequest("prompt", "%d prompts in one request, at most %d are allowed", count, s.opts.MaxPrompts)
	}
	prompts := req.Prompt.Tokens
	if len(req.Prompt.Texts) > 0 {
		tok := s.b.Tokenizer()
		prompts = make([][]int32, len(req.Prompt.Texts))
		for i, text := range req.Prompt.Texts {
			ids, err := tok.Encode(text, true)
			if err != nil {
				return p, nil, fmt.Errorf("server: tokenize prompt %d: %w", i, err)
			}
			prompts[i] = ids
		}
	}
	return p, prompts, nil
}
