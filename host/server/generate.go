package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
)

// defaultMaxNewTokens is /generate's default max_new_tokens (SGLang's),
// clipped to the context left and to MaxTokensCap.
const defaultMaxNewTokens = 128

// generateRequest is the body of POST /generate (SGLang's native API). Unlike
// the OpenAI routes it refuses unknown fields: a native client that sends a
// knob this server does not implement must learn it was not applied.
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

type generateSampler struct {
	MaxNewTokens *int      `json:"max_new_tokens"`
	Temperature  *float64  `json:"temperature"`
	TopP         *float64  `json:"top_p"`
	TopK         *int      `json:"top_k"`
	MinP         *float64  `json:"min_p"`
	Seed         *int64    `json:"seed"`
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

var (
	generateFields = []string{"text", "input_ids", "sampling_params", "return_logprob", "logprob_start_len",
		"top_logprobs_num", "return_text_in_logprobs", "stream", "sampler", "sampler_params"}
	generateSamplerFields = []string{"max_new_tokens", "temperature", "top_p", "top_k", "min_p", "seed",
		"stop", "stop_token_ids", "ignore_eos", "n", "json_schema", "regex", "ebnf"}
)

// handleGenerate serves POST /generate.
func (s *server) handleGenerate(w http.ResponseWriter, r *http.Request) {
	body, err := s.readBody(w, r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	var req generateRequest
	if err := checkKnownFields(body); err != nil {
		s.writeError(w, r, err)
		return
	}
	if err := json.Unmarshal(body, &req); err != nil {
		err = jsonError(err)
		var re *requestError
		if errors.As(err, &re) && re.Param == "stop" { // stopField names itself
			re.Param = "sampling_params.stop"
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

// checkKnownFields refuses a /generate body with a field it does not know,
// at the top level or in sampling_params (sampler_params is the sampler's).
func checkKnownFields(body []byte) error {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(body, &top); err != nil {
		return jsonError(err)
	}
	if err := unknownField(top, generateFields, ""); err != nil {
		return err
	}
	sp := bytes.TrimSpace(top["sampling_params"])
	if len(sp) == 0 || sp[0] != '{' {
		return nil // absent, null, or a wrong type json.Unmarshal will name
	}
	var inner map[string]json.RawMessage
	if err := json.Unmarshal(sp, &inner); err != nil {
		return badRequest("sampling_params", "%v", err)
	}
	return unknownField(inner, generateSamplerFields, "sampling_params.")
}

func unknownField(m map[string]json.RawMessage, known []string, prefix string) error {
	var bad []string
	for k := range m {
		if !slices.Contains(known, k) {
			bad = append(bad, k)
		}
	}
	if len(bad) == 0 {
		return nil
	}
	slices.Sort(bad)
	return badRequest(prefix+bad[0], "unknown field %q (known: %s)", prefix+bad[0], strings.Join(known, ", "))
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
	f := samplingFields{Temperature: sp.Temperature, TopP: sp.TopP, TopK: sp.TopK, MinP: sp.MinP, Seed: sp.Seed,
		Stop: sp.Stop, Stream: req.Stream, N: sp.N, IgnoreEOS: sp.IgnoreEOS, StopTokenIDs: sp.StopTokenIDs,
		structuredFields: structuredFields{JSONSchema: sp.JSONSchema, Regex: sp.Regex, EBNF: sp.EBNF}}
	maxNew, discard := sp.MaxNewTokens, false
	if maxNew != nil && *maxNew == 0 {
		maxNew, discard = nil, true // score the prompt, generate nothing
	}
	p, err := s.common(&f, maxNew, "max_new_tokens")
	if err != nil {
		var re *requestError
		if errors.As(err, &re) && re.Param != "" {
			re.Param = "sampling_params." + re.Param
		}
		return p, nil, err
	}
	if err := s.checkSampler(&req.samplerFields); err != nil {
		return p, nil, err
	}
	p.sampler, p.samplerParams = req.Sampler, req.SamplerParams
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
