package grammar

import "unicode/utf8"

// utf8Sequences returns byte-range sequences whose union is exactly the
// UTF-8 encodings of the code points in [lo, hi], surrogates excluded
// (the construction RE2 and Rust's regex-syntax use): the range is split
// at encoding-length boundaries, then until every position of the
// encodings of lo and hi can vary independently.
func utf8Sequences(lo, hi rune) [][]Elem {
	var out [][]Elem
	var split func(lo, hi rune)
	split = func(lo, hi rune) {
		if lo > hi {
			return
		}
		// Surrogates are not scalar values: cut them out.
		if lo <= 0xDFFF && hi >= 0xD800 {
			split(lo, 0xD7FF)
			split(0xE000, hi)
			return
		}
		// Different encoded lengths.
		for _, b := range []rune{0x7F, 0x7FF, 0xFFFF} {
			if lo <= b && hi > b {
				split(lo, b)
				split(b+1, hi)
				return
			}
		}
		if hi < utf8.RuneSelf {
			out = append(out, []Elem{Byte(byte(lo), byte(hi))})
			return
		}
		n := utf8.RuneLen(lo)
		for i := 1; i < n; i++ {
			m := rune(1)<<(6*i) - 1
			if lo&^m != hi&^m {
				if lo&m != 0 {
					split(lo, lo|m)
					split((lo|m)+1, hi)
					return
				}
				if hi&m != m {
					split(lo, (hi&^m)-1)
					split(hi&^m, hi)
					return
				}
			}
		}
		var a, b [utf8.UTFMax]byte
		utf8.EncodeRune(a[:], lo)
		utf8.EncodeRune(b[:], hi)
		s := make([]Elem, n)
		for i := range n {
			s[i] = Byte(a[i], b[i])
		}
		out = append(out, s)
	}
	split(lo, hi)
	return out
}
