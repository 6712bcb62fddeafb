package server

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"math"
)

// Response shapes of the OpenAI API.

type usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
	// PromptTokensDetails.CachedTokens is the prompt tokens the prefix
	// cache served (OpenAI's field; 0 without a hit).
	PromptTokensDetails promptTokensDetails `json:"prompt_tokens_details"`
}

type promptTokensDetails struct {
	CachedTokens int `json:"cached_tokens"`
}

// jsonNull marshals as null in an `any` field tagged omitempty (a nil `any`
// is omitted instead): stream chunks carry "usage": null when the client
// asked for usage, and no usage field otherwise, as OpenAI does.
var jsonNull = json.RawMessage("null")

type completionResponse struct {
	ID      string             `json:"id"`
	Object  string             `json:"object"`
	Created int64              `json:"created"`
	Model   string             `json:"model"`
	Choices []completionChoice `json:"choices"`
	Usage   any                `json:"usage,omitempty"`
	// SystemFingerprint names the sampling policy version that chose the
	// tokens ("standard@1.0.0+3f2a…"), so swaps are observable.
	SystemFingerprint string `json:"system_fingerprint,omitempty"`
}

type completionChoice struct {
	Index        int                 `json:"index"`
	Text         string              `json:"text"`
	Logprobs     *completionLogprobs `json:"logprobs"`
	FinishReason *string             `json:"finish_reason"`
}

// completionLogprobs is the legacy completions logprobs object. TopLogprobs
// is null when logprobs=0 was asked for. TextOffset counts bytes of the
// choice's text. With echo, a prompt token without a logprob (the first)
// has null in token_logprobs and top_logprobs, as OpenAI sends.
type completionLogprobs struct {
	Tokens        []string             `json:"tokens"`
	TokenLogprobs []*float64           `json:"token_logprobs"`
	TopLogprobs   []map[string]float64 `json:"top_logprobs"`
	TextOffset    []int                `json:"text_offset"`
}

type chatResponse struct {
	ID      string       `json:"id"`
	Object  string       `json:"object"`
	Created int64        `json:"created"`
	Model   string       `json:"model"`
	Choices []chatChoice `json:"choices"`
	Usage   any          `json:"usage,omitempty"`
	// SystemFingerprint: as in completionResponse.
	SystemFingerprint string `json:"system_fingerprint,omitempty"`
}

type chatChoice struct {
	Index        int             `json:"index"`
	Message      *chatMessageOut `json:"message,omitempty"`
	Delta        *chatDelta      `json:"delta,omitempty"`
	Logprobs     *chatLogprobs   `json:"logprobs"`
	FinishReason *string         `json:"finish_reason"`
}

type chatMessageOut struct {
	Role string `json:"role"`
	// Content is null when the reply is only tool calls.
	Content *string `json:"content"`
	// ReasoningContent is the model's reasoning (harmony's analysis
	// channel), the field vLLM, SGLang and OpenRouter use.
	ReasoningContent *string       `json:"reasoning_content,omitempty"`
	ToolCalls        []toolCallOut `json:"tool_calls,omitempty"`
}

type chatDelta struct {
	Role             string          `json:"role,omitempty"`
	Content          *string         `json:"content,omitempty"`
	ReasoningContent *string         `json:"reasoning_content,omitempty"`
	ToolCalls        []toolCallDelta `json:"tool_calls,omitempty"`
}

// toolCallOut is a call in a chat message.
type toolCallOut struct {
	ID       string       `json:"id"`
	Type     string       `json:"type"`
	Function toolFunction `json:"function"`
}

type toolFunction struct {
	Name string `json:"name,omitempty"`
	// Arguments is the arguments' JSON text.
	Arguments string `json:"arguments"`
}

// toolCallDelta is a streamed piece of a call: the first names it (id,
// type, function name, empty arguments), the next carry arguments text.
type toolCallDelta struct {
	Index    int          `json:"index"`
	ID       string       `json:"id,omitempty"`
	Type     string       `json:"type,omitempty"`
	Function toolFunction `json:"function"`
}

type chatLogprobs struct {
	Content []chatTokenLogprob `json:"content"`
}

type chatTokenLogprob struct {
	Token       string           `json:"token"`
	Logprob     float64          `json:"logprob"`
	Bytes       []int            `json:"bytes"`
	TopLogprobs []chatTopLogprob `json:"top_logprobs"`
}

type chatTopLogprob struct {
	Token   string  `json:"token"`
	Logprob float64 `json:"logprob"`
	Bytes   []int   `json:"bytes"`
}

// minLogprob stands in for -Inf and NaN, which JSON cannot carry; OpenAI
// uses the same value for tokens it ruled out.
const minLogprob = -9999.0

func finiteLogprob(lp float32) float64 {
	v := float64(lp)
	if math.IsNaN(v) || math.IsInf(v, 0) || v < minLogprob {
		return minLogprob
	}
	return v
}

func byteInts(b []byte) []int {
	out := make([]int, len(b))
	for i, c := range b {
		out[i] = int(c)
	}
	return out
}

// completionLogprobsFor renders records in the completions shape.
func completionLogprobsFor(tok Tokenizer, recs []tokenRecord, topN int) *completionLogprobs {
	lp := &completionLogprobs{
		Tokens:        make([]string, 0, len(recs)),
		TokenLogprobs: make([]*float64, 0, len(recs)),
		TextOffset:    make([]int, 0, len(recs)),
	}
	if topN > 0 {
		lp.TopLogprobs = make([]map[string]float64, 0, len(recs))
	}
	for _, r := range recs {
		lp.Tokens = append(lp.Tokens, tok.TokenText(r.id))
		lp.TextOffset = append(lp.TextOffset, r.offset)
		if r.noLogprob {
			lp.TokenLogprobs = append(lp.TokenLogprobs, nil)
			if topN > 0 {
				lp.TopLogprobs = append(lp.TopLogprobs, nil)
			}
			continue
		}
		v := finiteLogprob(r.logprob)
		lp.TokenLogprobs = append(lp.TokenLogprobs, &v)
		if topN > 0 {
			top := make(map[string]float64, topN)
			for _, c := range r.top[:min(topN, len(r.top))] {
				top[tok.TokenText(c.Token)] = finiteLogprob(c.Logprob)
			}
			lp.TopLogprobs = append(lp.TopLogprobs, top)
		}
	}
	return lp
}

// chatLogprobsFor renders records in the chat shape.
func chatLogprobsFor(tok Tokenizer, recs []tokenRecord, topN int) *chatLogprobs {
	lp := &chatLogprobs{Content: make([]chatTokenLogprob, 0, len(recs))}
	for _, r := range recs {
		e := chatTokenLogprob{
			Token:       tok.TokenText(r.id),
			Logprob:     finiteLogprob(r.logprob),
			Bytes:       byteInts(tok.TokenBytes(r.id)),
			TopLogprobs: make([]chatTopLogprob, 0, min(topN, len(r.top))),
		}
		for _, c := range r.top[:min(topN, len(r.top))] {
			e.TopLogprobs = append(e.TopLogprobs, chatTopLogprob{
				Token: tok.TokenText(c.Token), Logprob: finiteLogprob(c.Logprob),
				Bytes: byteInts(tok.TokenBytes(c.Token)),
			})
		}
		lp.Content = append(lp.Content, e)
	}
	return lp
}

// newID returns prefix followed by 24 random hex digits.
func newID(prefix string) string {
	var b [12]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return prefix + hex.EncodeToString(b[:])
}
