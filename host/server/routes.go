package server

import (
	"net/http"

	"github.com/go-chi/chi/v5"
)

// extraRoutes mounts the routes clients of vLLM and llama.cpp's server
// expect beside the OpenAI API: /tokenize and /detokenize (behind the API
// key, like the inference routes) and /v1/embeddings (an inference route).
func (s *server) extraRoutes(r chi.Router) {
	r.Post("/tokenize", s.handleTokenize)
	r.Post("/detokenize", s.handleDetokenize)
	r.Post("/v1/embeddings", s.inference("/v1/embeddings", s.handleEmbeddings))
}

// decodeExtra decodes the body of the routes in this file: the one place
// they meet the server's body rules (decodeBody), a field the body type
// does not have included.
func (s *server) decodeExtra(w http.ResponseWriter, r *http.Request, dst any) error {
	return s.decodeBody(w, r, dst, bodyFields(dst))
}
