package model

import (
	"testing"

	"github.com/kvhost/kvhost/host/model/synth"
	"github.com/kvhost/kvhost/host/model/tokenizer"
)

// TestHarmonyTokensLoad: a generated gpt-oss model, as GGUF and as its
// Hugging Face export, loads with gpt-oss's template and harmony's special
// tokens as single control ids that render text in no output; <|return|>
// and <|call|> end generation, <|end|> does not (it closes the analysis
// message before the answer).
func TestHarmonyTokensLoad(t *testing.T) {
	path := writeBPE(t, "gpt-oss", "tiny")
	for name, p := range map[string]string{"gguf": path, "hf": exportHF(t, path)} {
		r := load(t, p, 4)
		if r.m.ChatTemplate != synth.GptOSSTemplate {
			t.Fatalf("%s: the chat template is not gpt-oss's", name)
		}
		tok := r.m.Tokenizer.(interface {
			tokenizer.Tokenizer
			EncodeWithOptions(string, tokenizer.EncodeOptions) ([]int32, error)
		})
		for _, m := range synth.HarmonyTokens {
			ids, err := tok.EncodeWithOptions(m, tokenizer.EncodeOptions{ParseSpecial: true})
			if err != nil || len(ids) != 1 || len(tok.TokenBytes(ids[0])) != 0 || tok.TokenText(ids[0]) != m {
				t.Fatalf("%s: %s encodes to %v (%v); want one control token", name, m, ids, err)
			}
			if eog := m == "<|return|>" || m == "<|call|>"; tok.EOG(ids[0]) != eog {
				t.Errorf("%s: %s EOG %v, want %v", name, m, tok.EOG(ids[0]), eog)
			}
		}
	}
}
