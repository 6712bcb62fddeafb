package server

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// referenceStop is the straightforward answer. Generation stops after the
// first piece (token) that makes the text contain a stop string, so look at
// the text after each piece; the output is that text cut at the earliest
// occurrence of any stop string in it. (With stops "abc" and "b", "a" then
// "b" stops at "b": the "c" that would have completed "abc" is never
// generated.)
func referenceStop(pieces []string, stops []string) (string, bool) {
	text := ""
	for _, p := range pieces {
		text += p
		cut := -1
		for _, s := range stops {
			if i := strings.Index(text, s); i >= 0 && (cut < 0 || i < cut) {
				cut = i
			}
		}
		if cut >= 0 {
			return text[:cut], true
		}
	}
	return text, false
}

func runStop(pieces []string, stops []string) (emitted []string, hit bool) {
	m := newStopMatcher(stops)
	for _, p := range pieces {
		e, h := m.add(p)
		emitted = append(emitted, e)
		if h {
			return emitted, true
		}
	}
	return append(emitted, m.flush()), false
}

func TestStopMatcher(t *testing.T) {
	tests := []struct {
		pieces, stops []string
		emitted       []string
		hit           bool
	}{
		{[]string{"ab", "cE", "ND"}, []string{"END"}, []string{"ab", "c", ""}, true},
		{[]string{"E", "N", "x"}, []string{"END"}, []string{"", "", "ENx", ""}, false},
		{[]string{"xx", "EN"}, []string{"END"}, []string{"xx", "", "EN"}, false},
		{[]string{"abc"}, nil, []string{"abc", ""}, false},
		{[]string{"a", "b", "c"}, []string{"bc", "abx"}, []string{"", "", "a"}, true},
		{[]string{"héllo wö", "rld"}, []string{"wörld"}, []string{"héllo ", ""}, true},
		// "b" completes first; the longer "abc" that starts earlier never can.
		{[]string{"0a", "b", "c"}, []string{"abc", "b"}, []string{"0", "a"}, true},
		// Within one piece the earliest start wins.
		{[]string{"0abc"}, []string{"b", "abc"}, []string{"0"}, true},
	}
	for _, tc := range tests {
		got, hit := runStop(tc.pieces, tc.stops)
		if strings.Join(got, "|") != strings.Join(tc.emitted, "|") || hit != tc.hit {
			t.Errorf("pieces %q stops %q: emitted %q hit %v, want %q %v", tc.pieces, tc.stops, got, hit, tc.emitted, tc.hit)
		}
	}
}

// FuzzStopMatcher compares the streaming matcher with referenceStop and
// checks that nothing emitted is ever taken back.
func FuzzStopMatcher(f *testing.F) {
	f.Add("abcENDxyz", "END", "x", uint64(0b1010))
	f.Add("aababc", "abc", "bab", uint64(0xff))
	f.Add("héllo wörld", "ö", "lo w", uint64(3))
	f.Fuzz(func(t *testing.T, text, s1, s2 string, splits uint64) {
		var stops []string
		for _, s := range []string{s1, s2} {
			if s != "" && utf8.ValidString(s) {
				stops = append(stops, s)
			}
		}
		if !utf8.ValidString(text) {
			return // the matcher only ever sees the detokenizer's valid output
		}
		// Split text into pieces at rune boundaries chosen by splits.
		var pieces []string
		start, n := 0, 0
		for i := range text {
			if i > start && splits&(1<<(uint(n)%64)) != 0 {
				pieces = append(pieces, text[start:i])
				start = i
			}
			n++
		}
		pieces = append(pieces, text[start:])
		got, hit := runStop(pieces, stops)
		want, wantHit := referenceStop(pieces, stops)
		if strings.Join(got, "") != want || hit != wantHit {
			t.Fatalf("text %q pieces %q stops %q: got %q (hit %v), want %q (hit %v)", text, pieces, stops, strings.Join(got, ""), hit, want, wantHit)
		}
		for _, e := range got {
			if !utf8.ValidString(e) {
				t.Fatalf("emitted invalid UTF-8 %q", e)
			}
		}
	})
}
