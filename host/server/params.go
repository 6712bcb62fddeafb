package server

import (
	"github.com/kvhost/kvhost/host/engine"
)

// genParams is a validated request, independent of the endpoint.
type genParams struct {
	maxTokens    int // 0: context minus prompt (capped)
	sampling     engine.SamplingParams
	stops        []string
	stream       bool
	includeUsage bool
	logprobs     bool
	topLogprobs  int
	ignoreEOS    bool
}

// common validates the shared fields. maxTokens is the effective max-tokens
// field (max_completion_tokens wins over max_tokens for chat) and its name.
func (s *server) common(f *samplingFields, maxTokens *int, maxTokensName string) (genParams, error) {
	var p genParams
	if f.N != nil && *f.N != 1 {
		if *f.N < 1 {
			return p, badRequest("n", "n is %d; it must be 1", *f.N)
		}
		return p, badRequest("n", "n is %d; only n=1 is supported (send separate requests for more samples)", *f.N)
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
		return engine.Request{}, badRequest("prompt", "the prompt is empty after tokenization")
	}
	maxTokens := p.maxTokens
	if maxTokens == 0 {
		ctxLen := s.b.ContextLen()
		maxTokens = ctxLen - len(prompt)
		if maxTokens < 1 {
			return engine.Request{}, badRequest("prompt", "the prompt has %d tokens and leaves no room in the %d-token context window", len(prompt), ctxLen)
		}
		if s.opts.MaxTokensCap > 0 && maxTokens > s.opts.MaxTokensCap {
			maxTokens = s.opts.MaxTokensCap
		}
	}
	return engine.Request{
		Prompt:      prompt,
		MaxTokens:   maxTokens,
		Sampling:    p.sampling,
		IgnoreEOS:   p.ignoreEOS,
		Logprobs:    p.logprobs,
		TopLogprobs: p.topLogprobs,
	}, nil
}
