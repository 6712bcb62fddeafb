package engine

import (
	"errors"
	"fmt"
	"time"

	"github.com/kvhost/kvhost/host/constraint"
	"github.com/kvhost/kvhost/host/sampling"
)

// SamplingParams are a request's sampling knobs: temperature (0 is
// greedy: an argmax after penalties and bias), top-k/top-p/min-p,
// frequency/presence/repetition penalties, logit bias and seed, as
// validated by sampling.Request.Validate. host/sampling owns their
// meaning and their mapping onto policies (sampling.Registry.Compile).
type SamplingParams = sampling.Request

// Request is one generation: a tokenized prompt and how to continue it.
type Request struct {
	Prompt    []int32
	MaxTokens int // new tokens to generate at most; must be >= 1
	Sampling  SamplingParams
	// StopTokens end generation when sampled, in addition to the model's
	// end-of-generation tokens (unless IgnoreEOS).
	StopTokens []int32
	IgnoreEOS  bool
	// Logprobs asks for the chosen token's logprob and the TopLogprobs best
	// alternatives at every generated position (0..20).
	Logprobs    bool
	TopLogprobs int
	// PromptLogprobs asks for the logprob of each prompt token from index
	// PromptLogprobStart on (index 0 has none: nothing predicts it), with
	// PromptTopLogprobs alternatives. Their logits are computed chunk by
	// chunk during prefill and delivered on the first event.
	// Sampler names a sampling policy plugin ("" means the engine's
	// default) and SamplerParams its compiled parameters
	// (sampling.Registry.Compile of Sampling; the server compiles once to
	// answer a 400 before admission, else the engine compiles at Submit).
	// Both are used only when the engine has a sampler registry; a request
	// sampling.UsesPolicy says needs none is sampled on the host.
	Sampler       string
	SamplerParams *sampling.Compiled
	// Constraint, when set, restricts the output to what it allows
	// (structured output, tool calls): Config.Constraints runs it, and
	// its mask applies before any sampling step reads the logits.
	Constraint *constraint.Spec

	// N is the number of choices (0 means 1). They share the prompt's KV
	// pages, copy-on-write, and each samples with its own stream (seed+i).
	N int

	PromptLogprobs     bool
	PromptLogprobStart int
	PromptTopLogprobs  int

	// Embed asks for the prompt's final hidden states instead of new
	// tokens: the prompt is prefilled (chunked, batched with the rest) and
	// the stream's one event is Done with FinishReason "embed" and Hidden
	// set. MaxTokens must be 0, and the sampling, logprob and N fields
	// unset; the prompt may fill the whole context.
	Embed bool
}

// PromptLogprob is the logprob of prompt token Index given the tokens
// before it.
type PromptLogprob struct {
	Index   int
	Token   int32
	Logprob float32
	Top     []TokenLogprob
}

// TokenLogprob is one candidate at one position.
type TokenLogprob struct {
	Token   int32
	Logprob float32
}

// Event is one step of a stream: a token, or the end (Done) with its reason
// ("stop": end-of-generation or stop token, "length": max_tokens or context),
// or a failure (Err, which also ends the stream).
type Event struct {
	// Choice is the index (0..N-1) of the choice this event belongs to.
	Choice int
	Token  int32
	// SamplerVersion names the policy version that chose Token
	// ("name@version+sha"), empty for the host's greedy argmax.
	SamplerVersion string
	Logprob        float32
	TopLogprobs    []TokenLogprob
	// Prompt carries the prompt's logprobs on the first event when asked.
	Prompt       []PromptLogprob
	Done         bool
	FinishReason string
	Err          error
	// PromptTokens and CompletionTokens are set on the final event.
	PromptTokens     int
	CompletionTokens int
	// CachedTokens (final event) is the prompt tokens served from the
	// prefix cache at admission (usage's prompt_tokens_details.cached_tokens).
	CachedTokens int
	// Queue is set on a request's first event: the time from Submit until
	// the scheduler first ran it (vLLM's queue time).
	Queue time.Duration
	// Hidden is an Embed request's result on its final event: the
	// output-normed final hidden state of every prompt token,
	// PromptTokens × the model's hidden size.
	Hidden []float32
}

// Stream delivers a request's events in order; with N choices each choice
// ends with its own final event (Done or Err) and the channel closes after
// the last of them. Cancelling the context passed to Submit ends the
// request and frees its KV pages.
type Stream struct {
	Events <-chan Event
}

// Typed errors the server maps to HTTP statuses.
var (
	// ErrQueueFull: admission refused because the waiting queue is at its limit (429).
	ErrQueueFull = errors.New("engine: request queue is full")
	// ErrShuttingDown: the engine no longer admits requests (503).
	ErrShuttingDown = errors.New("engine: shutting down")
)

// InvalidRequestError is a request the engine can never serve as given (400),
// e.g. a prompt longer than the context window.
type InvalidRequestError struct {
	Field   string
	Problem string
}

func (e *InvalidRequestError) Error() string {
	return fmt.Sprintf("engine: invalid %s: %s", e.Field, e.Problem)
}
