package tokenizer

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
)

func preJSON(kind string) any {
	byteLevel := map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": false}
	re := map[string]string{PreLlama3: regexLlama3, PreQwen2: regexQwen2, PreGPT2: regexGPT2}[kind]
	if kind == "gpt2-bytelevel" {
		return map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true}
	}
	return map[string]any{"type": "Sequence", "pretokenizers": []any{
		map[string]any{"type": "Split", "pattern": map[string]any{"Regex": re}, "behavior": "Isolated", "invert": false},
		byteLevel,
	}}
}

// handTokenizerJSON renders handBPEConfig as a tokenizer.json.
func handTokenizerJSON(t testing.TB, pre any, pairMerges bool, post any) []byte {
	cfg := handBPEConfig(PreGPT2)
	vocab := map[string]int{}
	var added []any
	for i, tok := range cfg.Tokens {
		switch cfg.Types[i] {
		case TypeControl, TypeUserDefined:
			added = append(added, map[string]any{"id": i, "content": tok, "special": cfg.Types[i] == TypeControl,
				"single_word": false, "lstrip": false, "rstrip": false, "normalized": false})
		default:
			vocab[tok] = i
		}
	}
	var merges any = cfg.Merges
	if pairMerges {
		var pairs [][]string
		for _, m := range cfg.Merges {
			pairs = append(pairs, strings.SplitN(m, " ", 2))
		}
		merges = pairs
	}
	doc := map[string]any{
		"version": "1.0", "added_tokens": added, "normalizer": nil, "pre_tokenizer": pre,
		"post_processor": post, "decoder": map[string]any{"type": "ByteLevel"},
		"model": map[string]any{"type": "BPE", "vocab": vocab, "merges": merges, "ignore_merges": false},
	}
	b, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestFromHFJSONMatchesNewBPE(t *testing.T) {
	texts := []string{"Hello the world", "hell lll", " xyz", "Hello<|im_end|><tool> 123456", "naïve 😀\n\n"}
	for _, c := range []struct {
		name, kind string
		pre        any
	}{{"bytelevel regex", PreGPT2, preJSON("gpt2-bytelevel")}, {"gpt2 split", PreGPT2, preJSON(PreGPT2)},
		{"llama3", PreLlama3, preJSON(PreLlama3)}, {"qwen2", PreQwen2, preJSON(PreQwen2)}} {
		for _, pairs := range []bool{false, true} {
			tok, err := FromHFJSON(handTokenizerJSON(t, c.pre, pairs, nil), nil)
			if err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
			want := handBPE(t, c.kind)
			if b := tok.(*BPE); b.pre != c.kind || b.BOS() != -1 || b.EOS() != -1 {
				t.Fatalf("%s: pre %q bos %d eos %d", c.name, b.pre, b.BOS(), b.EOS())
			}
			for _, text := range texts {
				for _, parse := range []bool{false, true} {
					opts := EncodeOptions{ParseSpecial: parse}
					got, err1 := tok.(*BPE).EncodeWithOptions(text, opts)
					exp, err2 := want.EncodeWithOptions(text, opts)
					if err1 != nil || err2 != nil || !reflect.DeepEqual(got, exp) {
						t.Fatalf("%s pairs=%v %q: FromHFJSON %v (%v), NewBPE %v (%v)", c.name, pairs, text, got, err1, exp, err2)
					}
				}
			}
		}
	}
}

func TestFromHFJSONSpecialConfig(t *testing.T) {
	template := map[string]any{"type": "Sequence", "processors": []any{
		map[string]any{"type": "ByteLevel"},
		map[string]any{"type": "TemplateProcessing", "single": []any{
			map[string]any{"SpecialToken": map[string]any{"id": "<|endoftext|>", "type_id": 0}},
			map[string]any{"Sequence": map[string]any{"id": "A", "type_id": 0}},
		}},
	}}
	tests := []struct {
		name           string
		post           any
		config         string
		bos, eos       int32
		addBOS, addEOS bool
	}{
		{"no config", nil, "", -1, -1, false, false},
		{"strings", nil, `{"bos_token":"<|endoftext|>","eos_token":"<|im_end|>","add_bos_token":true}`, idEndOfText, idImEnd, true, false},
		{"objects", nil, `{"bos_token":{"content":"<|endoftext|>","lstrip":false},"eos_token":{"content":"<|im_end|>"},"add_eos_token":true}`, idEndOfText, idImEnd, false, true},
		{"null bos", nil, `{"bos_token":null,"eos_token":"<|im_end|>","add_bos_token":false}`, -1, idImEnd, false, false},
		{"template adds bos", template, `{"bos_token":"<|endoftext|>","eos_token":"<|im_end|>"}`, idEndOfText, idImEnd, true, false},
		{"template without config", template, "", idEndOfText, -1, true, false},
		{"explicit false beats template", template, `{"bos_token":"<|endoftext|>","add_bos_token":false}`, idEndOfText, -1, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tok, err := FromHFJSON(handTokenizerJSON(t, preJSON(PreLlama3), false, tt.post), []byte(tt.config))
			if err != nil {
				t.Fatal(err)
			}
			b := tok.(*BPE)
			if b.BOS() != tt.bos || b.EOS() != tt.eos || b.addBOS != tt.addBOS || b.addEOS != tt.addEOS {
				t.Fatalf("bos %d eos %d addBOS %v addEOS %v", b.BOS(), b.EOS(), b.addBOS, b.addEOS)
			}
			ids, _ := tok.Encode("he", true)
			want := []int32{257}
			if tt.addBOS {
				want = append([]int32{tt.bos}, want...)
			}
			if tt.addEOS {
				want = append(want, tt.eos)
			}
			if !reflect.DeepEqual(ids, want) {
				t.Fatalf("Encode(he, true) = %v, want %v", ids, want)
			}
		})
	}
}

func TestFromHFJSONErrors(t *testing.T) {
	good := string(handTokenizerJSON(t, preJSON(PreLlama3), false, nil))
	tests := []struct {
		name, json, config string
		want               error
	}{
		{"garbage", "{", "", nil},
		{"wordpiece", strings.Replace(good, `"type":"BPE"`, `"type":"WordPiece"`, 1), "", ErrUnsupported},
		{"unknown regex", strings.Replace(good, `\\p{N}{1,3}`, `\\p{N}{1,4}`, 1), "", ErrUnsupported},
		{"no pre-tokenizer", strings.Replace(good, `"pre_tokenizer":{`, `"pre_tokenizer":null,"x":{`, 1), "", ErrUnsupported},
		{"normalizer", strings.Replace(good, `"normalizer":null`, `"normalizer":{"type":"Lowercase"}`, 1), "", ErrUnsupported},
		{"bad merge", strings.Replace(good, `"Ġ t"`, `"Ġt"`, 1), "", ErrInvalidConfig},
		{"negative id", withVocabEntry(t, good, -1), "", ErrInvalidConfig},
		{"huge id", withVocabEntry(t, good, 99999999999), "", ErrInvalidConfig},
		{"sparse ids", withVocabEntry(t, good, 3_000_000), "", ErrInvalidConfig},
		{"id clash", withVocabEntry(t, good, 5), "", ErrInvalidConfig},
		{"unknown bos", good, `{"bos_token":"<nope>"}`, ErrInvalidConfig},
		{"bad bos type", good, `{"bos_token":7}`, ErrInvalidConfig},
		{"add bos without bos", good, `{"add_bos_token":true}`, ErrInvalidConfig},
		{"bad config json", good, `[`, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := FromHFJSON([]byte(tt.json), []byte(tt.config))
			if err == nil {
				t.Fatal("no error")
			}
			if tt.want != nil && !errors.Is(err, tt.want) {
				t.Fatalf("err = %v, want %v", err, tt.want)
			}
			if !strings.HasPrefix(err.Error(), "tokenizer: ") {
				t.Fatalf("error %q lacks the package prefix", err)
			}
		})
	}
}

// withVocabEntry adds the piece "zz" with id to model.vocab.
func withVocabEntry(t *testing.T, doc string, id int64) string {
	var m map[string]any
	if err := json.Unmarshal([]byte(doc), &m); err != nil {
		t.Fatal(err)
	}
	m["model"].(map[string]any)["vocab"].(map[string]any)["zz"] = id
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
