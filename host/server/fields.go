package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
)

// Which request object a field row applies to.
type fieldScope uint8

const (
	inCompletions     fieldScope = 1 << iota // POST /v1/completions
	inChat                                   // POST /v1/chat/completions
	inGenerate                               // POST /generate, top level
	inSamplingParams                         // POST /generate, sampling_params
	inStreamOptions                          // stream_options of the OpenAI routes
	inOpenAI          = inCompletions | inChat
	inOpenAIAndNative = inOpenAI | inSamplingParams
)

// unsupportedField is a field of the OpenAI API, or one vLLM or SGLang
// add, that kvhost does not implement yet. A body may send it only with
// a value that asks for nothing: null or one of neutral (the API's default
// or "off" value, as JSON). Any other value is a 400 naming the field.
type unsupportedField struct {
	name    string
	scope   fieldScope
	what    string   // what the field asks for
	neutral []string // JSON values accepted besides null
}

// unsupportedFields is the one table of refused fields. Implementing a
// field means adding it to the request struct and deleting its row here
// (a test fails while both exist).
var unsupportedFields = []unsupportedField{
	// OpenAI.
	{"audio", inChat, "audio output", nil},
	{"best_of", inCompletions, "best-of-n ranking", []string{`1`}},
	{"function_call", inChat, "function calling", []string{`"none"`}},
	{"functions", inChat, "function calling", nil},
	{"modalities", inChat, "output modalities other than text", []string{`["text"]`}},
	{"prediction", inChat, "predicted outputs", nil},
	{"service_tier", inOpenAI, "service tiers (kvhost has one)", []string{`"auto"`, `"default"`}},
	{"store", inChat, "storing completions", []string{`false`}},
	{"suffix", inCompletions, "text after the insertion point", []string{`""`}},
	{"verbosity", inChat, "output verbosity", []string{`"medium"`}},
	{"web_search_options", inChat, "web search", nil},
	{"include_obfuscation", inStreamOptions, "stream obfuscation padding", []string{`false`}},
	// vLLM.
	{"allowed_token_ids", inOpenAI, "a token allow-list", nil},
	{"bad_words", inOpenAI, "banned words", []string{`[]`}},
	{"cache_salt", inOpenAI, "prefix-cache isolation", nil},
	{"chat_template", inChat, "a per-request chat template", nil},
	{"chat_template_kwargs", inChat, "chat template arguments", []string{`{}`}},
	{"continue_final_message", inChat, "continuing the last message", []string{`false`}},
	{"add_generation_prompt", inChat, "rendering without the generation prompt", []string{`true`}},
	{"add_special_tokens", inChat, "special tokens around the rendered chat", []string{`false`}},
	{"add_special_tokens", inCompletions, "a prompt without special tokens", []string{`true`}},
	{"documents", inChat, "documents for the chat template", nil},
	{"echo", inChat, "echoing the last message", []string{`false`}},
	{"guided_decoding_backend", inOpenAI, "structured output", nil},
	{"guided_whitespace_pattern", inOpenAI, "structured output", nil},
	{"include_stop_str_in_output", inOpenAI, "keeping the stop string", []string{`false`}},
	{"kv_transfer_params", inOpenAI, "KV transfer", nil},
	{"length_penalty", inOpenAI, "beam search", []string{`1`}},
	{"logits_processors", inOpenAI, "custom logits processors", nil},
	{"min_tokens", inOpenAI, "a minimum length: end-of-sequence suppression", []string{`0`}},
	{"mm_processor_kwargs", inChat, "multimodal input", nil},
	{"priority", inOpenAI, "request priorities", []string{`0`}},
	{"prompt_embeds", inCompletions, "embedding prompts", nil},
	{"prompt_logprobs", inOpenAI, "vLLM-style prompt logprobs (use echo with logprobs)", nil},
	{"request_id", inOpenAI, "caller-chosen request ids", nil},
	{"return_token_ids", inOpenAI, "token ids in the response", []string{`false`}},
	{"return_tokens_as_token_ids", inOpenAI, "token ids in logprobs", []string{`false`}},
	{"skip_special_tokens", inOpenAIAndNative, "special tokens in the text", []string{`true`}},
	{"spaces_between_special_tokens", inOpenAIAndNative, "detokenizer spacing", []string{`true`}},
	{"truncate_prompt_tokens", inOpenAI, "prompt truncation", nil},
	{"use_beam_search", inOpenAI, "beam search", []string{`false`}},
	{"vllm_xargs", inOpenAI, "vLLM extension arguments", nil},
	// SGLang (OpenAI routes, /generate and its sampling_params).
	{"bootstrap_host", inOpenAI | inGenerate, "prefill/decode disaggregation", nil},
	{"bootstrap_port", inOpenAI | inGenerate, "prefill/decode disaggregation", nil},
	{"bootstrap_room", inOpenAI | inGenerate, "prefill/decode disaggregation", nil},
	{"custom_logit_processor", inOpenAI | inGenerate, "custom logit processors", nil},
	{"custom_params", inOpenAIAndNative, "custom logit processor parameters", nil},
	{"structural_tag", inSamplingParams, "structured output", nil},
	{"lora_path", inOpenAI | inGenerate, "LoRA adapters", nil},
	{"min_new_tokens", inSamplingParams, "a minimum length: end-of-sequence suppression", []string{`0`}},
	{"no_stop_trim", inOpenAIAndNative, "keeping the stop string", []string{`false`}},
	{"return_hidden_states", inOpenAI | inGenerate, "hidden states", []string{`false`}},
	{"rid", inOpenAI | inGenerate, "caller-chosen request ids", nil},
	{"session_params", inOpenAI | inGenerate, "sessions", nil},
	{"stream_interval", inSamplingParams, "batched stream chunks", []string{`1`}},
	{"audio_data", inGenerate, "audio input", nil},
	{"image_data", inGenerate, "image input", nil},
	{"video_data", inGenerate, "video input", nil},
	{"input_embeds", inGenerate, "embedding prompts", nil},
	{"token_ids_logprob", inGenerate, "logprobs of chosen token ids", nil},
	{"data_parallel_rank", inGenerate, "data-parallel routing", nil},
	{"modalities", inGenerate, "multimodal input", nil},
}

// informationalFields are accepted with any value and change nothing kvhost
// produces: they describe the caller or the request for bookkeeping.
var informationalFields = []struct {
	name  string
	scope fieldScope
}{
	{"user", inOpenAI},              // the end user, for abuse monitoring
	{"metadata", inOpenAI},          // key/value tags for stored completions
	{"safety_identifier", inOpenAI}, // OpenAI's successor to user
	{"prompt_cache_key", inOpenAI},  // a cache-routing hint; kvhost has one cache
	{"log_metrics", inGenerate},     // SGLang: per-request metric logging
}

// fieldPolicy is what one request object (scope) accepts.
type fieldPolicy struct {
	prefix      string // how messages name its fields ("sampling_params.")
	known       []string
	accepted    map[string]bool // implemented or informational
	unsupported map[string]*unsupportedField
	neutral     map[string][]any // decoded neutral values
}

// newFieldPolicy builds scope's policy; body is the struct its fields
// unmarshal into (every json tag, embedded structs included, is known).
func newFieldPolicy(scope fieldScope, prefix string, body any) *fieldPolicy {
	p := &fieldPolicy{prefix: prefix, accepted: map[string]bool{}, unsupported: map[string]*unsupportedField{}, neutral: map[string][]any{}}
	for _, name := range jsonFields(reflect.TypeOf(body)) {
		p.accepted[name] = true
		p.known = append(p.known, name)
	}
	for _, f := range informationalFields {
		if f.scope&scope != 0 {
			p.accepted[f.name] = true
			p.known = append(p.known, f.name)
		}
	}
	slices.Sort(p.known)
	for i := range unsupportedFields {
		f := &unsupportedFields[i]
		if f.scope&scope == 0 {
			continue
		}
		if p.accepted[f.name] || p.unsupported[f.name] != nil {
			panic(fmt.Sprintf("server: field %q is both implemented and refused (or refused twice)", f.name))
		}
		p.unsupported[f.name] = f
		for _, n := range f.neutral {
			var v any
			if err := json.Unmarshal([]byte(n), &v); err != nil {
				panic(fmt.Sprintf("server: field %q: neutral value %s: %v", f.name, n, err))
			}
			p.neutral[f.name] = append(p.neutral[f.name], v)
		}
	}
	return p
}

var (
	completionFields     = newFieldPolicy(inCompletions, "", completionRequest{})
	chatFields           = newFieldPolicy(inChat, "", chatRequest{})
	streamOptionFields   = newFieldPolicy(inStreamOptions, "stream_options.", streamOptions{})
	generateFields       = newFieldPolicy(inGenerate, "", generateRequest{})
	samplingParamsFields = newFieldPolicy(inSamplingParams, "sampling_params.", generateSampler{})
)

// bodyPolicies caches bodyFields by type.
var bodyPolicies sync.Map // reflect.Type → *fieldPolicy

// bodyFields is the policy of a body outside the table's scopes (the
// /tokenize, /detokenize and /v1/embeddings bodies, dst a pointer to it):
// its own fields, and a 400 for any other.
func bodyFields(dst any) *fieldPolicy {
	t := reflect.TypeOf(dst).Elem()
	if p, ok := bodyPolicies.Load(t); ok {
		return p.(*fieldPolicy)
	}
	p, _ := bodyPolicies.LoadOrStore(t, newFieldPolicy(0, "", reflect.New(t).Elem().Interface()))
	return p.(*fieldPolicy)
}

// check refuses a field of obj this policy does not accept: a 400 naming
// it, with code "unsupported_parameter" for a field the table says kvhost
// does not implement yet and "unknown_parameter" for one no API defines.
// nested (field name → policy) checks objects inside obj the same way.
func (p *fieldPolicy) check(obj map[string]json.RawMessage, nested map[string]*fieldPolicy) error {
	names := make([]string, 0, len(obj))
	for k := range obj {
		names = append(names, k)
	}
	slices.Sort(names) // report the first bad field deterministically
	for _, k := range names {
		raw := bytes.TrimSpace(obj[k])
		if p.accepted[k] {
			if np := nested[k]; np != nil && len(raw) > 0 && raw[0] == '{' {
				var inner map[string]json.RawMessage
				if err := json.Unmarshal(raw, &inner); err != nil {
					return badRequest(p.prefix+k, "%v", err)
				}
				if err := np.check(inner, nil); err != nil {
					return err
				}
			}
			continue
		}
		field := p.prefix + k
		f := p.unsupported[k]
		if f == nil {
			return &requestError{Param: field, Code: "unknown_parameter",
				Message: fmt.Sprintf("unknown field %q (known: %s)", field, strings.Join(p.known, ", "))}
		}
		if p.isNeutral(k, raw) {
			continue
		}
		allowed := append([]string{"null"}, f.neutral...)
		return &requestError{Param: field, Code: "unsupported_parameter",
			Message: fmt.Sprintf("kvhost does not support %s yet (%s); omit it or send %s", field, f.what, strings.Join(allowed, " or "))}
	}
	return nil
}

func (p *fieldPolicy) isNeutral(name string, raw []byte) bool {
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return false
	}
	if v == nil {
		return true
	}
	for _, n := range p.neutral[name] {
		if reflect.DeepEqual(v, n) {
			return true
		}
	}
	return false
}

// checkFields refuses fields p does not accept in body (a JSON object;
// anything else is left for json.Unmarshal to name).
func checkFields(body []byte, p *fieldPolicy, nested map[string]*fieldPolicy) error {
	b := bytes.TrimSpace(body)
	if len(b) == 0 || b[0] != '{' {
		return nil
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(b, &obj); err != nil {
		return nil // json.Unmarshal into the request names it
	}
	return p.check(obj, nested)
}

// jsonFields lists the JSON names of t's fields, embedded structs'
// included.
func jsonFields(t reflect.Type) []string {
	var out []string
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch {
		case name == "-":
		case f.Anonymous && name == "" && f.Type.Kind() == reflect.Struct:
			out = append(out, jsonFields(f.Type)...)
		case name != "":
			out = append(out, name)
		case f.IsExported():
			out = append(out, f.Name)
		}
	}
	return out
}
