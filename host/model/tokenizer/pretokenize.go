package tokenizer

import (
	"unicode"
	"unicode/utf8"
)

// Pre-tokenizer names accepted by BPEConfig.PreTokenizer.
const (
	PreGPT2   = "gpt2"
	PreLlama3 = "llama3"
	PreQwen2  = "qwen2"
)

// The regexes the hand-written splitters implement. Go's regexp has no
// lookahead, so each is a state machine that reproduces the regex's
// leftmost-first alternation and greedy backtracking exactly.
const (
	regexGPT2   = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`
	regexLlama3 = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	regexQwen2  = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
)

// rune classes; invalid UTF-8 bytes decode to U+FFFD and count as "other".
const (
	clsOther = iota
	clsLetter
	clsNumber
	clsSpace
)

type runeInfo struct {
	r    rune
	off  int // byte offset in the text
	size int
	cls  uint8
}

func classify(r rune) uint8 {
	switch {
	case unicode.IsLetter(r):
		return clsLetter
	case unicode.IsNumber(r):
		return clsNumber
	case unicode.IsSpace(r):
		return clsSpace
	}
	return clsOther
}

func decodeRunes(text string, buf []runeInfo) []runeInfo {
	buf = buf[:0]
	for i := 0; i < len(text); {
		r, size := utf8.DecodeRuneInString(text[i:])
		var c uint8
		if r < utf8.RuneSelf {
			c = asciiClass[r]
		} else {
			c = classify(r)
		}
		buf = append(buf, runeInfo{r: r, off: i, size: size, cls: c})
		i += size
	}
	return buf
}

var asciiClass = func() (t [utf8.RuneSelf]uint8) {
	for i := range t {
		t[i] = classify(rune(i))
	}
	return t
}()

// preTokenize splits text per the named regex and calls emit with each piece
// (a substring of text). rs is scratch.
func preTokenize(kind, text string, rs []runeInfo, emit func(string)) []runeInfo {
	rs = decodeRunes(text, rs)
	n := len(rs)
	end := func(k int) int { // byte offset of rune k (k may be n)
		if k >= n {
			return len(text)
		}
		return rs[k].off
	}
	for i := 0; i < n; {
		var j int
		if kind == PreGPT2 {
			j = matchGPT2(rs, i)
		} else {
			j = matchLlama3(rs, i, kind == PreQwen2)
		}
		emit(text[rs[i].off:end(j)])
		i = j
	}
	return rs
}

func is(rs []runeInfo, k int, cls uint8) bool { return k < len(rs) && rs[k].cls == cls }

func isCRLF(rs []runeInfo, k int) bool {
	return k < len(rs) && (rs[k].r == '\r' || rs[k].r == '\n')
}

// run returns the end of the run of class cls starting at k.
func run(rs []runeInfo, k int, cls uint8) int {
	for k < len(rs) && rs[k].cls == cls {
		k++
	}
	return k
}

// contraction matches 's 't 're 've 'm 'll 'd at i; fold enables ASCII
// case-insensitivity (llama.cpp folds ASCII only as well).
func contraction(rs []runeInfo, i int, fold bool) int {
	if rs[i].r != '\'' || i+1 >= len(rs) {
		return 0
	}
	lower := func(k int) rune {
		if k >= len(rs) {
			return 0
		}
		r := rs[k].r
		if fold && r >= 'A' && r <= 'Z' {
			r += 'a' - 'A'
		}
		return r
	}
	switch lower(i + 1) {
	case 's', 't', 'm', 'd':
		return i + 2
	case 'r', 'v':
		if lower(i+2) == 'e' {
			return i + 3
		}
	case 'l':
		if lower(i+2) == 'l' {
			return i + 3
		}
	}
	return 0
}

// whitespace implements `\s+(?!\S)|\s+` at a whitespace rune i: the run up to
// but excluding its last rune when a non-space follows and the run is longer
// than one, else the whole run.
func whitespace(rs []runeInfo, i int) int {
	j := run(rs, i, clsSpace)
	if j < len(rs) && j-i > 1 {
		return j - 1
	}
	return j
}

// matchGPT2 returns the end (rune index) of the piece starting at i.
func matchGPT2(rs []runeInfo, i int) int {
	if j := contraction(rs, i, false); j > 0 {
		return j
	}
	start := i
	if rs[i].r == ' ' && i+1 < len(rs) && rs[i+1].cls != clsSpace {
		start = i + 1 // ` ?` takes the space when a letter/number/other follows
	}
	switch rs[start].cls {
	case clsLetter, clsNumber, clsOther:
		return run(rs, start, rs[start].cls)
	}
	return whitespace(rs, i)
}

// matchLlama3 returns the end of the piece starting at i for the Llama-3
// regex, or the Qwen2 one (single-digit numbers) when qwen.
func matchLlama3(rs []runeInfo, i int, qwen bool) int {
	if j := contraction(rs, i, true); j > 0 {
		return j
	}
	c := rs[i].cls
	// [^\r\n\p{L}\p{N}]?\p{L}+
	if c == clsLetter {
		return run(rs, i, clsLetter)
	}
	if c != clsNumber && !isCRLF(rs, i) && is(rs, i+1, clsLetter) {
		return run(rs, i+1, clsLetter)
	}
	// \p{N}{1,3} or \p{N}
	if c == clsNumber {
		limit := 3
		if qwen {
			limit = 1
		}
		j := i
		for j < len(rs) && j-i < limit && rs[j].cls == clsNumber {
			j++
		}
		return j
	}
	// ` ?[^\s\p{L}\p{N}]+[\r\n]*`
	start := i
	if rs[i].r == ' ' && is(rs, i+1, clsOther) {
		start = i + 1
	}
	if rs[start].cls == clsOther {
		j := run(rs, start, clsOther)
		for isCRLF(rs, j) {
			j++
		}
		return j
	}
	// \s*[\r\n]+ : up to and including the last \r or \n of the space run.
	j := run(rs, i, clsSpace)
	for k := j - 1; k >= i; k-- {
		if isCRLF(rs, k) {
			return k + 1
		}
	}
	return whitespace(rs, i)
}
