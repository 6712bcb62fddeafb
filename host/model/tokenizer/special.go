package tokenizer

import (
	"sort"
	"strings"
)

// specialMatcher finds special-token texts inside input text. At each
// position the longest matching special wins; scanning is left to right, so
// the result is the leftmost-longest segmentation llama.cpp and HF produce.
type specialMatcher struct {
	byFirst [256][]specialEntry // sorted by descending text length
	any     bool
}

type specialEntry struct {
	text string
	id   int32
}

func newSpecialMatcher(entries map[string]int32) specialMatcher {
	var m specialMatcher
	for text, id := range entries {
		if text == "" {
			continue
		}
		m.byFirst[text[0]] = append(m.byFirst[text[0]], specialEntry{text, id})
		m.any = true
	}
	for i := range m.byFirst {
		e := m.byFirst[i]
		sort.Slice(e, func(a, b int) bool {
			if len(e[a].text) != len(e[b].text) {
				return len(e[a].text) > len(e[b].text)
			}
			return e[a].text < e[b].text
		})
	}
	return m
}

// fragment is either raw text (id < 0) or one special token.
type fragment struct {
	text string
	id   int32
}

// split cuts text into raw-text and special-token fragments. Empty raw
// fragments are dropped.
func (m *specialMatcher) split(text string) []fragment {
	if !m.any {
		if text == "" {
			return nil
		}
		return []fragment{{text: text, id: -1}}
	}
	var out []fragment
	start := 0
	for i := 0; i < len(text); {
		cands := m.byFirst[text[i]]
		matched := false
		for _, c := range cands {
			if strings.HasPrefix(text[i:], c.text) {
				if i > start {
					out = append(out, fragment{text: text[start:i], id: -1})
				}
				out = append(out, fragment{text: c.text, id: c.id})
				i += len(c.text)
				start = i
				matched = true
				break
			}
		}
		if !matched {
			i++
		}
	}
	if start < len(text) {
		out = append(out, fragment{text: text[start:], id: -1})
	}
	return out
}
