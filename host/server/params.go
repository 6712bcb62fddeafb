package server

import (
	"github.com/kvhost/kvhost/host/constraint"
	"github.com/kvhost/kvhost/host/engine"
)

// genParams is a validated request, independent of the endpoint.
type genParams struct {
	maxTokens    int // 0: context minus prompt (capped)
	sampling     engine.SamplingParams
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

	sampler       *string // nil: no policy named
	samplerParams map[string]any

	// constraint restricts the output (structured output, tool calls);
	// structured is the structured-output field it came from.
	constraint *constraint.Spec
	structured *structuredSpec
	// tools is how a chat request uses tools (nil: it does not).
	tools *toolPlan
}

// common validates the shared fields. maxTokens is the effective max-tokens
// field (max_completion_tokens wins over max_tokens for chat) and its name.
func (s *server) common(f *samplingFields, maxTokens *int, maxTokensName string) (genParams, error) {
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

	// OpenAI's defaults: temperature 1, top_p 1.
	sp := engine.SamplingParams{Temperature: 1}
	if f.Temperature != nil {
		if t := *f.Temperature; t < 0 || t > 100 {
			return p, badRequest("temperature", "%v is out of range [0, 100] (0 is greedy)", t)
		}
		sp.Temperature = float32(*f.Temperature)
	}
	if f.TopP != nil {
		tp := *f.TopP
		if tp < 0 || tp > 1 {
			return p, badRequest("top_p", "%v is out of range [0, 1]", tp)
		}
		if tp == 0 {
			// The limit top_p -> 0 keeps only the best token: greedy. The
			// engine reads top_p=0 as "disabled", so say greedy explicitly.
			sp.Temperature = 0
		} else {
			sp.TopP = float32(tp)
		}
	}
	if f.TopK != nil {
		switch k := *f.TopK; {
		case k == -1: // vLLM's spelling of "disabled"
		case k < 0:
			return p, badRequest("top_k", "%d must be >= 0 (0 or -1 disable it)", k)
		default:
			sp.TopK = k
		}
	}
	if f.MinP != nil {
		if mp := *f.MinP; mp < 0 || mp > 1 {
			return p, badRequest("min_p", "%v is out of range [0, 1]", mp)
		}
		sp.MinP = float32(*f.MinP)
	}
	if f.Seed != nil {
		seed := uint64(*f.Seed) // negative seeds are valid OpenAI input; keep their bits
		sp.Seed = &seed
	}
	if err := sp.Validate(); err != nil {
		return p, badRequest("", "%v", err)
	}
	if f.StreamOptions != nil && !f.Stream {
		return p, badRequest("stream_options", "stream_options is only allowed when stream is true")
	}
	if err := s.checkSampler(&f.samplerFields); err != nil {
		return p, err
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
	p.sampler, p.samplerParams = f.Sampler, f.SamplerParams
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
	if p.sampler != nil || p.samplerParams != nil {
		name := ""
		if p.sampler != nil {
			name = *p.sampler
		}
		s.opts.ApplySampler(&req, name, p.samplerParams)
	}
	return req, nil
}

// checkSampler validates the sampler extension with Options.Sampler.
func (s *server) checkSampler(f *samplerFields) error {
	if f.Sampler == nil && f.SamplerParams == nil {
		return nil
	}
	param := "sampler"
	if f.Sampler == nil {
		param = "sampler_params"
	}
	if s.opts.Sampler == nil {
		return badRequest(param, "this server has no selectable sampler policies")
	}
	name := ""
	if f.Sampler != nil {
		name = *f.Sampler
	}
	if err := s.opts.Sampler.Validate(name, f.SamplerParams); err != nil {
		return badRequest(param, "%v", err)
	}
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
