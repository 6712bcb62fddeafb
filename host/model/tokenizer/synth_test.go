package tokenizer

import (
	"fmt"
	"github.com/kvhost/kvhost/internal/testmodels"
	"sort"
	"strings"
	"testing"
)

// findShared finds the repository's models/stories260K.gguf (the name is
// historical: it used to live in ../shared).
func findShared() (string, error) { return testmodels.Stories260K() }

// synthSPM is a SentencePiece vocabulary that needs no files: specials, all
// 256 byte tokens, and pieces of common English with descending scores.
func synthSPM(t testing.TB) *SentencePiece {
	toks := []string{"<unk>", "<s>", "</s>"}
	types := []int32{TypeUnknown, TypeControl, TypeControl}
	for b := 0; b < 256; b++ {
		toks = append(toks, fmt.Sprintf("<0x%02X>", b))
		types = append(types, TypeByte)
	}
	pieces := []string{"▁t", "he", "▁a", "▁the", "in", "▁s", "er", "▁w", "on", "▁o", "re", "▁c", "at", "en", "nd",
		"▁and", "ed", "▁to", "is", "▁of", "or", "es", "it", "▁b", "▁f", "▁in", "ing", "▁h", "▁p", "▁m", "an",
		"▁", "e", "t", "a", "o", "i", "n", "s", "h", "r", "d", "l", "c", "u", "m", "w", "f", "g", "y", "p", "b",
		"v", "k", ".", ",", "x", "j", "q", "z", "T", "L", "O", "H", "'", "\"", "!", "é"}
	scores := make([]float32, len(toks))
	for i, p := range pieces {
		toks = append(toks, p)
		types = append(types, TypeNormal)
		scores = append(scores, -float32(i))
	}
	toks = append(toks, "<tool>")
	types = append(types, TypeUserDefined)
	scores = append(scores, 0)
	s, err := NewSentencePiece(SPMConfig{Tokens: toks, Scores: scores, Types: types, BOS: 1, EOS: 2, UNK: 0, AddBOS: true})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// trainBPE learns nMerges byte-level merges from text the textbook way (most
// frequent adjacent pair over GPT-2 pre-tokens, ties by pair text), giving a
// realistic vocabulary for benchmarks and the reference comparison.
func trainBPE(t testing.TB, text string, nMerges int, pre string) BPEConfig {
	var toks []string
	for b := 0; b < 256; b++ {
		toks = append(toks, byteRuneStr[b])
	}
	words := map[string]int{}
	preTokenize(pre, text, nil, func(p string) { words[p]++ })
	type word struct {
		syms []string
		n    int
	}
	var ws []word
	for w, n := range words {
		var syms []string
		for i := 0; i < len(w); i++ {
			syms = append(syms, byteRuneStr[w[i]])
		}
		ws = append(ws, word{syms, n})
	}
	var merges []string
	seen := map[string]bool{}
	for len(merges) < nMerges {
		counts := map[[2]string]int{}
		for _, w := range ws {
			for i := 0; i+1 < len(w.syms); i++ {
				counts[[2]string{w.syms[i], w.syms[i+1]}] += w.n
			}
		}
		var pairs [][2]string
		for p := range counts {
			pairs = append(pairs, p)
		}
		if len(pairs) == 0 {
			break
		}
		sort.Slice(pairs, func(i, j int) bool {
			if counts[pairs[i]] != counts[pairs[j]] {
				return counts[pairs[i]] > counts[pairs[j]]
			}
			return pairs[i][0]+" "+pairs[i][1] < pairs[j][0]+" "+pairs[j][1]
		})
		best := pairs[0]
		merges = append(merges, best[0]+" "+best[1])
		if m := best[0] + best[1]; !seen[m] {
			seen[m] = true
			toks = append(toks, m)
		}
		for k := range ws {
			s := ws[k].syms
			var out []string
			for i := 0; i < len(s); i++ {
				if i+1 < len(s) && s[i] == best[0] && s[i+1] == best[1] {
					out = append(out, best[0]+best[1])
					i++
				} else {
					out = append(out, s[i])
				}
			}
			ws[k].syms = out
		}
	}
	toks = append(toks, "<|endoftext|>")
	return BPEConfig{Tokens: toks, Merges: merges, PreTokenizer: pre, BOS: -1, EOS: int32(len(toks) - 1),
		Specials: map[string]int32{"<|endoftext|>": int32(len(toks) - 1)}}
}

// refBPE is a naive O(n²) byte-level BPE: per pre-token, rescan for the
// lowest-rank adjacent pair (leftmost on ties) after every merge.
func refBPE(cfg BPEConfig, text string) []int32 {
	rank := map[string]int{}
	for i, m := range cfg.Merges {
		if _, ok := rank[m]; !ok {
			rank[m] = i
		}
	}
	id := map[string]int32{}
	for i, tok := range cfg.Tokens {
		if _, ok := id[tok]; !ok {
			id[tok] = int32(i)
		}
	}
	var out []int32
	preTokenize(cfg.PreTokenizer, text, nil, func(p string) {
		var syms []string
		for i := 0; i < len(p); i++ {
			syms = append(syms, byteRuneStr[p[i]])
		}
		for {
			best, bestRank := -1, len(cfg.Merges)
			for i := 0; i+1 < len(syms); i++ {
				if r, ok := rank[syms[i]+" "+syms[i+1]]; ok && r < bestRank {
					best, bestRank = i, r
				}
			}
			if best < 0 {
				break
			}
			syms[best] += syms[best+1]
			syms = append(syms[:best+1], syms[best+2:]...)
		}
		for _, s := range syms {
			out = append(out, id[s])
		}
	})
	return out
}

const englishSample = `The quick brown fox jumps over the lazy dog. It was the best of times, it was the worst of times,
it was the age of wisdom, it was the age of foolishness, it was the epoch of belief, it was the epoch of incredulity,
it was the season of Light, it was the season of Darkness, it was the spring of hope, it was the winter of despair.
Once upon a time, there was a little girl named Lily. She loved to play outside in the sunshine with her friends.
"Don't go too far," her mother said. 'We'll be fine,' Lily replied, and they ran toward the old oak tree in 1999. `

func english(n int) string {
	return strings.Repeat(englishSample, n/len(englishSample)+1)[:n]
}
