package server

import (
	"github.com/go-chi/chi/v5"
)

// extraRoutes mounts the routes clients of vLLM and llama.cpp's server
// expect beside the OpenAI API: /tokenize and /detokenize (behind the API
// key, like the inference routes) and /v1/embeddings (an inference route).
func (s *server) extraRoutes(r chi.Router) {
	r.With(s.authorize).Post("/tokenize", s.handleTokenize)
	r.With(s.authorize).Post("/detokenize", s.handleDetokenize)
	r.Post("/v1/embeddings", s.inference("/v1/embeddings", s.handleEmbeddings))
}
