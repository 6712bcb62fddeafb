package synth

import (
	"testing"

	"github.com/kvhost/kvhost/host/model/tokenizer"
)

// TestBPEVocabEncodes: the generated vocabulary has exactly the asked
// size, every merge joins two earlier pieces, and the tokenizer built
// from it round-trips text with JSON, digits and multi-byte characters in
// fewer tokens than bytes.
func TestBPEVocabEncodes(t *testing.T) {
	for _, size := range []int{5000, 128256} {
		v, err := NewBPEVocab(size)
		if err != nil {
			t.Fatal(err)
		}
		if len(v.Tokens) != size || len(v.Types) != size || v.EOT != size-1 {
			t.Fatalf("size %d: %d tokens, %d types", size, len(v.Tokens), len(v.Types))
		}
		bpe, err := tokenizer.NewBPE(tokenizer.BPEConfig{Tokens: v.Tokens, Types: v.Types, Merges: v.Merges,
			PreTokenizer: tokenizer.PreGPT2, BOS: int32(v.BOS), EOS: int32(v.EOS), ExtraEOG: []int32{int32(v.EOT)}})
		if err != nil {
			t.Fatalf("size %d: %v", size, err)
		}
		text := `{"name": "Ada", "age": 36, "tags": ["x"]} — naïve café 日本語 😀 the quick brown fox 1234`
		ids, err := bpe.Encode(text, false)
		if err != nil {
			t.Fatal(err)
		}
		back, err := bpe.Decode(ids)
		if err != nil || back != text {
			t.Fatalf("size %d: round trip %q (%v)", size, back, err)
		}
		if len(ids) >= len(text)*2/3 {
			t.Errorf("size %d: %d tokens for %d bytes: merges do not apply", size, len(ids), len(text))
		}
		if !bpe.EOG(int32(v.EOT)) || !bpe.EOG(int32(v.EOS)) {
			t.Error("end-of-turn and EOS are not end-of-generation tokens")
		}
	}
}
