package synth

import (
	"fmt"
	"strings"
)

// BPEVocab is a byte-level BPE vocabulary (GGUF tokenizer.ggml.model
// "gpt2"): pieces in GPT-2's byte alphabet, their types, and the merges
// that build every piece past the 256 byte tokens from two earlier ones.
type BPEVocab struct {
	Tokens []string
	Types  []int32
	Merges []string
	// BOS and EOS are the ids of <|begin_of_text|> and <|end_of_text|>;
	// EOT is <|im_end|>, the chat template's end of turn.
	BOS, EOS, EOT int
}

// bpeSpecials are the control tokens at the end of a BPE vocabulary.
var bpeSpecials = []string{"<|begin_of_text|>", "<|end_of_text|>", "<|im_start|>", "<|im_end|>"}

// byteRune is GPT-2's byte-to-rune map: printable Latin-1 bytes stand for
// themselves, the rest map to U+0100 upward in byte order.
func byteRune() [256]string {
	var out [256]string
	n := 0
	for b := 0; b < 256; b++ {
		if b >= '!' && b <= '~' || b >= 0xA1 && b <= 0xAC || b >= 0xAE && b <= 0xFF {
			out[b] = string(rune(b))
		} else {
			out[b] = string(rune(256 + n))
			n++
		}
	}
	return out
}

// NewBPEVocab builds a byte-level BPE vocabulary of exactly size pieces
// shaped like a real one: the 256 byte tokens, merges learned from the
// embedded corpus, then generated pieces — letter n-grams with and without
// a leading space, numbers, whitespace runs, the punctuation clusters JSON
// is written with, whole and partial UTF-8 characters (accented Latin,
// Greek, CJK, emoji) — and four control tokens at the end.
func NewBPEVocab(size int) (BPEVocab, error) {
	if size < 512 {
		return BPEVocab{}, fmt.Errorf("synth: a BPE vocabulary needs at least 512 pieces, got %d", size)
	}
	br := byteRune()
	enc := func(s string) string {
		var sb strings.Builder
		for i := 0; i < len(s); i++ {
			sb.WriteString(br[s[i]])
		}
		return sb.String()
	}
	var v BPEVocab
	have := map[string]bool{}
	limit := size - len(bpeSpecials)
	// add inserts the piece for text s (raw bytes) with the merge that
	// builds it from its longest known prefix and the rest, when both
	// halves exist; it reports whether s is now a piece.
	add := func(s string) bool {
		if len(v.Tokens) >= limit {
			return false
		}
		e := enc(s)
		if have[e] {
			return true
		}
		if len(s) > 1 {
			split := -1
			for k := len(s) - 1; k >= 1; k-- {
				if have[enc(s[:k])] && have[enc(s[k:])] {
					split = k
					break
				}
			}
			if split < 0 {
				return false
			}
			v.Merges = append(v.Merges, enc(s[:split])+" "+enc(s[split:]))
		}
		have[e] = true
		v.Tokens = append(v.Tokens, e)
		v.Types = append(v.Types, 1)
		return true
	}
	// addPath adds every prefix of s so that s itself can be merged.
	addPath := func(s string) {
		for k := 2; k <= len(s); k++ {
			if !add(s[:k]) {
				return
			}
		}
	}
	for b := 0; b < 256; b++ {
		add(string([]byte{byte(b)}))
	}
	for _, m := range learnMerges(corpus, 4000) {
		addPath(strings.ReplaceAll(m, space, " "))
	}
	for _, s := range []string{`{"`, `":`, `",`, `"}`, `":"`, `","`, `"},`, `":[`, `"]`, `],`, `},{"`, `": "`, `", "`, `": {`, `": [`,
		`\n`, `\"`, `\\`, `\u`, "  ", "    ", "        ", "\n\n", "\n  ", "\n    ", "\t\t", "true", "false", "null", ` true`, ` false`, ` null`} {
		addPath(s)
	}
	for n := 0; n < 1000; n++ {
		addPath(fmt.Sprint(n))
		addPath(" " + fmt.Sprint(n))
	}
	for _, r := range "éèàüößçñøåæœ" + "αβγδεζηθικλμνξοπρστυφχψω" + "日本語中文字的一是不了人我在有他这为之大来以个中上们到说国和地也子时道出要于就下得可你年生自会那后能对着事其里所去行过家十用发天如然作方成者多日都三小军二无同么经法当起与好看学进种将还分此心前面又定见只主没公从" + "😀😂🙂👍🚀🎉❤🔥" {
		addPath(string(r))
	}
	letters := "etaoinshrdlucmfwypvbgkjqxz"
	for _, pre := range []string{"", " "} {
		for _, a := range letters {
			for _, b := range letters {
				addPath(pre + string(a) + string(b))
			}
		}
	}
	for _, pre := range []string{"", " ", "\"", "_"} {
		for _, a := range letters {
			for _, b := range letters {
				for _, c := range letters {
					addPath(pre + string(a) + string(b) + string(c))
				}
			}
		}
	}
	for _, a := range letters {
		for _, b := range letters {
			for _, c := range letters {
				for _, d := range letters {
					if len(v.Tokens) >= limit {
						break
					}
					addPath(" " + string(a) + string(b) + string(c) + string(d))
				}
			}
		}
	}
	if len(v.Tokens) < limit {
		return BPEVocab{}, fmt.Errorf("synth: the BPE vocabulary reaches only %d of %d pieces", len(v.Tokens), limit)
	}
	for _, s := range bpeSpecials {
		v.Tokens = append(v.Tokens, s)
		v.Types = append(v.Types, 3)
	}
	v.BOS, v.EOS, v.EOT = size-4, size-3, size-1
	return v, nil
}

// ChatMLTemplate is the chat template of the BPE demo models: ChatML
// turns, tools in a system turn and calls in <tool_call> blocks (the
// Hermes/Qwen convention, which kvhost parses).
const ChatMLTemplate = `{%- if tools %}<|im_start|>system
{% if messages[0].role == 'system' %}{{ messages[0].content }}

{% endif %}# Tools

You may call one or more functions. Signatures, one per line:
<tools>
{%- for tool in tools %}
{{ tool | tojson }}
{%- endfor %}
</tools>
Call a function with <tool_call>
{"name": <function-name>, "arguments": <args-json-object>}
</tool_call><|im_end|>
{% elif messages[0].role == 'system' %}<|im_start|>system
{{ messages[0].content }}<|im_end|>
{% endif %}
{%- for message in messages %}
{%- if message.role == 'system' %}
{%- elif message.role == 'tool' %}<|im_start|>user
<tool_response>
{{ message.content }}
</tool_response><|im_end|>
{% elif message.tool_calls %}<|im_start|>assistant
{%- for call in message.tool_calls %}
<tool_call>
{"name": "{{ call.function.name }}", "arguments": {{ call.function.arguments | tojson }}}
</tool_call>
{%- endfor %}<|im_end|>
{% else %}<|im_start|>{{ message.role }}
{{ message.content }}<|im_end|>
{% endif %}
{%- endfor %}
{%- if add_generation_prompt %}<|im_start|>assistant
{% endif %}`
