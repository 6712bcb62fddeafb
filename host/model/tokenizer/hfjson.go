package tokenizer

import (
	"bytes"
	"encoding/json"
	"fmt"
)

type hfFile struct {
	AddedTokens []struct {
		ID      int64  `json:"id"`
		Content string `json:"content"`
		Special bool   `json:"special"`
	} `json:"added_tokens"`
	Normalizer    *hfNormalizer   `json:"normalizer"`
	PreTokenizer  *hfPre          `json:"pre_tokenizer"`
	PostProcessor json.RawMessage `json:"post_processor"`
	Model         struct {
		Type         string            `json:"type"`
		Vocab        map[string]int64  `json:"vocab"`
		Merges       []json.RawMessage `json:"merges"`
		IgnoreMerges bool              `json:"ignore_merges"`
	} `json:"model"`
}

type hfNormalizer struct {
	Type string `json:"type"`
}

type hfPre struct {
	Type           string `json:"type"`
	AddPrefixSpace bool   `json:"add_prefix_space"`
	UseRegex       *bool  `json:"use_regex"`
	Pattern        *struct {
		Regex  *string `json:"Regex"`
		String *string `json:"String"`
	} `json:"pattern"`
	Behavior      string   `json:"behavior"`
	Invert        bool     `json:"invert"`
	Pretokenizers []*hfPre `json:"pretokenizers"`
}

type hfPost struct {
	Type   string `json:"type"`
	Single []struct {
		SpecialToken *struct {
			ID string `json:"id"`
		} `json:"SpecialToken"`
	} `json:"single"`
	Processors []json.RawMessage `json:"processors"`
}

type hfConfig struct {
	BOS    json.RawMessage `json:"bos_token"`
	EOS    json.RawMessage `json:"eos_token"`
	AddBOS *bool           `json:"add_bos_token"`
	AddEOS *bool           `json:"add_eos_token"`
}

// FromHFJSON builds a byte-level BPE tokenizer from a Hugging Face
// tokenizer.json and (optionally, may be nil) tokenizer_config.json.
// Supported: model.type "BPE" with byte-level pre-tokenization by the GPT-2,
// Llama-3 or Qwen2 regex; merges as "a b" strings or [a, b] pairs; added
// tokens (special → control, others → user-defined). An NFC normalizer is
// accepted but not applied (as llama.cpp); anything else is ErrUnsupported.
func FromHFJSON(tokenizerJSON []byte, tokenizerConfigJSON []byte) (Tokenizer, error) {
	var f hfFile
	if err := json.Unmarshal(tokenizerJSON, &f); err != nil {
		return nil, fmt.Errorf("tokenizer: parse tokenizer.json: %w", err)
	}
	if f.Model.Type != "BPE" {
		return nil, fmt.Errorf("%w: model.type %q (only \"BPE\" is implemented)", ErrUnsupported, f.Model.Type)
	}
	if f.Normalizer != nil && f.Normalizer.Type != "NFC" {
		return nil, fmt.Errorf("%w: normalizer %q", ErrUnsupported, f.Normalizer.Type)
	}
	pre, err := hfPreTokenizer(f.PreTokenizer)
	if err != nil {
		return nil, err
	}
	tokens, types, err := hfVocab(&f)
	if err != nil {
		return nil, err
	}
	pairs := make([][2]string, len(f.Model.Merges))
	for i, raw := range f.Model.Merges {
		if pairs[i], err = hfMerge(raw); err != nil {
			return nil, fmt.Errorf("%w: model.merges[%d]: %v", ErrInvalidConfig, i, err)
		}
	}
	cfg := BPEConfig{Tokens: tokens, Types: types, PreTokenizer: pre, BOS: -1, EOS: -1,
		IgnoreMerges: f.Model.IgnoreMerges}
	if err := hfSpecials(&cfg, tokenizerConfigJSON, f.PostProcessor); err != nil {
		return nil, err
	}
	return newBPE(cfg, pairs)
}

func hfVocab(f *hfFile) ([]string, []int32, error) {
	size := int64(0)
	check := func(what string, id int64) error {
		if id < 0 || id >= MaxVocab {
			return fmt.Errorf("%w: %s id %d out of range [0, %d)", ErrInvalidConfig, what, id, MaxVocab)
		}
		size = max(size, id+1)
		return nil
	}
	for text, id := range f.Model.Vocab {
		if err := check(fmt.Sprintf("model.vocab %q", text), id); err != nil {
			return nil, nil, err
		}
	}
	for _, a := range f.AddedTokens {
		if err := check(fmt.Sprintf("added token %q", a.Content), a.ID); err != nil {
			return nil, nil, err
		}
	}
	if size == 0 {
		return nil, nil, fmt.Errorf("%w: tokenizer.json has an empty vocabulary", ErrInvalidConfig)
	}
	// Real vocabularies are dense; a few entries with huge ids would
	// otherwise make us allocate millions of empty slots.
	if entries := int64(len(f.Model.Vocab) + len(f.AddedTokens)); size > 2*entries+1024 {
		return nil, nil, fmt.Errorf("%w: ids reach %d but only %d tokens are defined; the vocabulary must be dense", ErrInvalidConfig, size-1, entries)
	}
	tokens := make([]string, size)
	types := make([]int32, size)
	set := make([]bool, size)
	for i := range types {
		types[i] = TypeUnused
	}
	put := func(id int64, text string, ty int32) error {
		if set[id] && tokens[id] != text {
			return fmt.Errorf("%w: id %d is both %q and %q", ErrInvalidConfig, id, tokens[id], text)
		}
		tokens[id], types[id], set[id] = text, ty, true
		return nil
	}
	for text, id := range f.Model.Vocab {
		if err := put(id, text, TypeNormal); err != nil {
			return nil, nil, err
		}
	}
	for _, a := range f.AddedTokens {
		ty := TypeUserDefined
		if a.Special {
			ty = TypeControl
		}
		if err := put(a.ID, a.Content, ty); err != nil {
			return nil, nil, err
		}
	}
	return tokens, types, nil
}

func hfMerge(raw json.RawMessage) ([2]string, error) {
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		for k := 1; k < len(s)-1; k++ {
			if s[k] == ' ' {
				return [2]string{s[:k], s[k+1:]}, nil
			}
		}
		return [2]string{}, fmt.Errorf("merge %q is not of the form \"left right\"", s)
	}
	var p []string
	if err := json.Unmarshal(raw, &p); err != nil || len(p) != 2 || p[0] == "" || p[1] == "" {
		return [2]string{}, fmt.Errorf("merge %s is neither \"left right\" nor [left, right]", truncate(raw))
	}
	return [2]string{p[0], p[1]}, nil
}

func truncate(b []byte) string {
	if len(b) > 40 {
		return string(b[:40]) + "..."
	}
	return string(b)
}

// hfPreTokenizer maps the pre_tokenizer tree to one of the known regexes.
func hfPreTokenizer(p *hfPre) (string, error) {
	if p == nil {
		return "", fmt.Errorf("%w: tokenizer.json has no pre_tokenizer (byte-level BPE needs one)", ErrUnsupported)
	}
	list := []*hfPre{p}
	if p.Type == "Sequence" {
		list = p.Pretokenizers
	}
	kind, byteLevel := "", false
	setKind := func(k string) error {
		if kind != "" {
			return fmt.Errorf("%w: pre_tokenizer splits twice (%s then %s)", ErrUnsupported, kind, k)
		}
		kind = k
		return nil
	}
	for _, q := range list {
		if q == nil {
			return "", fmt.Errorf("%w: null pre-tokenizer in sequence", ErrUnsupported)
		}
		switch q.Type {
		case "ByteLevel":
			if q.AddPrefixSpace {
				return "", fmt.Errorf("%w: ByteLevel add_prefix_space", ErrUnsupported)
			}
			byteLevel = true
			if q.UseRegex == nil || *q.UseRegex {
				if err := setKind(PreGPT2); err != nil {
					return "", err
				}
			}
		case "Split":
			if q.Pattern == nil || q.Pattern.Regex == nil || q.Invert || q.Behavior != "Isolated" {
				return "", fmt.Errorf("%w: Split pre-tokenizer other than an isolated regex", ErrUnsupported)
			}
			var k string
			switch *q.Pattern.Regex {
			case regexGPT2:
				k = PreGPT2
			case regexLlama3:
				k = PreLlama3
			case regexQwen2:
				k = PreQwen2
			default:
				return "", fmt.Errorf("%w: Split regex %q (known: GPT-2, Llama-3, Qwen2)", ErrUnsupported, *q.Pattern.Regex)
			}
			if err := setKind(k); err != nil {
				return "", err
			}
		default:
			return "", fmt.Errorf("%w: pre-tokenizer type %q", ErrUnsupported, q.Type)
		}
	}
	if !byteLevel || kind == "" {
		return "", fmt.Errorf("%w: pre_tokenizer is not byte-level with a regex split", ErrUnsupported)
	}
	return kind, nil
}

// hfTokenText reads bos_token/eos_token: null, a string, or {"content": ...}.
func hfTokenText(raw json.RawMessage) (string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var o struct {
		Content string `json:"content"`
	}
	if err := json.Unmarshal(raw, &o); err != nil {
		return "", fmt.Errorf("neither a string nor an object with \"content\": %s", truncate(raw))
	}
	return o.Content, nil
}

// hfSpecials fills BOS/EOS and whether to add them, from tokenizer_config.json
// and, where add_bos_token is absent, the post-processor template (Llama-3
// adds <|begin_of_text|> that way).
func hfSpecials(cfg *BPEConfig, configJSON []byte, post json.RawMessage) error {
	var c hfConfig
	if len(bytes.TrimSpace(configJSON)) > 0 {
		if err := json.Unmarshal(configJSON, &c); err != nil {
			return fmt.Errorf("tokenizer: parse tokenizer_config.json: %w", err)
		}
	}
	ids := make(map[string]int32)
	for i, t := range cfg.Tokens {
		if _, dup := ids[t]; !dup && cfg.Types[i] != TypeUnused {
			ids[t] = int32(i)
		}
	}
	lookup := func(field string, raw json.RawMessage) (int32, error) {
		text, err := hfTokenText(raw)
		if err != nil {
			return -1, fmt.Errorf("%w: tokenizer_config.json %s: %v", ErrInvalidConfig, field, err)
		}
		if text == "" {
			return -1, nil
		}
		id, ok := ids[text]
		if !ok {
			return -1, fmt.Errorf("%w: tokenizer_config.json %s %q is not in the vocabulary", ErrInvalidConfig, field, text)
		}
		return id, nil
	}
	var err error
	if cfg.BOS, err = lookup("bos_token", c.BOS); err != nil {
		return err
	}
	if cfg.EOS, err = lookup("eos_token", c.EOS); err != nil {
		return err
	}
	first, last := templateEnds(post, 0)
	if c.AddBOS != nil {
		cfg.AddBOS = *c.AddBOS
	} else if first != "" {
		if id, ok := ids[first]; ok && (cfg.BOS < 0 || cfg.BOS == id) {
			cfg.BOS, cfg.AddBOS = id, true
		}
	}
	if c.AddEOS != nil {
		cfg.AddEOS = *c.AddEOS
	} else if last != "" && cfg.EOS >= 0 && ids[last] == cfg.EOS {
		cfg.AddEOS = true
	}
	if cfg.AddBOS && cfg.BOS < 0 {
		return fmt.Errorf("%w: add_bos_token is true but bos_token is unset", ErrInvalidConfig)
	}
	if cfg.AddEOS && cfg.EOS < 0 {
		return fmt.Errorf("%w: add_eos_token is true but eos_token is unset", ErrInvalidConfig)
	}
	return nil
}

// templateEnds returns the special tokens at the start and end of a
// TemplateProcessing "single" template, searching Sequence processors.
func templateEnds(raw json.RawMessage, depth int) (first, last string) {
	var p hfPost
	if depth > 8 || len(raw) == 0 || json.Unmarshal(raw, &p) != nil {
		return "", ""
	}
	switch p.Type {
	case "TemplateProcessing":
		if n := len(p.Single); n > 0 {
			if st := p.Single[0].SpecialToken; st != nil {
				first = st.ID
			}
			if st := p.Single[n-1].SpecialToken; st != nil && n > 1 {
				last = st.ID
			}
		}
	case "Sequence":
		for _, q := range p.Processors {
			if f, l := templateEnds(q, depth+1); f != "" || l != "" {
				return f, l
			}
		}
	}
	return first, last
}
