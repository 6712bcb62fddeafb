package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"slices"

	"github.com/kvhost/kvhost/host/sampling"
)

// defaultMaxNewTokens is /generate's default max_new_tokens (SGLang's),
// clipped to the context left and to MaxTokensCap.
const defaultMaxNewTokens = 128

// generateRequest is the body of POST /generate (SGLang's native API). Like
// the OpenAI routes it refuses fields it does not implement (fields.go): a
// native client that sends a knob this server does not implement must
// learn it was not applied.
type generateRequest struct {
	Text                 *string          `json:"text"`
	InputIDs             json.RawMessage  `json:"input_ids"`
	SamplingParams       *generateSampler `json:"sampling_params"`
	ReturnLogprob        bool             `json:"return_logprob"`
	LogprobStartLen      *int             `json:"logprob_start_len"`
	TopLogprobsNum       *int             `json:"top_logprobs_num"`
	ReturnTextInLogprobs bool             `json:"return_text_in_logprobs"`
	Stream               bool             `json:"stream"`
	samplerFields
}

// generateSampler is /generate's sampling_params: SGLang's names, the
// sampling knobs (penalties and logit_bias included) being host/sampling's
// Fields.
type generateSampler struct {
	sampling.Fields
	MaxNewTokens *int      `json:"max_new_tokens"`
	Stop         stopField `json:"stop"`
	StopTokenIDs []int32   `json:"stop_token_ids"`
	IgnoreEOS    bool      `json:"ignore_eos"`
	N            *int      `json:"n"`
	// SGLang's structured output: a JSON Schema (as a string), a regex,
	// an EBNF (GBNF) grammar.
	JSONSchema json.RawMessage `json:"json_schema"`
	Regex      *string         `json:"regex"`
	EBNF       *string         `json:"ebnf"`
}

// samplingParamNames are sampling_params' fields: an error naming one of
// them came from inside sampling_params.
var samplingParamNames = jsonFields(reflect.TypeOf(generateSampler{}))

// handleGenerate serves POST /generate.
func (s *server) handleGenerate(w http.ResponseWriter, r *http.Request) {
	body, err := s.readBody(w, r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	var req generateRequest
	if err := checkFields(body, generateFields, map[string]*fieldPolicy{"sampling_params": samplingParamsFields}); err != nil {
		s.writeError(w, r, err)
		return
	}
	if err := json.Unmarshal(body, &req); err != nil {
		err = jsonError(err)
		var re *requestError
		if errors.As(err, &re) && slices.Contains(samplingParamNames, re.Param) { // custom unmarshalers name the field alone
			re.Param = "sampling_params." + re.Param
		}
		s.writeError(w, r, err)
		return
	}
	p, prompt, err := s.prepareGenerate(&req)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.generate(w, r, p, [][]int32{prompt}, s.newNative(w, r, p, &req))
}

// prepareGenerate validates a /generate request and tokenizes its prompt
// (text gets the tokenizer's special tokens, BOS included; input_ids are
// used as given).
func (s *server) prepareGenerate(req *generateRequest) (genParams, []int32, error) {
	hasIDs := len(bytes.TrimSpace(req.InputIDs)) > 0 && string(bytes.TrimSpace(req.InputIDs)) != "null"
	if (req.Text != nil) == hasIDs {
		return genParams{}, nil, badRequest("text", "give exactly one of text and input_ids")
	}
	sp := req.SamplingParams
	if sp == nil {
		sp = &generateSampler{}
	}
	f := samplingFields{Fields: sp.Fields, Stop: sp.Stop, Stream: req.Stream, N: sp.N, IgnoreEOS: sp.IgnoreEOS,
		StopTokenIDs: sp.StopTokenIDs, samplerFields: req.samplerFields,
		structuredFields: structuredFields{JSONSchema: sp.JSONSchema, Regex: sp.Regex, EBNF: sp.EBNF}}
	maxNew, discard := sp.MaxNewTokens, false
	if maxNew != nil && *maxNew == 0 {
		maxNew, discard = nil, true // score the prompt, generate nothing
	}
	p, err := s.common(&f, maxNew, "max_new_tokens", "sampling_params.")
	if err != nil {
		return p, nil, err
	}
	p.discard, p.keepTokens = discard, true

	var prompt []int32
	if hasIDs {
		p.promptParam = "input_ids"
		if prompt, err = parseTokenIDs(req.InputIDs); err != nil {
			return p, nil, badRequest("input_ids", "%v", err)
		}
	} else {
		p.promptParam = "text"
		if prompt, err = s.b.Tokenizer().Encode(*req.Text, true); err != nil {
			return p, nil, fmt.Errorf("server: tokenize text: %w", err)
		}
	}

	if req.TopLogprobsNum != nil {
		if n := *req.TopLogprobsNum; n < 0 || n > maxTopLogprobs {
			return p, nil, badRequest("top_logprobs_num", "%d is out of range [0, %d]", n, maxTopLogprobs)
		}
	}
	start := -1 // SGLang's default: output logprobs only
	if req.LogprobStartLen != nil {
		start = *req.LogprobStartLen
		if start < -1 || start > len(prompt) {
			return p, nil, badRequest("logprob_start_len", "%d is out of range [-1, %d] (the prompt has %d tokens; -1 asks for output logprobs only)", start, len(prompt), len(prompt))
		}
	}
	if req.ReturnLogprob {
		p.logprobs = true
		if req.TopLogprobsNum != nil {
			p.topLogprobs = *req.TopLogprobsNum
		}
		if start >= 0 {
			p.promptLogprobs, p.promptLogprobStart, p.promptTopLogprobs = true, start, p.topLogprobs
		}
	}
	if sp.MaxNewTokens == nil {
		p.maxTokens = min(defaultMaxNewTokens, s.b.ContextLen()-len(prompt))
		if s.opts.MaxTokensCap > 0 {
			p.maxTokens = min(p.maxTokens, s.opts.MaxTokensCap)
		}
		p.maxTokens = max(p.maxTokens, 0) // no room: engineRequest says so
	}
	return p, prompt, nil
}
