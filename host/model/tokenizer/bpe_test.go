package tokenizer

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

// handMerges builds, on top of the 256 byte symbols (id = byte value), the
// pieces below; merge rank = position in this list, new id = 256 + rank.
var handMerges = []string{
	"Ġ t",     // 0 → 256 Ġt
	"h e",     // 1 → 257 he
	"Ġt he",   // 2 → 258 Ġthe
	"l l",     // 3 → 259 ll
	"e ll",    // 4 → 260 ell
	"H ell",   // 5 → 261 Hell
	"Hell o",  // 6 → 262 Hello
	"Ġ w",     // 7 → 263 Ġw
	"o r",     // 8 → 264 or
	"Ġw or",   // 9 → 265 Ġwor
	"l d",     // 10 → 266 ld
	"Ġwor ld", // 11 → 267 Ġworld
}

// Ids after the merged pieces.
const (
	idEndOfText = 268 // <|endoftext|>, control
	idImEnd     = 269 // <|im_end|>, control
	idXYZ       = 270 // Ġxyz: a whole-word token no merge reaches
	idUser      = 271 // "<tool>", user-defined
)

func handBPEConfig(pre string) BPEConfig {
	var toks []string
	for b := 0; b < 256; b++ {
		toks = append(toks, byteRuneStr[b])
	}
	for _, m := range handMerges {
		toks = append(toks, strings.Replace(m, " ", "", 1))
	}
	toks = append(toks, "<|endoftext|>", "<|im_end|>", "Ġxyz", "<tool>")
	types := make([]int32, len(toks))
	for i := range types {
		types[i] = TypeNormal
	}
	types[idEndOfText], types[idImEnd], types[idUser] = TypeControl, TypeControl, TypeUserDefined
	return BPEConfig{Tokens: toks, Types: types, Merges: handMerges, PreTokenizer: pre,
		BOS: idEndOfText, EOS: idEndOfText}
}

func handBPE(t testing.TB, pre string) *BPE {
	b, err := NewBPE(handBPEConfig(pre))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestBPEHandEncodings(t *testing.T) {
	tests := []struct {
		name string
		pre  string
		text string
		want []int32
	}{
		// ll(3) → ell(4) → Hell(5) → Hello(6)
		{"chain", PreGPT2, "Hello", []int32{262}},
		// he(1) beats ll(3); "he ll" is no merge, so ell never forms
		{"rank order", PreGPT2, "hell", []int32{257, 259}},
		// the same pair twice: the leftmost merges first
		{"leftmost tie", PreGPT2, "lll", []int32{259, 'l'}},
		// " the" and " world" are pre-tokens; Ġw(7) or(8) Ġwor(9) ld(10) Ġworld(11)
		{"sentence", PreGPT2, "Hello the world", []int32{262, 258, 267}},
		{"pre-tokens do not merge across", PreGPT2, "l l", []int32{'l', 32, 'l'}},
		{"numbers gpt2", PreGPT2, " 1234", []int32{32, '1', '2', '3', '4'}},
		{"non-ascii bytes", PreGPT2, "é", []int32{0xC3, 0xA9}},
		// without ignore_merges Ġxyz is not reachable by merges
		{"no ignore merges", PreGPT2, " xyz", []int32{32, 'x', 'y', 'z'}},
		// llama3 implies ignore_merges: a pre-token that is a token is emitted whole
		{"llama3 ignore merges", PreLlama3, " xyz", []int32{idXYZ}},
		{"llama3 sentence", PreLlama3, "Hello the world", []int32{262, 258, 267}},
		{"special text is plain", PreGPT2, "<|im_end|>", []int32{'<', '|', 'i', 'm', '_', 'e', 'n', 'd', '|', '>'}},
		{"empty", PreQwen2, "", []int32{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := handBPE(t, tt.pre)
			got, err := b.Encode(tt.text, false)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("Encode(%q) = %v, want %v", tt.text, got, tt.want)
			}
			if dec, _ := b.Decode(got); dec != tt.text {
				t.Fatalf("Decode = %q, want %q", dec, tt.text)
			}
		})
	}
}

func TestBPESpecials(t *testing.T) {
	cfg := handBPEConfig(PreQwen2)
	cfg.AddEOS = true
	cfg.Specials = map[string]int32{"<|extra|>": idXYZ}
	b, err := NewBPE(cfg)
	if err != nil {
		t.Fatal(err)
	}
	got, err := b.EncodeWithOptions("Hello<|im_end|><tool>he<|extra|>", EncodeOptions{AddSpecial: true, ParseSpecial: true})
	if err != nil {
		t.Fatal(err)
	}
	if want := []int32{262, idImEnd, idUser, 257, idXYZ, idEndOfText}; !reflect.DeepEqual(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	// control tokens produce no text; user-defined ones produce their raw text
	if dec, _ := b.Decode(got); dec != "Hello<tool>he xyz" {
		t.Fatalf("Decode = %q", dec)
	}
	if !b.EOG(idImEnd) || !b.EOG(idEndOfText) || b.EOG(idUser) || b.EOG(262) {
		t.Error("EOG set wrong")
	}
	if b.TokenText(idImEnd) != "<|im_end|>" || b.TokenText(258) != "Ġthe" || string(b.TokenBytes(258)) != " the" {
		t.Error("TokenText/TokenBytes wrong")
	}
}

func TestBPERoundTrip(t *testing.T) {
	texts := []string{"", " ", "   ", "\n\n\t", "Hello, world! The world's best.", "naïve café — “quotes”",
		"日本語のテキスト", "emoji 😀🎉 and flags 🇺🇸", "trailing   ", "\x00\x7f\u00a0\u3000", "12345678901234567890"}
	for _, pre := range []string{PreGPT2, PreLlama3, PreQwen2} {
		b := handBPE(t, pre)
		for _, text := range texts {
			ids, err := b.Encode(text, true)
			if err != nil {
				t.Fatal(err)
			}
			got, err := b.Decode(ids)
			if err != nil {
				t.Fatal(err)
			}
			if got != text {
				t.Errorf("%s: Decode(Encode(%q)) = %q", pre, text, got)
			}
		}
	}
}

func TestBPEMissingByte(t *testing.T) {
	b, err := NewBPE(BPEConfig{Tokens: []string{"a", "b", "ab"}, Merges: []string{"a b"}, PreTokenizer: PreGPT2, BOS: -1, EOS: -1})
	if err != nil {
		t.Fatal(err)
	}
	if ids, err := b.Encode("ab", false); err != nil || !reflect.DeepEqual(ids, []int32{2}) {
		t.Fatalf("Encode(ab) = %v, %v", ids, err)
	}
	if _, err := b.Encode("abc", false); !errors.Is(err, ErrUnknownByte) {
		t.Fatalf("err = %v, want ErrUnknownByte", err)
	}
}

func TestBPEConfigValidation(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*BPEConfig)
		want   string
	}{
		{"pre-tokenizer", func(c *BPEConfig) { c.PreTokenizer = "bert" }, "PreTokenizer \"bert\""},
		{"merge form", func(c *BPEConfig) { c.Merges = []string{"ab"} }, "not of the form"},
		{"merge trailing space", func(c *BPEConfig) { c.Merges = []string{"a "} }, "not of the form"},
		{"merge out of vocab", func(c *BPEConfig) { c.Merges = []string{"q z"} }, "missing from the vocabulary"},
		{"special id", func(c *BPEConfig) { c.Specials = map[string]int32{"<x>": 9999} }, "out of range"},
		{"types length", func(c *BPEConfig) { c.Types = c.Types[:5] }, "Types has 5"},
		{"bos", func(c *BPEConfig) { c.BOS = 100000 }, "BOS id"},
		{"add eos", func(c *BPEConfig) { c.EOS, c.AddEOS = -1, true }, "AddEOS"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := handBPEConfig(PreGPT2)
			tt.mutate(&c)
			_, err := NewBPE(c)
			if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want ErrInvalidConfig mentioning %q", err, tt.want)
			}
		})
	}
}

func TestBPELongInputIsNotQuadratic(t *testing.T) {
	b := handBPE(t, PreGPT2)
	// one 200 KB pre-token of letters: a single heap run, plus many short words
	long := strings.Repeat("l", 200_000) + strings.Repeat(" the world", 20_000)
	ids, err := b.Encode(long, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(ids) != 100_000+40_000 {
		t.Fatalf("%d tokens", len(ids))
	}
}
