package tokenizer

import "unicode/utf8"

// GPT-2's byte-level alphabet: every byte maps to one printable rune so that
// byte strings can be stored as text in vocabularies. Printable Latin-1 bytes
// map to themselves; the rest map to U+0100 upward in byte order.
var (
	byteToRune [256]rune
	runeToByte = map[rune]byte{}
	// byteRuneStr[b] is string(byteToRune[b]), precomputed for encoding.
	byteRuneStr [256]string
)

func init() {
	n := 0
	for b := 0; b < 256; b++ {
		printable := (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF)
		if printable {
			byteToRune[b] = rune(b)
		} else {
			byteToRune[b] = rune(256 + n)
			n++
		}
		runeToByte[byteToRune[b]] = byte(b)
		byteRuneStr[b] = string(byteToRune[b])
	}
}

// byteLevelDecode maps a vocabulary piece back to the bytes it stands for.
// Runes outside the alphabet (which byte-level vocabularies should not hold)
// pass through as their UTF-8 encoding.
func byteLevelDecode(piece string) []byte {
	out := make([]byte, 0, len(piece))
	for _, r := range piece {
		if b, ok := runeToByte[r]; ok {
			out = append(out, b)
		} else {
			out = utf8.AppendRune(out, r)
		}
	}
	return out
}
