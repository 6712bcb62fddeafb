package tokenizer

import (
	"math/rand"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestCompleteUpTo(t *testing.T) {
	tests := []struct {
		in   string
		want int
	}{
		{"", 0},
		{"abc", 3},
		{"a\xe6\x97", 1},        // 日 missing its last byte
		{"\xe6\x97\xa5", 3},     // 日 complete
		{"\xf0\x9f\x98", 0},     // 😀 missing one byte
		{"x\xf0", 1},            // lone 4-byte lead
		{"\xff", 1},             // never valid: emit
		{"\xe0\x80", 2},         // invalid second byte: emit
		{"\x80\x80\x80", 3},     // stray continuations: emit
		{"ab\xc3", 2},           // é missing a byte
		{"\xf0\x9f\x98\x80", 4}, // complete
	}
	for _, tt := range tests {
		if got := completeUpTo([]byte(tt.in)); got != tt.want {
			t.Errorf("completeUpTo(%q) = %d, want %d", tt.in, got, tt.want)
		}
	}
}

func streamAll(tok Tokenizer, prompt, ids []int32) (string, []string) {
	sd := NewStreamDecoder(tok, prompt)
	var parts []string
	for _, id := range ids {
		parts = append(parts, sd.Add(id))
	}
	parts = append(parts, sd.Flush())
	return strings.Join(parts, ""), parts
}

// randomIDs mixes arbitrary vocabulary ids with encodings of text whose
// characters fall back to byte tokens.
func randomIDs(t *testing.T, rng *rand.Rand, tok Tokenizer, valid bool) []int32 {
	var ids []int32
	for len(ids) < 40 {
		if !valid && rng.Intn(3) == 0 {
			ids = append(ids, int32(rng.Intn(tok.VocabSize())))
			continue
		}
		enc, err := tok.Encode(randomText(rng, 1+rng.Intn(6)), rng.Intn(2) == 0)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, enc...)
	}
	return ids
}

func streamTokenizers(t *testing.T) map[string]Tokenizer {
	toks := map[string]Tokenizer{"bpe": handBPE(t, PreLlama3), "spm-synthetic": synthSPM(t)}
	if _, err := findShared(); err == nil {
		toks["spm-stories"] = storiesSPM(t)
	}
	return toks
}

func TestStreamDecoderEqualsDecode(t *testing.T) {
	rng := rand.New(rand.NewSource(3))
	for name, tok := range streamTokenizers(t) {
		for i := 0; i < 300; i++ {
			valid := i%2 == 0
			ids := randomIDs(t, rng, tok, valid)
			want, err := tok.Decode(ids)
			if err != nil {
				t.Fatal(err)
			}
			got, parts := streamAll(tok, nil, ids)
			if got != want {
				t.Fatalf("%s: stream %q != Decode %q for %v", name, got, want, ids)
			}
			if valid {
				for _, p := range parts {
					if !utf8.ValidString(p) {
						t.Fatalf("%s: Add returned a partial character %q for %v", name, p, ids)
					}
				}
			}
			// with a prompt that produced text, the generated part keeps its leading space
			cut := rng.Intn(len(ids))
			pre, err := tok.Decode(ids[:cut])
			if err != nil {
				t.Fatal(err)
			}
			if got, _ := streamAll(tok, ids[:cut], ids[cut:]); pre+got != want {
				t.Fatalf("%s: prompt %q + stream %q != Decode %q", name, pre, got, want)
			}
		}
	}
}

func TestStreamDecoderHoldsBytes(t *testing.T) {
	s := synthSPM(t)
	ids, err := s.Encode("日x", false) // ▁ then three byte tokens, then x
	if err != nil {
		t.Fatal(err)
	}
	sd := NewStreamDecoder(s, []int32{s.BOS()})
	var outs []string
	for _, id := range ids {
		outs = append(outs, sd.Add(id))
	}
	want := []string{"", "", "", "日", "x"}
	if strings.Join(outs, "|") != strings.Join(want, "|") {
		t.Fatalf("Add outputs %q, want %q (ids %v)", outs, want, ids)
	}
	if f := sd.Flush(); f != "" {
		t.Fatalf("Flush = %q", f)
	}
	sd.Add(s.byteTok[0xE6])
	if f := sd.Flush(); f != "\xe6" {
		t.Fatalf("Flush of an incomplete character = %q", f)
	}
}
