package sampling

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/kvhost/kvhost/sdk/sampler"
)

// Limits on logit_bias (OpenAI's).
const (
	MaxLogitBias     = 300 // entries
	MaxLogitBiasAbs  = 100 // |bias|
	logitBiasField   = "logit_bias"
	repetitionField  = "repetition_penalty"
	temperatureField = "temperature"
)

// FieldError is a request field outside its range: a client error (HTTP
// 400) naming the field as the API spells it.
type FieldError struct {
	Field   string
	Problem string
}

func (e *FieldError) Error() string {
	return fmt.Sprintf("sampling: invalid %s: %s", e.Field, e.Problem)
}

// Fields are the sampling fields of a request body, spelled as OpenAI,
// vLLM and SGLang spell them; the server embeds them in its request
// structs. Every field is optional; Request turns them into the validated
// Request with the APIs' defaults.
type Fields struct {
	Temperature       *float64  `json:"temperature"`
	TopP              *float64  `json:"top_p"`
	TopK              *int      `json:"top_k"` // vLLM/SGLang; -1 or 0 disable it
	MinP              *float64  `json:"min_p"` // vLLM/SGLang
	FrequencyPenalty  *float64  `json:"frequency_penalty"`
	PresencePenalty   *float64  `json:"presence_penalty"`
	RepetitionPenalty *float64  `json:"repetition_penalty"` // vLLM/SGLang
	LogitBias         LogitBias `json:"logit_bias"`
	Seed              *int64    `json:"seed"`
}

// Request maps f to a Request: OpenAI's defaults (temperature 1, top_p 1,
// no penalties), top_p 0 as greedy (the limit keeps only the best token),
// top_k -1 as disabled (vLLM's spelling), a negative seed kept bit for bit.
// It returns a *FieldError naming the first field out of range.
func (f *Fields) Request() (Request, error) {
	r := Request{Temperature: 1, LogitBias: f.LogitBias.entries}
	if f.Temperature != nil {
		r.Temperature = float32(*f.Temperature)
		if err := checkPreOp(temperatureField, *f.Temperature, "0 is greedy"); err != nil {
			return r, err
		}
	}
	if f.TopP != nil {
		if err := checkPreOp("top_p", *f.TopP, "0 is greedy"); err != nil {
			return r, err
		}
		if *f.TopP == 0 {
			r.Temperature = 0
		} else {
			r.TopP = float32(*f.TopP)
		}
	}
	if f.TopK != nil {
		switch k := *f.TopK; {
		case k == -1:
		case k < 0:
			return r, &FieldError{Field: "top_k", Problem: fmt.Sprintf("%d must be >= 0 (0 or -1 disable it)", k)}
		default:
			r.TopK = k
		}
	}
	for _, x := range []struct {
		name string
		v    *float64
		dst  *float32
	}{
		{"min_p", f.MinP, &r.MinP},
		{"frequency_penalty", f.FrequencyPenalty, &r.FrequencyPenalty},
		{"presence_penalty", f.PresencePenalty, &r.PresencePenalty},
		{repetitionField, f.RepetitionPenalty, &r.RepetitionPenalty},
	} {
		if x.v == nil {
			continue
		}
		if err := checkPreOp(x.name, *x.v, ""); err != nil {
			return r, err
		}
		*x.dst = float32(*x.v)
	}
	if f.Seed != nil {
		seed := uint64(*f.Seed) // negative seeds are valid OpenAI input
		r.Seed = &seed
	}
	return r, r.Validate()
}

// checkPreOp checks v against the range sdk/sampler.PreOpParams gives the
// host pre-op parameter name: the one statement of those ranges, shared by
// the host path and every policy that declares the pre-op.
func checkPreOp(name string, v float64, note string) error {
	p := preOpParam(name)
	if v >= p.Min && v <= p.Max { // false for NaN
		return nil
	}
	if note != "" {
		note = " (" + note + ")"
	}
	return &FieldError{Field: name, Problem: fmt.Sprintf("%v is out of range [%v, %v]%s", v, p.Min, p.Max, note)}
}

func preOpParam(name string) sampler.Param {
	for _, ps := range sampler.PreOpParams {
		for _, p := range ps {
			if p.Name == name {
				return p
			}
		}
	}
	panic("sampling: no pre-op parameter " + name) // a programming error
}

// LogitBias is OpenAI's logit_bias: an object from token ids (decimal
// strings) to a bias in [-100, 100] added to that token's logit, at most
// MaxLogitBias entries. It unmarshals into the sorted form SeqState.Bias
// wants and refuses anything else with a *FieldError.
type LogitBias struct {
	entries []TokenBias
}

// UnmarshalJSON implements json.Unmarshaler.
func (b *LogitBias) UnmarshalJSON(data []byte) error {
	b.entries = nil
	data = bytes.TrimSpace(data)
	if string(data) == "null" {
		return nil
	}
	if len(data) == 0 || data[0] != '{' {
		return &FieldError{Field: logitBiasField, Problem: "expected an object mapping token ids to biases, like {\"50256\": -100}"}
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(data, &m); err != nil {
		return &FieldError{Field: logitBiasField, Problem: err.Error()}
	}
	if len(m) > MaxLogitBias {
		return &FieldError{Field: logitBiasField, Problem: fmt.Sprintf("%d entries given, at most %d are allowed", len(m), MaxLogitBias)}
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys) // report the first bad entry deterministically
	out := make([]TokenBias, 0, len(m))
	for _, k := range keys {
		id, err := strconv.ParseInt(k, 10, 32)
		if err != nil || id < 0 || strconv.FormatInt(id, 10) != k {
			return &FieldError{Field: logitBiasField, Problem: fmt.Sprintf("key %q is not a token id (a decimal integer in [0, %d])", k, math.MaxInt32)}
		}
		var v float64
		if err := json.Unmarshal(m[k], &v); err != nil {
			return &FieldError{Field: logitBiasField, Problem: fmt.Sprintf("token %s: the bias %s is not a number", k, bytes.TrimSpace(m[k]))}
		}
		if !(v >= -MaxLogitBiasAbs && v <= MaxLogitBiasAbs) {
			return &FieldError{Field: logitBiasField, Problem: fmt.Sprintf("token %s: bias %v is out of range [-%d, %d]", k, v, MaxLogitBiasAbs, MaxLogitBiasAbs)}
		}
		out = append(out, TokenBias{Token: int32(id), Bias: float32(v)})
	}
	slices.SortFunc(out, func(a, b TokenBias) int { return int(a.Token) - int(b.Token) })
	b.entries = out
	return nil
}

// Entries returns the bias entries sorted by token (nil when none).
func (b LogitBias) Entries() []TokenBias { return b.entries }

// Request is one generation's sampling, validated: what the host pre-ops
// and the policy read. The zero value is greedy with nothing else asked.
type Request struct {
	// Temperature 0 is greedy (argmax, after penalties and bias).
	Temperature float32 `json:"temperature"`
	TopP        float32 `json:"top_p"` // 0 or 1 disables
	TopK        int     `json:"top_k"` // 0 disables
	MinP        float32 `json:"min_p"` // 0 disables
	// FrequencyPenalty and PresencePenalty act on generated tokens (0:
	// none); RepetitionPenalty on prompt and generated tokens (0 or 1:
	// none). See the package doc for the exact rules.
	FrequencyPenalty  float32 `json:"frequency_penalty"`
	PresencePenalty   float32 `json:"presence_penalty"`
	RepetitionPenalty float32 `json:"repetition_penalty"`
	// LogitBias is sorted by token, one entry per token (LogitBias or
	// NormalizeBias give that form).
	LogitBias []TokenBias `json:"logit_bias,omitempty"`
	// Seed makes sampling reproducible; nil draws one from the engine's
	// source.
	Seed *uint64 `json:"seed,omitempty"`
}

// Validate returns a *FieldError naming the first field out of range.
// Ranges are sdk/sampler.PreOpParams' (OpenAI's for the fields it has).
func (r Request) Validate() error {
	for _, x := range []struct {
		name string
		v    float32
	}{
		{temperatureField, r.Temperature}, {"top_p", r.TopP}, {"min_p", r.MinP},
		{"frequency_penalty", r.FrequencyPenalty}, {"presence_penalty", r.PresencePenalty},
	} {
		if err := checkPreOp(x.name, float64(x.v), ""); err != nil {
			return err
		}
	}
	if r.RepetitionPenalty != 0 {
		if err := checkPreOp(repetitionField, float64(r.RepetitionPenalty), ""); err != nil {
			return err
		}
	}
	if r.TopK < 0 {
		return &FieldError{Field: "top_k", Problem: fmt.Sprintf("%d must be >= 0 (0 disables it)", r.TopK)}
	}
	if len(r.LogitBias) > MaxLogitBias {
		return &FieldError{Field: logitBiasField, Problem: fmt.Sprintf("%d entries given, at most %d are allowed", len(r.LogitBias), MaxLogitBias)}
	}
	for i, b := range r.LogitBias {
		switch {
		case b.Token < 0:
			return &FieldError{Field: logitBiasField, Problem: fmt.Sprintf("token id %d must be >= 0", b.Token)}
		case i > 0 && b.Token <= r.LogitBias[i-1].Token:
			return &FieldError{Field: logitBiasField, Problem: "entries must be sorted by token with no token twice (use NormalizeBias)"}
		case !(b.Bias >= -MaxLogitBiasAbs && b.Bias <= MaxLogitBiasAbs):
			return &FieldError{Field: logitBiasField, Problem: fmt.Sprintf("token %d: bias %v is out of range [-%d, %d]", b.Token, b.Bias, MaxLogitBiasAbs, MaxLogitBiasAbs)}
		}
	}
	return nil
}

// repetition is the effective repetition penalty (1: none).
func (r Request) repetition() float32 {
	if r.RepetitionPenalty == 0 {
		return 1
	}
	return r.RepetitionPenalty
}

// UsesPolicy reports whether a request samples through a policy plugin: it
// names one, gives policy parameters, or samples (temperature > 0). A
// greedy request that names none is an argmax on the host (penalties and
// bias applied), which is cheaper and needs no registry.
func UsesPolicy(policy string, params map[string]any, r Request) bool {
	return policy != "" || params != nil || r.Temperature > 0
}

// Compile is the one mapping from a request to a policy's parameters: the
// request's own fields join params (the "sampler_params" extension) when
// the policy ("" = default) declares them, and the result is validated
// against the policy's schema. A field the request sets that the policy
// does not take is refused rather than dropped, except the filters
// (temperature, top_p, top_k, min_p) for an argmax-invariant policy,
// which they cannot change; so is a field set both ways with different
// values. Errors: *UnknownPolicyError, or *ParamError (FromRequest when
// the value came from the request's own field).
func (r *Registry) Compile(policy string, params map[string]any, req Request) (Compiled, error) {
	if policy == "" {
		policy = r.opts.Default
	}
	e := r.entry(policy)
	var g *generation
	if e != nil {
		g = e.acquire()
	}
	if g == nil {
		return Compiled{}, &UnknownPolicyError{Policy: policy, Available: r.names()}
	}
	defer g.Release()
	merged, err := g.Value.schema.merge(policy, params, req)
	if err != nil {
		return Compiled{}, err
	}
	values, err := g.Value.schema.validate(policy, merged)
	if err != nil {
		if pe, ok := err.(*ParamError); ok {
			_, fromParams := params[pe.Param]
			pe.FromRequest = !fromParams
		}
		return Compiled{}, err
	}
	c := Compiled{policy: policy, values: values}
	c.resolve(g.Value.schema)
	return c, nil
}

// merge adds the request's fields to params for schema s (see Compile).
func (s *schema) merge(policy string, params map[string]any, req Request) (map[string]any, error) {
	out := make(map[string]any, len(params)+8)
	for k, v := range params {
		out[k] = v
	}
	rep := req.repetition()
	for _, f := range []struct {
		name     string
		v        float32
		set      bool // the request asks for something
		neutral  float32
		argmaxOK bool // cannot change an argmax
	}{
		{temperatureField, req.Temperature, req.Temperature != 1, 1, true},
		{"top_p", req.TopP, req.TopP > 0 && req.TopP < 1, 1, true},
		{"top_k", float32(req.TopK), req.TopK > 0, 0, true},
		{"min_p", req.MinP, req.MinP > 0, 0, true},
		{"frequency_penalty", req.FrequencyPenalty, req.FrequencyPenalty != 0, 0, false},
		{"presence_penalty", req.PresencePenalty, req.PresencePenalty != 0, 0, false},
		{repetitionField, rep, rep != 1, 1, false},
	} {
		if _, declared := s.index[f.name]; !declared {
			if f.set && !(f.argmaxOK && s.argmax) {
				return nil, &ParamError{Policy: policy, Param: f.name, FromRequest: true,
					Problem: fmt.Sprintf("%v is not honoured: the sampler takes %s", f.v, s.names())}
			}
			continue
		}
		if given, ok := params[f.name]; ok {
			if v, isNum := number(given); f.set && (!isNum || float32(v) != f.v) {
				return nil, &ParamError{Policy: policy, Param: f.name, FromRequest: true,
					Problem: fmt.Sprintf("%v conflicts with sampler_params.%s = %v; give it once", f.v, f.name, given)}
			}
			continue // sampler_params has it
		}
		// The temperature always joins (OpenAI's default 1 is a value);
		// the others when set, so the policy's own defaults stand.
		if f.set || f.name == temperatureField {
			out[f.name] = float64(f.v)
		}
	}
	if len(req.LogitBias) > 0 && !s.ops.bias {
		return nil, &ParamError{Policy: policy, Param: logitBiasField, FromRequest: true,
			Problem: fmt.Sprintf("is not honoured: this sampler does not declare the %q pre-op", sampler.PreOpBias)}
	}
	return out, nil
}

// names lists the parameters s takes, for messages.
func (s *schema) names() string {
	if len(s.all) == 0 {
		return "no parameters"
	}
	known := make([]string, len(s.all))
	for j, p := range s.all {
		known[j] = p.Name
	}
	return strings.Join(known, ", ")
}

// NewSeqState is a sequence's sampling state at its first step. c is the
// request's compiled policy, or nil for the host path, whose parameters
// come from req alone. prompt is the sequence's prompt: the repetition
// penalty reads its distinct tokens (computed here once, only when a
// repetition penalty applies).
func NewSeqState(req Request, c *Compiled, prompt []int32, seed uint64) SeqState {
	st := SeqState{Seed: seed, Bias: req.LogitBias}
	rep := req.repetition()
	if c != nil {
		st.Params = *c
		if v, ok := c.values[repetitionField]; ok {
			rep = float32(v)
		}
	} else {
		st.Params = Compiled{host: hostParams{
			repetition: rep, frequency: req.FrequencyPenalty, presence: req.PresencePenalty,
			temperature: req.Temperature, topP: req.TopP, minP: req.MinP, topK: req.TopK,
		}}
	}
	if rep != 1 {
		st.Prompt = PromptSet(prompt)
	}
	return st
}

// PromptSet returns the distinct tokens of prompt, sorted (SeqState.Prompt).
func PromptSet(prompt []int32) []int32 {
	out := slices.Clone(prompt)
	slices.Sort(out)
	return slices.Compact(out)
}
