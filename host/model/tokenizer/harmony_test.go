package tokenizer

import "testing"

// TestHarmonyEndIsNotEOG: a vocabulary with harmony's <|return|>, <|call|>
// and <|end|> (gpt-oss) ends generation on the first two only — <|end|>
// closes the analysis message before the final answer — while <|end|>
// alone (Phi-3's end of turn) stays an EOG token. As in llama.cpp, this
// holds even when the file names <|end|> its end-of-turn token.
func TestHarmonyEndIsNotEOG(t *testing.T) {
	var extra []int32
	build := func(specials ...string) *SentencePiece {
		toks := []string{"<unk>", "<s>", "</s>", "a"}
		types := []int32{TypeUnknown, TypeControl, TypeControl, TypeNormal}
		for _, s := range specials {
			toks, types = append(toks, s), append(types, TypeControl)
		}
		s, err := NewSentencePiece(SPMConfig{Tokens: toks, Scores: make([]float32, len(toks)), Types: types, BOS: 1, EOS: 2, UNK: 0, ExtraEOG: extra})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	h := build("<|start|>", "<|end|>", "<|message|>", "<|channel|>", "<|return|>", "<|call|>")
	for id, want := range map[int32]bool{2: true, 4: false, 5: false, 8: true, 9: true} {
		if got := h.EOG(id); got != want {
			t.Errorf("harmony vocabulary: EOG(%d %q) = %v, want %v", id, h.TokenText(id), got, want)
		}
	}
	extra = []int32{5} // a file naming <|end|> its end-of-turn token
	if h := build("<|start|>", "<|end|>", "<|message|>", "<|channel|>", "<|return|>", "<|call|>"); h.EOG(5) {
		t.Errorf("harmony vocabulary: <|end|> named the end-of-turn token must still not end generation")
	}
	extra = nil
	if p := build("<|end|>"); !p.EOG(4) {
		t.Errorf("<|end|> without <|return|> and <|call|> must stay EOG")
	}
	if p := build("<|end|>", "<|return|>"); !p.EOG(4) {
		t.Errorf("<|end|> with <|return|> but no <|call|> must stay EOG")
	}
}
