package tokenizer

import (
	"errors"
	"fmt"
	"math"
	"math/rand"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"
)

// byteID is the stories260K id of byte token <0xXX>: ids 3..258 in order.
func byteID(b byte) int32 { return 3 + int32(b) }

// TestSPMStoriesKnownEncodings checks encodings derived by hand from the
// stories260K vocabulary (scores are minus the merge order: ▁t 0, he -1,
// ▁a -2, ...). Worked example, "Once upon a time" → "▁Once▁upon▁a▁time",
// characters ▁ O n c e ▁ u p o n ▁ a ▁ t i m e. Adjacent pairs in the
// vocabulary: ▁O(319,-60) ce(331,-72) ▁u(318,-59) on(289,-30) ▁a(261,-2)
// ▁t(259,0) im(288,-29). Popping best first:
//
//	▁t 0; ▁a -2; im -29 → queues ime(369,-110); on -30; ▁u -59 → queues
//	▁up(350,-91); ▁O -60 → queues ▁On(321,-62); ▁On -62; ce -72 → queues
//	▁Once(403,-144); ▁up -91 → queues ▁upon(407,-148); ime -110 → queues
//	▁time(378,-119); ▁time; ▁Once; ▁upon.
//
// giving ▁Once ▁upon ▁a ▁time = 403 407 261 378 (after BOS 1).
// "Hello": ▁H(320,-61), ll(306,-47); ll first, then ▁H, then ▁He(346,-87);
// "▁Hell", "ell", "llo" are not pieces → ▁He ll o = 346 306 414.
// "café": only ▁c(280,-21) merges; a(412) f(431) é(485) are pieces.
// "ü" and "日本" are not in the 512-token vocabulary → UTF-8 byte tokens.
func TestSPMStoriesKnownEncodings(t *testing.T) {
	s := storiesSPM(t)
	tests := []struct {
		name       string
		text       string
		addSpecial bool
		want       []int32
	}{
		{"once upon a time", "Once upon a time", true, []int32{1, 403, 407, 261, 378}},
		{"no specials", "Once upon a time", false, []int32{403, 407, 261, 378}},
		{"hello", "Hello", false, []int32{346, 306, 414}},
		{"cafe in vocab é", "café", false, []int32{280, 412, 431, 485}},
		{"byte fallback ü", "ü", false, []int32{410, byteID(0xC3), byteID(0xBC)}},
		{"byte fallback CJK", "日本", false, []int32{410, byteID(0xE6), byteID(0x97), byteID(0xA5), byteID(0xE6), byteID(0x9C), byteID(0xAC)}},
		{"empty", "", false, []int32{}},
		{"empty with BOS", "", true, []int32{1}},
		{"lone space", " ", false, []int32{410, 410}},
		{"control text is plain text", "<s>", false, []int32{410, 504, 419, 505}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := s.Encode(tt.text, tt.addSpecial)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("Encode(%q) = %v, want %v", tt.text, got, tt.want)
			}
			dec, err := s.Decode(got)
			if err != nil {
				t.Fatal(err)
			}
			if dec != tt.text {
				t.Fatalf("Decode(%v) = %q, want %q", got, dec, tt.text)
			}
		})
	}
}

func TestSPMParseSpecial(t *testing.T) {
	s := storiesSPM(t)
	tests := []struct {
		text string
		want []int32
	}{
		// after a special token llama.cpp prefixes the next fragment with a space again
		{"<s>Once</s>", []int32{1, 403, 2}},
		{"Once<s>Once", []int32{403, 1, 403}},
		{"<s><s>", []int32{1, 1}},
	}
	for _, tt := range tests {
		got, err := s.EncodeWithOptions(tt.text, EncodeOptions{ParseSpecial: true})
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, tt.want) {
			t.Errorf("EncodeWithOptions(%q, ParseSpecial) = %v, want %v", tt.text, got, tt.want)
		}
	}
	dec, _ := s.Decode([]int32{1, 403, 2, 403})
	if dec != "Once Once" { // control tokens decode to nothing; only the first space is stripped
		t.Errorf("Decode = %q", dec)
	}
}

func TestSPMInterface(t *testing.T) {
	s := storiesSPM(t)
	if s.VocabSize() != 512 || s.BOS() != 1 || s.EOS() != 2 {
		t.Fatalf("VocabSize/BOS/EOS = %d/%d/%d", s.VocabSize(), s.BOS(), s.EOS())
	}
	if !s.EOG(2) || s.EOG(1) || s.EOG(403) {
		t.Error("EOG: want only </s>")
	}
	for _, c := range []struct {
		id   int32
		text string
		b    string
	}{{403, "▁Once", " Once"}, {byteID(0xE6), "<0xE6>", "\xe6"}, {1, "<s>", ""}, {0, "<unk>", "\u2585"}, {-1, "", ""}, {512, "", ""}} {
		if got := s.TokenText(c.id); got != c.text {
			t.Errorf("TokenText(%d) = %q, want %q", c.id, got, c.text)
		}
		if got := string(s.TokenBytes(c.id)); got != c.b {
			t.Errorf("TokenBytes(%d) = %q, want %q", c.id, got, c.b)
		}
	}
	if _, err := s.Decode([]int32{403, 512}); !errors.Is(err, ErrInvalidToken) {
		t.Errorf("Decode out of range: err = %v, want ErrInvalidToken", err)
	}
}

// refSPM is a deliberately naive O(n²) SentencePiece encoder: rescan all
// adjacent pairs for the best score (leftmost on ties) after every merge.
func refSPM(s *SentencePiece, text string) []int32 {
	if text == "" {
		return nil // llama.cpp adds no space prefix to empty input
	}
	esc := strings.ReplaceAll(" "+text, " ", "▁")
	var syms []string
	for _, r := range esc {
		syms = append(syms, string(r))
	}
	for {
		best, bestScore := -1, float32(math.Inf(-1))
		for i := 0; i+1 < len(syms); i++ {
			id, ok := s.toID[syms[i]+syms[i+1]]
			if !ok || (s.types[id] != TypeNormal && s.types[id] != TypeUserDefined) {
				continue
			}
			if s.scores[id] > bestScore {
				best, bestScore = i, s.scores[id]
			}
		}
		if best < 0 {
			break
		}
		syms[best] += syms[best+1]
		syms = append(syms[:best+1], syms[best+2:]...)
	}
	var out []int32
	for _, p := range syms {
		if id, ok := s.toID[p]; ok && s.types[id] == TypeNormal {
			out = append(out, id)
			continue
		}
		for i := 0; i < len(p); i++ {
			out = append(out, s.toID[fmt.Sprintf("<0x%02X>", p[i])])
		}
	}
	return out
}

// randomText draws n runes from a mix of frequent English letters, spaces,
// punctuation and characters outside the vocabulary.
func randomText(rng *rand.Rand, n int) string {
	alphabet := []rune("eeetttaaoinshrdlu      ..,!'\"LOTHé日ü\n😀\u00a0")
	var b strings.Builder
	for i := 0; i < n; i++ {
		b.WriteRune(alphabet[rng.Intn(len(alphabet))])
	}
	return b.String()
}

func TestSPMMatchesNaiveReference(t *testing.T) {
	s := storiesSPM(t)
	rng := rand.New(rand.NewSource(1))
	texts := []string{"Once upon a time, there was a little girl named Lily.", "the the the", "aaaaaaaa"}
	for i := 0; i < 300; i++ {
		texts = append(texts, randomText(rng, 1+rng.Intn(60)))
	}
	for _, text := range texts {
		got, err := s.Encode(text, false)
		if err != nil {
			t.Fatal(err)
		}
		if want := refSPM(s, text); !reflect.DeepEqual(got, want) {
			t.Fatalf("Encode(%q) = %v, naive reference = %v", text, got, want)
		}
	}
}

func TestSPMRoundTrip(t *testing.T) {
	s := storiesSPM(t)
	noPrefix := storiesConfig(t)
	f := false
	noPrefix.AddSpacePrefix = &f
	np, err := NewSentencePiece(noPrefix)
	if err != nil {
		t.Fatal(err)
	}
	texts := []string{"", " ", "  ", "\t\n", "Hello, world!", "  leading and trailing  ",
		"naïve café — “quotes”", "日本語のテキスト", "emoji 😀🎉 mix", "a\u00a0b", "\x00\x01", "multiple   spaces\n\nlines"}
	for _, tok := range []*SentencePiece{s, np} {
		for _, text := range texts {
			ids, err := tok.Encode(text, true)
			if err != nil {
				t.Fatal(err)
			}
			got, err := tok.Decode(ids)
			if err != nil {
				t.Fatal(err)
			}
			if got != text {
				t.Errorf("addSpacePrefix=%v: Decode(Encode(%q)) = %q", tok.addSpacePrefix, text, got)
			}
		}
	}
	ids, _ := np.Encode("Once", false)
	if len(ids) == 0 || ids[0] == 403 {
		t.Errorf("without space prefix \"Once\" must not become ▁Once: %v", ids)
	}
}

func TestSPMUnknownFallback(t *testing.T) {
	// A vocabulary without byte tokens: unknown characters become UNK, and
	// without UNK encoding fails with ErrUnknownByte.
	cfg := SPMConfig{
		Tokens: []string{"<unk>", "<s>", "</s>", "▁", "a", "b", "▁a"},
		Scores: []float32{0, 0, 0, -1, -2, -3, -0.5},
		Types:  []int32{2, 3, 3, 1, 1, 1, 1},
		BOS:    1, EOS: 2, UNK: 0, AddBOS: true,
	}
	s, err := NewSentencePiece(cfg)
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.Encode("ab€a", true)
	if err != nil {
		t.Fatal(err)
	}
	if want := []int32{1, 6, 5, 0, 4}; !reflect.DeepEqual(got, want) {
		t.Fatalf("Encode = %v, want %v", got, want)
	}
	cfg.UNK = -1
	cfg.Types = []int32{1, 3, 3, 1, 1, 1, 1}
	s, err = NewSentencePiece(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Encode("€", false); !errors.Is(err, ErrUnknownByte) {
		t.Fatalf("err = %v, want ErrUnknownByte", err)
	}
}

func TestSPMConfigValidation(t *testing.T) {
	base := func() SPMConfig {
		return SPMConfig{Tokens: []string{"<unk>", "<s>", "</s>", "a"}, Scores: []float32{0, 0, 0, 1},
			Types: []int32{2, 3, 3, 1}, BOS: 1, EOS: 2, UNK: 0}
	}
	tests := []struct {
		name   string
		mutate func(*SPMConfig)
		want   string
	}{
		{"empty", func(c *SPMConfig) { c.Tokens, c.Scores, c.Types = nil, nil, nil }, "empty vocabulary"},
		{"scores length", func(c *SPMConfig) { c.Scores = c.Scores[:3] }, "Scores has 3"},
		{"types length", func(c *SPMConfig) { c.Types = c.Types[:2] }, "Types has 2"},
		{"bos range", func(c *SPMConfig) { c.BOS = 4 }, "BOS id 4"},
		{"eos range", func(c *SPMConfig) { c.EOS = -2 }, "EOS id -2"},
		{"unk range", func(c *SPMConfig) { c.UNK = 9 }, "UNK id 9"},
		{"add bos without bos", func(c *SPMConfig) { c.BOS, c.AddBOS = -1, true }, "AddBOS"},
		{"add eos without eos", func(c *SPMConfig) { c.EOS, c.AddEOS = -1, true }, "AddEOS"},
		{"nan score", func(c *SPMConfig) { c.Scores[3] = float32(math.NaN()) }, "NaN"},
		{"bad type", func(c *SPMConfig) { c.Types[3] = 9 }, "type 9"},
		{"bad byte token", func(c *SPMConfig) { c.Types[3] = TypeByte }, "not <0xXX>"},
		{"extra eog", func(c *SPMConfig) { c.ExtraEOG = []int32{7} }, "ExtraEOG id 7"},
		{"huge token", func(c *SPMConfig) { c.Tokens[3] = strings.Repeat("x", maxTokenLen+1) }, "bytes long"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := base()
			tt.mutate(&c)
			_, err := NewSentencePiece(c)
			if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want ErrInvalidConfig mentioning %q", err, tt.want)
			}
		})
	}
	if _, err := NewSentencePiece(base()); err != nil {
		t.Fatalf("valid config rejected: %v", err)
	}
}

func TestSPMNilTypesInference(t *testing.T) {
	s, err := NewSentencePiece(SPMConfig{Tokens: []string{"<unk>", "<s>", "</s>", "<0xC3>", "<0xA9>", "▁"},
		Scores: make([]float32, 6), BOS: 1, EOS: 2, UNK: 0})
	if err != nil {
		t.Fatal(err)
	}
	if got := s.types; !reflect.DeepEqual(got, []int32{2, 3, 3, 6, 6, 1}) {
		t.Fatalf("inferred types %v", got)
	}
	ids, _ := s.Encode("é", false)
	if want := []int32{5, 3, 4}; !reflect.DeepEqual(ids, want) {
		t.Fatalf("Encode(é) = %v, want %v", ids, want)
	}
}

func TestSPMLongInputIsNotQuadratic(t *testing.T) {
	s := storiesSPM(t)
	// ~32k tokens of story text; a quadratic encoder needs >10^10 steps here.
	unit := "Once upon a time, there was a little girl named Lily. She liked to play with her big red ball in the park. "
	text := strings.Repeat(unit, 1200)
	ids, err := s.Encode(text, true)
	if err != nil {
		t.Fatal(err)
	}
	if len(ids) < 32000 {
		t.Fatalf("only %d tokens; make the text longer", len(ids))
	}
	dec, _ := s.Decode(ids)
	if dec != text {
		t.Fatal("round trip of the long text failed")
	}
	if !utf8.ValidString(dec) {
		t.Fatal("invalid UTF-8")
	}
}
