package server

import (
	"fmt"
	"net/http"

	"github.com/go-chi/chi/v5"
)

// modelCard is a model as /v1/models lists it: OpenAI's fields plus the
// ones vLLM adds (root, parent, max_model_len, permission).
type modelCard struct {
	ID          string            `json:"id"`
	Object      string            `json:"object"`
	Created     int64             `json:"created"`
	OwnedBy     string            `json:"owned_by"`
	Root        string            `json:"root"`
	Parent      *string           `json:"parent"`
	MaxModelLen int               `json:"max_model_len"`
	Permission  []modelPermission `json:"permission"`
}

// modelPermission is vLLM's permission entry (all of it informational).
type modelPermission struct {
	ID                 string  `json:"id"`
	Object             string  `json:"object"`
	Created            int64   `json:"created"`
	AllowCreateEngine  bool    `json:"allow_create_engine"`
	AllowSampling      bool    `json:"allow_sampling"`
	AllowLogprobs      bool    `json:"allow_logprobs"`
	AllowSearchIndices bool    `json:"allow_search_indices"`
	AllowView          bool    `json:"allow_view"`
	AllowFineTuning    bool    `json:"allow_fine_tuning"`
	Organization       string  `json:"organization"`
	Group              *string `json:"group"`
	IsBlocking         bool    `json:"is_blocking"`
}

type modelList struct {
	Object string      `json:"object"`
	Data   []modelCard `json:"data"`
}

func (s *server) card() modelCard {
	name := s.b.ModelName()
	return modelCard{
		ID: name, Object: "model", Created: s.created, OwnedBy: "kvhost", Root: name,
		MaxModelLen: s.b.ContextLen(),
		Permission: []modelPermission{{
			ID: "modelperm-" + name, Object: "model_permission", Created: s.created,
			AllowSampling: true, AllowLogprobs: true, AllowView: true, Organization: "*",
		}},
	}
}

// handleModels serves GET /v1/models: the one served model.
func (s *server) handleModels(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, modelList{Object: "list", Data: []modelCard{s.card()}})
}

// handleModel serves GET /v1/models/{id} (the OpenAI client's
// models.retrieve): the model's card, or 404 naming the one served. Ids
// with a slash ("org/name") arrive whole through the wildcard.
func (s *server) handleModel(w http.ResponseWriter, r *http.Request) {
	id := chi.URLParam(r, "*")
	if id != s.b.ModelName() {
		writeAPIError(w, http.StatusNotFound, apiError{
			Message: fmt.Sprintf("the model %q does not exist; this server serves %q", id, s.b.ModelName()),
			Type:    "invalid_request_error", Param: "model", Code: "model_not_found",
		})
		return
	}
	writeJSON(w, http.StatusOK, s.card())
}
