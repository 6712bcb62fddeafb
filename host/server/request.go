package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"reflect"
	"strings"
	"time"

	"github.com/kvhost/kvhost/host/sampling"
)

// Limits on request fields, beyond what the OpenAI API states.
const (
	maxStops              = 4   // OpenAI: "up to 4 sequences"
	maxStopBytes          = 256 // bounds the per-token hold-back scan
	maxCompletionLogprobs = 5   // OpenAI completions: logprobs <= 5
	maxTopLogprobs        = 20  // OpenAI chat: top_logprobs <= 20; also the engine's limit
	maxStopTokens         = 64  // bounds the engine's per-token stop check
)

// openAINested are the objects inside an OpenAI body whose fields are
// checked too.
var openAINested = map[string]*fieldPolicy{"stream_options": streamOptionFields}

// decodeBody reads the body (bounded), checks it with checkJSON and the
// route's field policy and unmarshals it into dst, turning every failure
// into a *requestError that names the field.
func (s *server) decodeBody(w http.ResponseWriter, r *http.Request, dst any, fields *fieldPolicy) error {
	body, err := s.readBody(w, r)
	if err != nil {
		return err
	}
	if err := checkFields(body, fields, openAINested); err != nil {
		return err
	}
	if err := json.Unmarshal(body, dst); err != nil {
		return jsonError(err)
	}
	return nil
}

// readBody reads the whole body (bounded by MaxBodyBytes) and refuses an
// empty one and what checkJSON refuses.
func (s *server) readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.opts.MaxBodyBytes))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, &requestError{Status: http.StatusRequestEntityTooLarge,
				Message: fmt.Sprintf("request body exceeds %d bytes", mbe.Limit)}
		}
		return nil, badRequest("", "reading the request body: %v", err)
	}
	// The body is in memory: lift the read deadline NewHTTPServer's
	// ReadTimeout set, or net/http's background read of the connection
	// would fail at it and cancel a long generation (see NewHTTPServer).
	// Writers without deadlines (tests' recorders) return an error: fine.
	_ = http.NewResponseController(w).SetReadDeadline(time.Time{})
	if len(bytes.TrimSpace(body)) == 0 {
		return nil, badRequest("", "the request body is empty; send a JSON object")
	}
	if err := checkJSON(body); err != nil {
		return nil, err
	}
	return body, nil
}

// jsonError explains an encoding/json error in the API's terms.
func jsonError(err error) error {
	var (
		re  *requestError
		fe  *sampling.FieldError
		se  *json.SyntaxError
		ute *json.UnmarshalTypeError
	)
	switch {
	case errors.As(err, &re):
		return re
	case errors.As(err, &fe):
		return badRequest(fe.Field, "%s", fe.Problem)
	case errors.As(err, &se):
		return badRequest("", "the body is not valid JSON: %v (at byte %d)", se, se.Offset)
	case errors.As(err, &ute):
		field := jsonPath(ute.Field)
		if field == "" {
			return badRequest("", "the body must be a JSON object, got %s", ute.Value)
		}
		return badRequest(field, "expected %s, got %s", jsonKind(ute.Type), ute.Value)
	}
	return badRequest("", "the body is not valid JSON: %v", err)
}

// embedded are the Go names of structs embedded in request bodies, which
// encoding/json puts in an error's field path.
var embedded = map[string]bool{"samplingFields": true, "samplerFields": true, "Fields": true, "structuredFields": true, "toolFields": true, "reasoningFields": true}

// jsonPath is an UnmarshalTypeError's field path as the client wrote it.
func jsonPath(field string) string {
	parts := strings.Split(field, ".")
	out := parts[:0]
	for _, p := range parts {
		if !embedded[p] {
			out = append(out, p)
		}
	}
	return strings.Join(out, ".")
}

// jsonKind names a Go type the way a JSON client thinks of it.
func jsonKind(t reflect.Type) string {
	if t == nil {
		return "a value"
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a boolean"
	case reflect.Slice, reflect.Array:
		return "an array"
	default:
		return "an object"
	}
}

// samplingFields are the request fields completions and chat share. The
// sampling knobs (temperature, top_p, top_k, min_p, the penalties,
// logit_bias, seed) are host/sampling's Fields, which maps them.
type samplingFields struct {
	sampling.Fields
	Stop          stopField      `json:"stop"`
	Stream        bool           `json:"stream"`
	StreamOptions *streamOptions `json:"stream_options"`
	N             *int           `json:"n"`
	MaxTokens     *int           `json:"max_tokens"`
	IgnoreEOS     bool           `json:"ignore_eos"`     // extension (vLLM's name)
	StopTokenIDs  []int32        `json:"stop_token_ids"` // extension (vLLM's name)
	samplerFields
	structuredFields
}

// samplerFields are the sampler-policy extension every generating body
// accepts: a policy name and its parameters, checked by
// Options.Sampler together with the request's sampling fields.
type samplerFields struct {
	Sampler       *string        `json:"sampler"`
	SamplerParams map[string]any `json:"sampler_params"`
}

type streamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

// completionRequest is the body of POST /v1/completions.
type completionRequest struct {
	Model    string      `json:"model"`
	Prompt   promptField `json:"prompt"`
	Logprobs *int        `json:"logprobs"`
	Echo     bool        `json:"echo"`
	samplingFields
}

// chatRequest is the body of POST /v1/chat/completions.
type chatRequest struct {
	Model               string        `json:"model"`
	Messages            []chatMessage `json:"messages"`
	MaxCompletionTokens *int          `json:"max_completion_tokens"`
	Logprobs            *bool         `json:"logprobs"`
	TopLogprobs         *int          `json:"top_logprobs"`
	samplingFields
	toolFields
	reasoningFields
}

type chatMessage struct {
	Role    string         `json:"role"`
	Content messageContent `json:"content"`
	// Tool calling: an assistant's calls; the call a tool message answers.
	ToolCalls  []chatToolCall `json:"tool_calls"`
	ToolCallID string         `json:"tool_call_id"`
	Name       string         `json:"name"`
	// ReasoningContent is an earlier assistant turn's reasoning, as the
	// response gave it (the template decides whether it is rendered).
	ReasoningContent string `json:"reasoning_content"`
}

// promptField is a completions prompt: a string, an array of strings (a
// batch), an array of token ids, or an array of token-id arrays (a batch).
type promptField struct {
	Set    bool
	Texts  []string  // when given as text
	Tokens [][]int32 // when given as token ids
}

func (p *promptField) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	*p = promptField{}
	switch {
	case len(b) == 0 || string(b) == "null":
		return nil
	case b[0] == '"':
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return badRequest("prompt", "%v", err)
		}
		*p = promptField{Set: true, Texts: []string{s}}
		return nil
	case b[0] != '[':
		return badRequest("prompt", "expected a string, an array of strings or an array of token ids")
	}
	var items []json.RawMessage
	if err := json.Unmarshal(b, &items); err != nil {
		return badRequest("prompt", "%v", err)
	}
	if len(items) == 0 {
		return badRequest("prompt", "the prompt array is empty")
	}
	p.Set = true
	switch first := bytes.TrimSpace(items[0]); {
	case len(first) > 0 && first[0] == '"':
		for i, it := range items {
			var s string
			if err := json.Unmarshal(it, &s); err != nil {
				return badRequest("prompt", "element %d: expected a string like the first element", i)
			}
			p.Texts = append(p.Texts, s)
		}
	case len(first) > 0 && first[0] == '[':
		for i, it := range items {
			ids, err := parseTokenIDs(it)
			if err != nil {
				return badRequest("prompt", "element %d: %v", i, err)
			}
			p.Tokens = append(p.Tokens, ids)
		}
	default:
		ids, err := parseTokenIDs(b)
		if err != nil {
			return badRequest("prompt", "%v", err)
		}
		p.Tokens = [][]int32{ids}
	}
	return nil
}

// parseTokenIDs parses a non-empty JSON array of token ids (integers in int32
// range, >= 0).
func parseTokenIDs(b []byte) ([]int32, error) {
	var nums []json.Number
	if err := json.Unmarshal(b, &nums); err != nil {
		return nil, errors.New("expected an array of token ids (integers)")
	}
	if len(nums) == 0 {
		return nil, errors.New("the token id array is empty")
	}
	ids := make([]int32, len(nums))
	for i, n := range nums {
		v, err := n.Int64()
		if err != nil || v < 0 || v > math.MaxInt32 {
			return nil, fmt.Errorf("token id %d (%s) is not an integer in [0, %d]", i, n, math.MaxInt32)
		}
		ids[i] = int32(v)
	}
	return ids, nil
}

// stopField is a string or an array of strings.
type stopField struct {
	Stops []string
}

func (s *stopField) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	s.Stops = nil
	switch {
	case len(b) == 0 || string(b) == "null":
		return nil
	case b[0] == '"':
		var one string
		if err := json.Unmarshal(b, &one); err != nil {
			return badRequest("stop", "%v", err)
		}
		s.Stops = []string{one}
	case b[0] == '[':
		if err := json.Unmarshal(b, &s.Stops); err != nil {
			return badRequest("stop", "expected a string or an array of strings")
		}
	default:
		return badRequest("stop", "expected a string or an array of strings")
	}
	if len(s.Stops) > maxStops {
		return badRequest("stop", "%d stop sequences given, at most %d are allowed", len(s.Stops), maxStops)
	}
	for i, st := range s.Stops {
		if st == "" {
			return badRequest("stop", "stop sequence %d is empty", i)
		}
		if len(st) > maxStopBytes {
			return badRequest("stop", "stop sequence %d is %d bytes, at most %d are allowed", i, len(st), maxStopBytes)
		}
	}
	return nil
}

// messageContent is a chat message's content: a string, null, or an array
// of content parts of which only {"type":"text","text":...} is supported.
type messageContent struct {
	Text string
}

func (c *messageContent) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	c.Text = ""
	switch {
	case len(b) == 0 || string(b) == "null":
		return nil
	case b[0] == '"':
		if err := json.Unmarshal(b, &c.Text); err != nil {
			return badRequest("messages.content", "%v", err)
		}
		return nil
	case b[0] != '[':
		return badRequest("messages.content", "expected a string or an array of content parts")
	}
	var parts []struct {
		Type string  `json:"type"`
		Text *string `json:"text"`
	}
	if err := json.Unmarshal(b, &parts); err != nil {
		return badRequest("messages.content", "expected an array of {\"type\":\"text\",\"text\":...} parts")
	}
	var sb strings.Builder
	for i, p := range parts {
		if p.Type != "text" || p.Text == nil {
			return badRequest("messages.content", "part %d has type %q; only \"text\" parts are supported", i, p.Type)
		}
		sb.WriteString(*p.Text)
	}
	c.Text = sb.String()
	return nil
}
