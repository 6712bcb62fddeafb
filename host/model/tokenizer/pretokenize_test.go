package tokenizer

import (
	"math/rand"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"
)

func split(kind, text string) []string {
	var out []string
	preTokenize(kind, text, nil, func(p string) { out = append(out, p) })
	return out
}

// Expected splits derived by reading each regex alternative in order (see
// the regex constants in pretokenize.go). Notable differences: GPT-2 keeps a
// leading space on numbers and splits them as \p{N}+, Llama-3 as \p{N}{1,3}
// without the space, Qwen2 digit by digit; Llama-3 lets any single
// non-letter/number/newline rune prefix a word ("\"Hi", "\tyes"), folds
// contraction case ('M) and groups newlines (`\s*[\r\n]+`).
func TestPreTokenizeSplits(t *testing.T) {
	tests := []struct {
		text                string
		gpt2, llama3, qwen2 []string
	}{
		{
			text:   "Hello world!! 123456 don't  x",
			gpt2:   []string{"Hello", " world", "!!", " 123456", " don", "'t", " ", " x"},
			llama3: []string{"Hello", " world", "!!", " ", "123", "456", " don", "'t", " ", " x"},
			qwen2:  []string{"Hello", " world", "!!", " ", "1", "2", "3", "4", "5", "6", " don", "'t", " ", " x"},
		},
		{
			text:   "I'M here\n\n  ok\t\tyes  ",
			gpt2:   []string{"I", "'", "M", " here", "\n\n ", " ok", "\t", "\t", "yes", "  "},
			llama3: []string{"I", "'M", " here", "\n\n", " ", " ok", "\t", "\tyes", "  "},
			qwen2:  []string{"I", "'M", " here", "\n\n", " ", " ok", "\t", "\tyes", "  "},
		},
		{
			text:   "x.\n\ny",
			gpt2:   []string{"x", ".", "\n", "\n", "y"},
			llama3: []string{"x", ".\n\n", "y"},
			qwen2:  []string{"x", ".\n\n", "y"},
		},
		{
			text:   "3.14 (π²) ünïcode 漢字",
			gpt2:   []string{"3", ".", "14", " (", "π", "²", ")", " ünïcode", " 漢字"},
			llama3: []string{"3", ".", "14", " (", "π", "²", ")", " ünïcode", " 漢字"},
			qwen2:  []string{"3", ".", "1", "4", " (", "π", "²", ")", " ünïcode", " 漢字"},
		},
		{
			text:   `"Hi"`,
			gpt2:   []string{`"`, "Hi", `"`},
			llama3: []string{`"Hi`, `"`},
			qwen2:  []string{`"Hi`, `"`},
		},
		{
			text:   "ab  \n",
			gpt2:   []string{"ab", "  \n"},
			llama3: []string{"ab", "  \n"},
			qwen2:  []string{"ab", "  \n"},
		},
		{
			text:   "won't YOU'LL 've",
			gpt2:   []string{"won", "'t", " YOU", "'", "LL", " '", "ve"},
			llama3: []string{"won", "'t", " YOU", "'LL", " '", "ve"},
			qwen2:  []string{"won", "'t", " YOU", "'LL", " '", "ve"},
		},
		{
			text:   " ",
			gpt2:   []string{" "},
			llama3: []string{" "},
			qwen2:  []string{" "},
		},
		{
			text:   "a 😀😀 b",
			gpt2:   []string{"a", " 😀😀", " b"},
			llama3: []string{"a", " 😀😀", " b"},
			qwen2:  []string{"a", " 😀😀", " b"},
		},
	}
	for _, tt := range tests {
		for _, c := range []struct {
			kind string
			want []string
		}{{PreGPT2, tt.gpt2}, {PreLlama3, tt.llama3}, {PreQwen2, tt.qwen2}} {
			if got := split(c.kind, tt.text); !reflect.DeepEqual(got, c.want) {
				t.Errorf("%s split of %q = %q, want %q", c.kind, tt.text, got, c.want)
			}
		}
	}
	if got := split(PreGPT2, ""); got != nil {
		t.Errorf("empty text split into %q", got)
	}
}

// refSplit is an independent reference: Go's regexp (leftmost-first, like
// the backtracking engines the patterns were written for) runs every
// alternative but the lookahead pair `\s+(?!\S)|\s+`, which is applied by
// hand. \s is spelled out as Unicode White_Space, which Go's \s is not.
var (
	wsClass     = `\t\n\v\f\r \x{85}\p{Z}`
	refGPT2     = regexp.MustCompile(`^(?:'s|'t|'re|'ve|'m|'ll|'d| ?\pL+| ?\pN+| ?[^` + wsClass + `\pL\pN]+)`)
	refLlama3   = regexp.MustCompile(`^(?:(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\pL\pN]?\pL+|\pN{1,3}| ?[^` + wsClass + `\pL\pN]+[\r\n]*|[` + wsClass + `]*[\r\n]+)`)
	refQwen2    = regexp.MustCompile(`^(?:(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\pL\pN]?\pL+|\pN| ?[^` + wsClass + `\pL\pN]+[\r\n]*|[` + wsClass + `]*[\r\n]+)`)
	refSpaceRun = regexp.MustCompile(`^[` + wsClass + `]+`)
)

func refSplit(kind, text string) []string {
	re := map[string]*regexp.Regexp{PreGPT2: refGPT2, PreLlama3: refLlama3, PreQwen2: refQwen2}[kind]
	var out []string
	for text != "" {
		m := re.FindString(text)
		if m == "" {
			run := refSpaceRun.FindString(text)
			if run == "" {
				panic("reference: no alternative matched " + text)
			}
			// \s+(?!\S): give the last space back when a non-space follows
			if len(run) < len(text) && utf8.RuneCountInString(run) > 1 {
				_, last := utf8.DecodeLastRuneInString(run)
				run = run[:len(run)-last]
			}
			m = run
		}
		out = append(out, m)
		text = text[len(m):]
	}
	return out
}

func TestPreTokenizeMatchesRegexReference(t *testing.T) {
	alphabet := []rune("aZé漢 \t\n\r\u00a0\u3000'sStTlLmMdrRevV1²٣.!\"(😀\u0301-")
	rng := rand.New(rand.NewSource(7))
	for i := 0; i < 3000; i++ {
		var b strings.Builder
		for n := rng.Intn(24); n >= 0; n-- {
			b.WriteRune(alphabet[rng.Intn(len(alphabet))])
		}
		text := b.String()
		for _, kind := range []string{PreGPT2, PreLlama3, PreQwen2} {
			got, want := split(kind, text), refSplit(kind, text)
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("%s split of %q = %q, regex reference %q", kind, text, got, want)
			}
		}
	}
}
