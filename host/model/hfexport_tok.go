package model

import (
	"encoding/json"
	"fmt"

	"github.com/kvhost/kvhost/host/model/gguf"
	"github.com/kvhost/kvhost/host/model/tokenizer"
)

// hfTokenizerFiles are tokenizer.json and tokenizer_config.json for a GGUF
// byte-level BPE vocabulary (tokenizer.ggml.model "gpt2" with the GPT-2
// pre-tokenizer): the vocabulary and merges as tokenizers' BPE model,
// control tokens as special added tokens, user-defined ones as plain added
// tokens, GPT-2's ByteLevel pre-tokenizer and decoder, BOS prepended by a
// TemplateProcessing post-processor when the header adds it; the chat
// template and the special tokens in tokenizer_config.json.
func hfTokenizerFiles(f *gguf.File) (tok, cfg []byte, err error) {
	str := func(key string) string {
		v, ok := f.Get(key)
		if !ok {
			return ""
		}
		s, _ := v.String()
		return s
	}
	if m := str("tokenizer.ggml.model"); m != "gpt2" {
		return nil, nil, fmt.Errorf("model: export hf: %s: tokenizer.ggml.model %q: only a byte-level BPE vocabulary (\"gpt2\") has a tokenizer.json kvhost reads; generate the model with --tokenizer bpe", f.Path, m)
	}
	if p := str("tokenizer.ggml.pre"); p != "" && p != "gpt2" {
		return nil, nil, fmt.Errorf("model: export hf: %s: tokenizer.ggml.pre %q: only the GPT-2 pre-tokenizer is exported", f.Path, p)
	}
	tv, _ := f.Get("tokenizer.ggml.tokens")
	tokens, ok := tv.Strings()
	if !ok || len(tokens) == 0 {
		return nil, nil, fmt.Errorf("model: export hf: %s: tokenizer.ggml.tokens is missing", f.Path)
	}
	types := make([]int64, len(tokens))
	if v, ok := f.Get("tokenizer.ggml.token_type"); ok {
		if t, ok := v.Ints(); ok && len(t) == len(tokens) {
			types = t
		}
	}
	var merges []string
	if v, ok := f.Get("tokenizer.ggml.merges"); ok {
		merges, _ = v.Strings()
	}
	if merges == nil {
		merges = []string{}
	}
	vocab := make(map[string]int, len(tokens))
	type added struct {
		ID         int    `json:"id"`
		Content    string `json:"content"`
		SingleWord bool   `json:"single_word"`
		LStrip     bool   `json:"lstrip"`
		RStrip     bool   `json:"rstrip"`
		Normalized bool   `json:"normalized"`
		Special    bool   `json:"special"`
	}
	addedTokens := []added{}
	decoder := map[string]any{}
	for id, t := range tokens {
		if _, dup := vocab[t]; dup {
			return nil, nil, fmt.Errorf("model: export hf: %s: token %q appears twice in tokenizer.ggml.tokens", f.Path, t)
		}
		vocab[t] = id
		switch int32(types[id]) {
		case tokenizer.TypeControl:
			addedTokens = append(addedTokens, added{ID: id, Content: t, Special: true})
			decoder[fmt.Sprint(id)] = map[string]any{"content": t, "lstrip": false, "normalized": false, "rstrip": false, "single_word": false, "special": true}
		case tokenizer.TypeUserDefined:
			addedTokens = append(addedTokens, added{ID: id, Content: t, Normalized: false})
			decoder[fmt.Sprint(id)] = map[string]any{"content": t, "lstrip": false, "normalized": false, "rstrip": false, "single_word": false, "special": false}
		}
	}
	name := func(key string) any {
		if id := tokenID(f, key); id >= 0 && id < len(tokens) {
			return tokens[id]
		}
		return nil
	}
	bos := name("tokenizer.ggml.bos_token_id")
	addBOS := false
	if v, ok := f.Get("tokenizer.ggml.add_bos_token"); ok {
		addBOS, _ = v.Bool()
	}
	var post any
	if addBOS && bos != nil {
		b := bos.(string)
		post = map[string]any{
			"type":   "TemplateProcessing",
			"single": []any{map[string]any{"SpecialToken": map[string]any{"id": b, "type_id": 0}}, map[string]any{"Sequence": map[string]any{"id": "A", "type_id": 0}}},
			"pair": []any{map[string]any{"SpecialToken": map[string]any{"id": b, "type_id": 0}}, map[string]any{"Sequence": map[string]any{"id": "A", "type_id": 0}},
				map[string]any{"SpecialToken": map[string]any{"id": b, "type_id": 1}}, map[string]any{"Sequence": map[string]any{"id": "B", "type_id": 1}}},
			"special_tokens": map[string]any{b: map[string]any{"id": b, "ids": []int{tokenID(f, "tokenizer.ggml.bos_token_id")}, "tokens": []string{b}}},
		}
	}
	byteLevel := map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true}
	t := map[string]any{
		"version": "1.0", "truncation": nil, "padding": nil, "added_tokens": addedTokens, "normalizer": nil,
		"pre_tokenizer": byteLevel, "post_processor": post, "decoder": byteLevel,
		"model": map[string]any{"type": "BPE", "dropout": nil, "unk_token": nil, "continuing_subword_prefix": nil,
			"end_of_word_suffix": nil, "fuse_unk": false, "byte_fallback": false, "ignore_merges": false,
			"vocab": vocab, "merges": merges},
	}
	if tok, err = json.Marshal(t); err != nil {
		return nil, nil, err
	}
	c := map[string]any{
		"tokenizer_class": "PreTrainedTokenizerFast", "add_bos_token": addBOS, "add_eos_token": false,
		"bos_token": bos, "eos_token": name("tokenizer.ggml.eos_token_id"), "pad_token": nil, "unk_token": nil,
		"model_max_length": 1 << 30, "clean_up_tokenization_spaces": false, "added_tokens_decoder": decoder,
	}
	if tmpl := str("tokenizer.chat_template"); tmpl != "" {
		c["chat_template"] = tmpl
	}
	cfg, err = json.MarshalIndent(c, "", "  ")
	return tok, cfg, err
}
