package server

import "bytes"

// stopMatcher finds stop strings in generated text as it grows. It keeps the
// whole text and how much of it was emitted; text that could be the start of
// a stop string is held back until it is known not to be one, so a stop
// string (or any part of it) is never emitted.
//
// Invariant: text[:sent] never overlaps an occurrence of a stop string, and
// every cut point lies on a rune boundary (text is valid UTF-8, stop strings
// are valid UTF-8, and a match or a held-back suffix starts with a stop
// string's first byte, which is a rune start).
type stopMatcher struct {
	stops  [][]byte
	maxLen int
	text   []byte
	sent   int
	// matched is the stop string that ended the text, once one did.
	matched string
}

func newStopMatcher(stops []string) stopMatcher {
	m := stopMatcher{}
	for _, s := range stops {
		m.stops = append(m.stops, []byte(s))
		m.maxLen = max(m.maxLen, len(s))
	}
	return m
}

// add appends s and returns the text that can be emitted now. hit reports
// that a stop string was found: the text is truncated just before it and the
// generation is over.
func (m *stopMatcher) add(s string) (emit string, hit bool) {
	old := len(m.text)
	m.text = append(m.text, s...)
	if len(m.stops) > 0 {
		// Only matches that end in the new text are new; they start at
		// most maxLen-1 bytes before it.
		from := max(0, old-(m.maxLen-1))
		best := -1
		for _, st := range m.stops {
			if i := bytes.Index(m.text[from:], st); i >= 0 && (best < 0 || from+i < best) {
				best = from + i
				m.matched = string(st)
			}
		}
		if best >= 0 {
			emit = string(m.text[m.sent:best])
			m.text = m.text[:best]
			m.sent = best
			return emit, true
		}
	}
	end := len(m.text) - m.holdBack()
	emit = string(m.text[m.sent:end])
	m.sent = end
	return emit, false
}

// holdBack is the length of the longest suffix of the unsent text that is a
// proper prefix of some stop string.
func (m *stopMatcher) holdBack() int {
	tail := m.text[m.sent:]
	hold := 0
	for _, st := range m.stops {
		for k := min(len(st)-1, len(tail)); k > hold; k-- {
			if bytes.HasSuffix(tail, st[:k]) {
				hold = k
				break
			}
		}
	}
	return hold
}

// flush ends the text: whatever was held back is not a stop string after all.
func (m *stopMatcher) flush() string {
	emit := string(m.text[m.sent:])
	m.sent = len(m.text)
	return emit
}

// length is the length of the text so far (held back included).
func (m *stopMatcher) length() int { return len(m.text) }
