package synth

import (
	_ "embed"
	"fmt"
	"sort"
	"strings"
)

//go:embed corpus.txt
var corpus string

const space = "\u2581"

// Vocab is a SentencePiece vocabulary with scores and token types.
type Vocab struct {
	Tokens []string
	Scores []float32
	Types  []int32
}

// buildVocab returns exactly size pieces: <unk>, <s>, </s>, 256 byte tokens,
// single characters, corpus merges (highest scores), then letter n-grams.
func buildVocab(size int) (Vocab, error) {
	var v Vocab
	seen := map[string]bool{}
	add := func(tok string, score float32, typ int32) {
		if len(v.Tokens) >= size || seen[tok] {
			return
		}
		seen[tok] = true
		v.Tokens = append(v.Tokens, tok)
		v.Scores = append(v.Scores, score)
		v.Types = append(v.Types, typ)
	}
	add("<unk>", 0, 2)
	add("<s>", 0, 3)
	add("</s>", 0, 3)
	for b := 0; b < 256; b++ {
		add(fmt.Sprintf("<0x%02X>", b), 0, 6)
	}
	singles := space + "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.,!?'\";:-()"
	for _, r := range singles {
		add(string(r), -1000, 1)
	}
	for i, m := range learnMerges(corpus, size) {
		add(m, float32(-i), 1)
	}
	// Fill with letter n-grams, with and without the word-start marker, so
	// any lower-case word merges into pieces of up to four characters.
	letters := "etaoinshrdlucmfwypvbgkjqxz"
	score := float32(-2000)
	var grams []string
	for _, a := range letters {
		grams = append(grams, space+string(a))
		for _, b := range letters {
			grams = append(grams, string(a)+string(b), space+string(a)+string(b))
		}
	}
	for _, a := range letters {
		for _, b := range letters {
			for _, c := range letters {
				grams = append(grams, string(a)+string(b)+string(c))
			}
		}
	}
	for _, a := range letters {
		for _, b := range letters {
			for _, c := range letters {
				grams = append(grams, space+string(a)+string(b)+string(c))
			}
		}
	}
	for _, g := range grams {
		add(g, score, 1)
		score -= 0.001
	}
	if len(v.Tokens) < size {
		return Vocab{}, fmt.Errorf("synth: vocabulary reaches only %d of %d pieces", len(v.Tokens), size)
	}
	return v, nil
}

// learnMerges runs byte-pair merging over the corpus's words (with the
// SentencePiece word-start marker) and returns the merged pieces in the
// order they were learned, most frequent first.
func learnMerges(text string, limit int) []string {
	counts := map[string]int{}
	for _, w := range strings.Fields(text) {
		counts[space+w]++
	}
	type word struct {
		parts []string
		n     int
	}
	words := make([]word, 0, len(counts))
	keys := make([]string, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		var parts []string
		for _, r := range k {
			parts = append(parts, string(r))
		}
		words = append(words, word{parts, counts[k]})
	}
	var merges []string
	for len(merges) < limit {
		pairs := map[[2]string]int{}
		for _, w := range words {
			for i := 0; i+1 < len(w.parts); i++ {
				pairs[[2]string{w.parts[i], w.parts[i+1]}] += w.n
			}
		}
		if len(pairs) == 0 {
			break
		}
		var best [2]string
		bestN := 0
		for p, n := range pairs {
			if n > bestN || n == bestN && p[0]+"\x00"+p[1] < best[0]+"\x00"+best[1] {
				best, bestN = p, n
			}
		}
		merged := best[0] + best[1]
		merges = append(merges, merged)
		for wi := range words {
			w := &words[wi]
			out := w.parts[:0:0]
			for i := 0; i < len(w.parts); i++ {
				if i+1 < len(w.parts) && w.parts[i] == best[0] && w.parts[i+1] == best[1] {
					out = append(out, merged)
					i++
					continue
				}
				out = append(out, w.parts[i])
			}
			w.parts = out
		}
	}
	return merges
}
