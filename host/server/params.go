package server

import (
	"errors"

	"github.com/kvhost/kvhost/host/constraint"
	"github.com/kvhost/kvhost/host/engine"
	"github.com/kvhost/kvhost/host/sampling"
)

// genParams is a validated request, independent of the endpoint.
type genParams struct {
	maxTokens    int // 0: context minus prompt (capped)
	sampling     sampling.Request
	stops        []string
	stopTokens   []int32
	stream       bool
	includeUsage bool
	logprobs     bool
	topLogprobs  int
	ignoreEOS    bool
	n            int // choices per prompt, >= 1

	// echo (completions) starts each choice's text with the prompt.
	echo bool
	// discard: the client asked for no new tokens (max_tokens 0 with echo,
	// max_new_tokens 0 on /generate), which the engine cannot do; it is
	// asked for one, which is dropped.
	discard bool
	// promptLogprobs asks the engine for the logprobs of prompt tokens
	// from promptLogprobStart on, with promptTopLogprobs alternatives.
	promptLogprobs     bool
	promptLogprobStart int
	promptTopLogprobs  int
	// keepTokens records every returned token (for /generate output_ids)
	// even without logprobs.
	keepTokens bool
	// promptParam names the field a prompt-length error points at.
	promptParam string

	// compiled is the request's policy compiled by Options.Sampler; nil
	// when the request samples on the host or the server has no policies.
	compiled *sampling.Compiled

	// constraint restricts the output (structured output, tool calls);
	// structured is the structured-output field it came from.
	constraint *constraint.Spec
	structured *structuredSpec
	// tools is how a chat request uses tools (nil: it does not).
	tools *toolPlan
}

// common validates the shared fields and compiles the request's sampling
// (sampling.Fields, then Options.Sampler when the request samples through
// a policy). maxTokens is the effective max-tokens field (max_completion_tokens
// wins over max_tokens for chat) and its name; prefix is how the body
// nests the sampling fields ("sampling_params." on /generate), prepended
// to the param an error names.
func (s *server) common(f *samplingFields, maxTokens *int, maxTokensName, prefix string) (genParams, error) {
	p, err := s.commonFields(f, maxTokens, maxTokensName)
	if err != nil {
		var re *requestError
		if errors.As(err, &re) && re.Param != "" {
			re.Param = prefix + re.Param
		}
		return p, err
	}
	return p, s.compileSampler(&p, &f.samplerFields, prefix)
}

func (s *server) commonFields(f *samplingFields, maxTokens *int, maxTokensName string) (genParams, error) {
	p := genParams{n: 1, promptParam: "prompt"}
	if f.N != nil {
		if n := *f.N; n < 1 || n > s.opts.MaxN {
			return p, badRequest("n", "%d is out of range [1, %d]", n, s.opts.MaxN)
		}
		p.n = *f.N
	}
	if maxTokens != nil {
		switch {
		case *maxTokens < 1:
			return p, badRequest(maxTokensName, "%d must be >= 1", *maxTokens)
		case s.opts.MaxTokensCap > 0 && *maxTokens > s.opts.MaxTokensCap:
			return p, badRequest(maxTokensName, "%d exceeds this server's limit of %d", *maxTokens, s.opts.MaxTokensCap)
		}
		p.maxTokens = *maxTokens
	}
	sp, err := f.Fields.Request()
	if err != nil {
		return p, jsonError(err) // a *sampling.FieldError: a *requestError naming the field
	}
	if f.StreamOptions != nil && !f.Stream {
		return p, badRequest("stream_options", "stream_options is only allowed when stream is true")
	}
	if err := checkStopTokens(f.StopTokenIDs, "stop_token_ids"); err != nil {
		return p, err
	}
	st, err := f.structuredFields.collect()
	if err != nil {
		return p, err
	}
	if st != nil {
		if p.constraint, err = st.spec(); err != nil {
			return p, err
		}
		p.structured = st
	}
	p.stopTokens = f.StopTokenIDs
	p.sampling = sp
	p.stops = f.Stop.Stops
	p.stream = f.Stream
	p.includeUsage = f.StreamOptions != nil && f.StreamOptions.IncludeUsage
	p.ignoreEOS = f.IgnoreEOS
	return p, nil
}

// engineRequest builds the engine request for one tokenized prompt, filling
// in the default max_tokens: what is left of the context, capped.
func (s *server) engineRequest(prompt []int32, p genParams) (engine.Request, error) {
	if len(prompt) == 0 {
		return engine.Request{}, badRequest(p.promptParam, "the prompt is empty after tokenization")
	}
	if lim := s.opts.MaxPromptTokens; lim > 0 && len(prompt) > lim {
		return engine.Request{}, badRequest(p.promptParam, "the prompt has %d tokens; this server's limit is %d", len(prompt), lim)
	}
	maxTokens := p.maxTokens
	if p.discard {
		maxTokens = 1
	}
	if maxTokens == 0 {
		ctxLen := s.b.ContextLen()
		maxTokens = ctxLen - len(prompt)
		if maxTokens < 1 {
			return engine.Request{}, badRequest(p.promptParam, "the prompt has %d tokens and leaves no room in the %d-token context window", len(prompt), ctxLen)
		}
		if s.opts.MaxTokensCap > 0 && maxTokens > s.opts.MaxTokensCap {
			maxTokens = s.opts.MaxTokensCap
		}
	}
	req := engine.Request{
		Prompt:      prompt,
		MaxTokens:   maxTokens,
		Sampling:    p.sampling,
		StopTokens:  p.stopTokens,
		IgnoreEOS:   p.ignoreEOS,
		Logprobs:    p.logprobs,
		TopLogprobs: p.topLogprobs,
	}
	if p.n > 1 {
		req.N = p.n
	}
	req.Constraint = p.constraint
	if p.promptLogprobs {
		req.PromptLogprobs = true
		req.PromptLogprobStart = p.promptLogprobStart
		req.PromptTopLogprobs = p.promptTopLogprobs
	}
	if p.compiled != nil {
		req.Sampler, req.SamplerParams = p.compiled.Policy(), p.compiled
	}
	return req, nil
}

// compileSampler compiles p's sampling with Options.Sampler when the
// request samples through a policy (sampling.UsesPolicy), so a field the
// policy refuses is a 400 before admission and the engine compiles
// nothing. A field of the request is named with prefix, a policy
// parameter as sampler_params.NAME.
func (s *server) compileSampler(p *genParams, f *samplerFields, prefix string) error {
	name := ""
	if f.Sampler != nil {
		name = *f.Sampler
	}
	if s.opts.Sampler == nil {
		if f.Sampler != nil || f.SamplerParams != nil {
			param := "sampler"
			if f.Sampler == nil {
				param = "sampler_params"
			}
			return badRequest(param, "this server has no selectable sampler policies")
		}
		return nil // the engine samples on the host
	}
	if !sampling.UsesPolicy(name, f.SamplerParams, p.sampling) {
		return nil
	}
	c, err := s.opts.Sampler.Compile(name, f.SamplerParams, p.sampling)
	if err != nil {
		var pe *sampling.ParamError
		switch {
		case errors.As(err, &pe) && pe.FromRequest:
			return badRequest(prefix+pe.Param, "%s (sampler %q)", pe.Problem, pe.Policy)
		case errors.As(err, &pe):
			return badRequest("sampler_params."+pe.Param, "%s (sampler %q)", pe.Problem, pe.Policy)
		}
		return badRequest("sampler", "%v", err)
	}
	p.compiled = &c
	return nil
}

// checkStopTokens refuses negative ids and more than maxStopTokens.
func checkStopTokens(ids []int32, param string) error {
	if len(ids) > maxStopTokens {
		return badRequest(param, "%d stop token ids given, at most %d are allowed", len(ids), maxStopTokens)
	}
	for i, id := range ids {
		if id < 0 {
			return badRequest(param, "token id %d (%d) must be >= 0", i, id)
		}
	}
	return nil
}
