package synth

import (
	"slices"
	"testing"

	"github.com/kvhost/kvhost/host/model/gguf"
)

// TestGptOSSVocabCarriesHarmony: a gpt-oss model's vocabulary (either
// tokenizer) ends with harmony's seven special tokens, typed control, at
// the preset's size, and its template is gpt-oss's; other architectures'
// vocabularies and templates are unchanged.
func TestGptOSSVocabCarriesHarmony(t *testing.T) {
	for _, tok := range []string{"spm", "bpe"} {
		for _, arch := range []string{"gpt-oss", "gemma2"} {
			s, err := ArchPreset(arch, "tiny", "f32")
			if err != nil {
				t.Fatal(err)
			}
			s.Tokenizer = tok
			kvs, err := tokenizerKVs(s)
			if err != nil {
				t.Fatal(err)
			}
			get := func(key string) gguf.Value {
				for _, kv := range kvs {
					if kv.Key == key {
						return kv.Value
					}
				}
				t.Fatalf("%s/%s: no %s", arch, tok, key)
				return gguf.Value{}
			}
			tokens, _ := get("tokenizer.ggml.tokens").Strings()
			types, _ := get("tokenizer.ggml.token_type").Ints()
			tmpl, _ := get("tokenizer.chat_template").String()
			if len(tokens) != s.Vocab || len(types) != s.Vocab {
				t.Fatalf("%s/%s: %d tokens, %d types; want %d", arch, tok, len(tokens), len(types), s.Vocab)
			}
			tail, tailTypes := tokens[len(tokens)-len(HarmonyTokens):], types[len(types)-len(HarmonyTokens):]
			harmony := slices.Equal(tail, HarmonyTokens) && !slices.ContainsFunc(tailTypes, func(v int64) bool { return v != 3 })
			if want := arch == "gpt-oss"; harmony != want || (tmpl == GptOSSTemplate) != want {
				t.Errorf("%s/%s: harmony tokens %v (tail %q types %v), gpt-oss template %v; want %v", arch, tok, harmony, tail, tailTypes, tmpl == GptOSSTemplate, want)
			}
		}
	}
}
