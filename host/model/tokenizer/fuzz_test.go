package tokenizer

import (
	"encoding/json"
	"math/rand"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestBPEMatchesNaiveReference(t *testing.T) {
	for _, pre := range []string{PreGPT2, PreLlama3, PreQwen2} {
		cfg := trainBPE(t, english(3000), 300, pre)
		b, err := NewBPE(cfg)
		if err != nil {
			t.Fatal(err)
		}
		rng := rand.New(rand.NewSource(5))
		texts := []string{english(500)}
		for i := 0; i < 200; i++ {
			start := rng.Intn(len(englishSample) - 40)
			texts = append(texts, englishSample[start:start+rng.Intn(40)]+randomText(rng, rng.Intn(8)))
		}
		for _, text := range texts {
			got, err := b.Encode(text, false)
			if err != nil {
				t.Fatal(err)
			}
			if want := refBPE(cfg, text); !sameIDs(got, want) {
				t.Fatalf("%s: Encode(%q) = %v, naive reference %v", pre, text, got, want)
			}
		}
	}
}

func FuzzEncodeSPM(f *testing.F) {
	for _, s := range []string{"", " ", "Once upon a time", "héllo  wörld\n", "日本語", "😀", "<s>x</s>", "\xff\xfe", "a\u2581b"} {
		f.Add(s, false)
		f.Add(s, true)
	}
	toks := []*SentencePiece{synthSPM(f)}
	if _, err := findShared(); err == nil {
		toks = append(toks, storiesSPM(f))
	}
	f.Fuzz(func(t *testing.T, s string, parseSpecial bool) {
		for _, tok := range toks {
			ids, err := tok.EncodeWithOptions(s, EncodeOptions{AddSpecial: true, ParseSpecial: parseSpecial})
			if err != nil {
				t.Fatal(err)
			}
			dec, err := tok.Decode(ids)
			if err != nil {
				t.Fatal(err)
			}
			// Documented exceptions: U+2581 is SPM's space marker, and with
			// ParseSpecial a space is re-inserted after special tokens.
			if !utf8.ValidString(s) || strings.Contains(s, "\u2581") || parseSpecial {
				continue
			}
			if dec != s {
				t.Fatalf("Decode(Encode(%q)) = %q (ids %v)", s, dec, ids)
			}
			if len(s) < 200 {
				if want := refSPM(tok, s); !sameIDs(ids[1:], want) {
					t.Fatalf("Encode(%q) = %v, naive reference %v", s, ids[1:], want)
				}
			}
			if got, _ := streamAll(tok, nil, ids); got != dec {
				t.Fatalf("stream %q != Decode %q", got, dec)
			}
		}
	})
}

func FuzzEncodeBPE(f *testing.F) {
	for _, s := range []string{"", " ", "Hello the world", "don't  STOP'LL\r\n\n 123456", "日本語 😀", "\xff\xfe", "<|im_end|>"} {
		f.Add(s)
	}
	var toks []*BPE
	var cfgs []BPEConfig
	for _, pre := range []string{PreGPT2, PreLlama3, PreQwen2} {
		cfg := trainBPE(f, english(2000), 150, pre)
		b, err := NewBPE(cfg)
		if err != nil {
			f.Fatal(err)
		}
		toks, cfgs = append(toks, b), append(cfgs, cfg)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for i, tok := range toks {
			// pre-tokens partition the input and agree with the regex reference
			if utf8.ValidString(s) {
				if got, want := split(tok.pre, s), refSplit(tok.pre, s); !reflect.DeepEqual(got, want) {
					t.Fatalf("%s split %q = %q, reference %q", tok.pre, s, got, want)
				}
			}
			ids, err := tok.Encode(s, true)
			if err != nil {
				t.Fatal(err)
			}
			dec, err := tok.Decode(ids)
			if err != nil {
				t.Fatal(err)
			}
			if dec != s { // byte-level BPE round-trips any bytes
				t.Fatalf("%s: Decode(Encode(%q)) = %q", tok.pre, s, dec)
			}
			if len(s) < 200 {
				if want := refBPE(cfgs[i], s); !sameIDs(ids, want) {
					t.Fatalf("%s: Encode(%q) = %v, reference %v", tok.pre, s, ids, want)
				}
			}
			if got, _ := streamAll(tok, nil, ids); got != dec {
				t.Fatalf("stream %q != Decode %q", got, dec)
			}
		}
	})
}

func FuzzFromHFJSON(f *testing.F) {
	// Seeds stay small: multi-kilobyte seeds stall Go's mutator.
	f.Add([]byte(`{"added_tokens":[{"id":4,"content":"<|eot_id|>","special":true}],"normalizer":null,`+
		`"pre_tokenizer":{"type":"Sequence","pretokenizers":[{"type":"Split","pattern":{"Regex":`+
		strconvQuote(regexLlama3)+`},"behavior":"Isolated","invert":false},{"type":"ByteLevel","use_regex":false}]},`+
		`"post_processor":{"type":"TemplateProcessing","single":[{"SpecialToken":{"id":"<|eot_id|>"}}]},`+
		`"model":{"type":"BPE","ignore_merges":true,"vocab":{"h":0,"i":1,"hi":2,"Ġ":3},"merges":["h i"]}}`),
		[]byte(`{"bos_token":{"content":"<|eot_id|>"},"eos_token":"<|eot_id|>"}`))
	f.Add([]byte(`{"pre_tokenizer":{"type":"ByteLevel","add_prefix_space":false},`+
		`"model":{"type":"BPE","vocab":{"a":0,"b":1,"ab":2,"Ġ":3},"merges":[["a","b"]]}}`), []byte(`{"add_bos_token":true}`))
	f.Add([]byte(`{"model":{"type":"BPE","vocab":{"a":0,"b":1,"ab":2},"merges":[["a","b"]]},"pre_tokenizer":{"type":"ByteLevel"}}`), []byte(nil))
	f.Add([]byte(`{"model":{"type":"BPE","vocab":{"a":3}},"added_tokens":[{"id":0,"content":"","special":true}]}`), []byte(`{"eos_token":7}`))
	f.Add([]byte(`[]`), []byte(`{`))
	f.Fuzz(func(t *testing.T, tj, cj []byte) {
		if len(tj) > 1<<16 {
			return
		}
		tok, err := FromHFJSON(tj, cj)
		if err != nil {
			return
		}
		for _, s := range []string{"Hello the world", "a<|endoftext|>b 日"} {
			ids, err := tok.Encode(s, true)
			if err != nil {
				continue // a vocabulary may lack some bytes
			}
			if _, err := tok.Decode(ids); err != nil {
				t.Fatalf("Decode of our own ids failed: %v", err)
			}
		}
	})
}

// sameIDs compares id lists, treating nil and empty as equal.
func sameIDs(a, b []int32) bool {
	if len(a) == 0 && len(b) == 0 {
		return true
	}
	return reflect.DeepEqual(a, b)
}

func strconvQuote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
