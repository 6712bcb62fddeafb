package server

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/kvhost/kvhost/host/model/chat"
)

// tokenizeRequest is POST /tokenize in vLLM's two forms (a "prompt", or
// chat "messages" rendered with the model's template) and llama.cpp's
// ("content", "add_special", "with_pieces"). Exactly one of prompt,
// messages and content is required.
type tokenizeRequest struct {
	Model               string        `json:"model"`
	Prompt              *string       `json:"prompt"`
	Messages            []chatMessage `json:"messages"`
	AddGenerationPrompt *bool         `json:"add_generation_prompt"`
	AddSpecialTokens    *bool         `json:"add_special_tokens"`
	ReturnTokenStrs     bool          `json:"return_token_strs"`
	// llama.cpp's form
	Content    *string `json:"content"`
	AddSpecial *bool   `json:"add_special"`
	WithPieces bool    `json:"with_pieces"`
}

// tokenizeResponse is vLLM's shape: count, max_model_len, tokens and
// token_strs (null unless asked).
type tokenizeResponse struct {
	Count       int       `json:"count"`
	MaxModelLen int       `json:"max_model_len"`
	Tokens      []int32   `json:"tokens"`
	TokenStrs   *[]string `json:"token_strs"`
}

// piece is llama.cpp's with_pieces entry.
type piece struct {
	ID    int32  `json:"id"`
	Piece string `json:"piece"`
}

// handleTokenize serves POST /tokenize.
func (s *server) handleTokenize(w http.ResponseWriter, r *http.Request) {
	var req tokenizeRequest
	if err := s.decodeExtra(w, r, &req); err != nil {
		s.writeError(w, r, err)
		return
	}
	forms := 0
	for _, set := range []bool{req.Prompt != nil, req.Messages != nil, req.Content != nil} {
		if set {
			forms++
		}
	}
	if forms != 1 {
		s.writeError(w, r, badRequest("prompt", "give exactly one of prompt (text), messages (chat, rendered with the model's template) or content (llama.cpp's form); got %d", forms))
		return
	}
	tok := s.b.Tokenizer()
	var (
		ids []int32
		err error
	)
	switch {
	case req.Content != nil:
		// llama.cpp: add_special defaults to false; the answer is
		// {"tokens": [...]} of ids, or of {id, piece} with with_pieces.
		ids, err = tok.Encode(*req.Content, req.AddSpecial != nil && *req.AddSpecial)
		if err != nil {
			s.writeError(w, r, fmt.Errorf("server: tokenize: %w", err))
			return
		}
		if !req.WithPieces {
			writeJSON(w, http.StatusOK, map[string]any{"tokens": nonNil(ids)})
			return
		}
		ps := make([]piece, len(ids))
		for i, id := range ids {
			ps[i] = piece{ID: id, Piece: string(tok.TokenBytes(id))}
		}
		writeJSON(w, http.StatusOK, map[string]any{"tokens": ps})
		return
	case req.Prompt != nil:
		ids, err = tok.Encode(*req.Prompt, req.AddSpecialTokens == nil || *req.AddSpecialTokens)
	default:
		ids, err = s.tokenizeChat(req)
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	resp := tokenizeResponse{Count: len(ids), MaxModelLen: s.b.ContextLen(), Tokens: nonNil(ids)}
	if req.ReturnTokenStrs {
		strs := make([]string, len(ids))
		for i, id := range ids {
			strs[i] = tok.TokenText(id)
		}
		resp.TokenStrs = &strs
	}
	writeJSON(w, http.StatusOK, resp)
}

// tokenizeChat renders messages as /v1/chat/completions does (with the
// generation prompt unless add_generation_prompt is false) and tokenizes the
// text the same way, so the count is what a chat request would send.
func (s *server) tokenizeChat(req tokenizeRequest) ([]int32, error) {
	return s.chatPrompt(req.Messages, req.AddGenerationPrompt == nil || *req.AddGenerationPrompt, req.AddSpecialTokens, chat.Options{}, "")
}

// chatPrompt renders messages with the model's chat template and tokenizes
// the result: the one way chat turns into tokens (chat completions and
// /tokenize). The template usually writes the BOS text itself; then the
// tokenizer must not add a second BOS, so special tokens are added only
// when the rendered text does not already start with the BOS text, unless
// addSpecial says otherwise.
func (s *server) chatPrompt(messages []chatMessage, addGeneration bool, addSpecial *bool, opts chat.Options, suffix string) ([]int32, error) {
	if len(messages) == 0 {
		return nil, badRequest("messages", "messages must contain at least one message")
	}
	msgs := make([]chat.Message, len(messages))
	for i := range messages {
		m := &messages[i]
		if m.Role == "" {
			return nil, badRequest(fmt.Sprintf("messages[%d].role", i), "role is required")
		}
		cm, err := chatToolMessage(i, m)
		if err != nil {
			return nil, err
		}
		msgs[i] = cm
	}
	tmpl := s.b.Chat()
	opts.AddGenerationPrompt = addGeneration
	text, err := tmpl.RenderWith(msgs, opts)
	if err != nil {
		return nil, err
	}
	// suffix is text the reply must start with (a forced tool-call
	// opener): it belongs to the prompt.
	text += suffix
	special := tmpl.BOS() == "" || !strings.HasPrefix(text, tmpl.BOS())
	if addSpecial != nil {
		special = *addSpecial
	}
	ids, err := s.b.Tokenizer().Encode(text, special)
	if err != nil {
		return nil, fmt.Errorf("server: tokenize rendered chat: %w", err)
	}
	return ids, nil
}

// detokenizeRequest is POST /detokenize (vLLM's and llama.cpp's: tokens).
type detokenizeRequest struct {
	Model  string   `json:"model"`
	Tokens *[]int64 `json:"tokens"`
}

// handleDetokenize serves POST /detokenize: the text of the tokens, as
// vLLM's "prompt" and llama.cpp's "content" (the same string).
func (s *server) handleDetokenize(w http.ResponseWriter, r *http.Request) {
	var req detokenizeRequest
	if err := s.decodeExtra(w, r, &req); err != nil {
		s.writeError(w, r, err)
		return
	}
	if req.Tokens == nil {
		s.writeError(w, r, badRequest("tokens", "tokens is required: an array of token ids"))
		return
	}
	tok := s.b.Tokenizer()
	vocab := -1
	if v, ok := tok.(interface{ VocabSize() int }); ok {
		vocab = v.VocabSize()
	}
	ids := make([]int32, len(*req.Tokens))
	for i, t := range *req.Tokens {
		if t < 0 || (vocab >= 0 && t >= int64(vocab)) || t > 1<<31-1 {
			if vocab >= 0 {
				s.writeError(w, r, badRequest("tokens", "token %d (id %d) is outside the vocabulary [0, %d)", i, t, vocab))
			} else {
				s.writeError(w, r, badRequest("tokens", "token %d (id %d) is not a valid token id", i, t))
			}
			return
		}
		ids[i] = int32(t)
	}
	text, err := tok.Decode(ids)
	if err != nil {
		s.writeError(w, r, badRequest("tokens", "%v", err))
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"prompt": text, "content": text})
}

func nonNil(ids []int32) []int32 {
	if ids == nil {
		return []int32{}
	}
	return ids
}
