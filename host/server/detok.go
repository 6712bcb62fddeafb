package server

import (
	"strings"
	"unicode/utf8"
)

// detokenizer turns a stream of token byte strings into text that is always
// valid UTF-8. Byte-level vocabularies split one character across tokens
// (an emoji is often 2-4 byte tokens); the trailing bytes of an incomplete
// character are held back until a later token completes it. Bytes that can
// never become a valid character are replaced by U+FFFD at once (one per
// byte), so the hold
// is at most 3 bytes and never blocks output.
type detokenizer struct {
	pending []byte // an incomplete UTF-8 prefix, at most utf8.UTFMax-1 bytes
}

// push appends b and returns the text that is complete now.
func (d *detokenizer) push(b []byte) string {
	if len(d.pending) == 0 && utf8.Valid(b) {
		return string(b) // fast path: the common whole-character token
	}
	p := append(d.pending, b...)
	var sb strings.Builder
	i := 0
	for i < len(p) {
		if p[i] < utf8.RuneSelf {
			sb.WriteByte(p[i])
			i++
			continue
		}
		if !utf8.FullRune(p[i:]) {
			break // a valid prefix of a character: wait for more bytes
		}
		r, size := utf8.DecodeRune(p[i:])
		if r == utf8.RuneError && size == 1 {
			sb.WriteString(string(utf8.RuneError))
		} else {
			sb.Write(p[i : i+size])
		}
		i += size
	}
	d.pending = append(d.pending[:0], p[i:]...)
	return sb.String()
}

// pendingLen is the number of bytes held back.
func (d *detokenizer) pendingLen() int { return len(d.pending) }

// flush ends the stream: each held-back byte that never completed a
// character becomes U+FFFD. The output of any split of a byte string into
// pushes, plus flush, equals string([]rune(string(bytes))): Go's own
// one-U+FFFD-per-bad-byte decoding.
func (d *detokenizer) flush() string {
	out := strings.Repeat(string(utf8.RuneError), len(d.pending))
	d.pending = d.pending[:0]
	return out
}
