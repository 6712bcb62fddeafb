package tokenizer

import (
	"fmt"
	"math"
	"strings"
	"unicode/utf8"
)

// SPMConfig describes a SentencePiece-style vocabulary (GGUF
// tokenizer.ggml.model = "llama").
type SPMConfig struct {
	Tokens []string
	Scores []float32 // merge priority; must have len(Tokens) entries
	// Types per token: 1 normal, 2 unknown, 3 control, 4 user-defined,
	// 5 unused, 6 byte (0 is read as normal). When nil, every token is normal
	// except "<0xXX>" pieces (byte) and BOS/EOS (control).
	Types []int32
	// BOS, EOS and UNK are token ids, -1 when absent.
	BOS, EOS, UNK  int32
	AddBOS, AddEOS bool
	// AddSpacePrefix prepends U+2581 to the text (GGUF
	// tokenizer.ggml.add_space_prefix). nil means true, the GGUF default.
	AddSpacePrefix *bool
	// ExtraEOG lists more end-of-generation ids (e.g. GGUF eot/eom ids).
	ExtraEOG []int32
}

// SentencePiece encodes like llama.cpp's llm_tokenizer_spm: score-driven
// bigram merges over UTF-8 characters with byte fallback.
type SentencePiece struct {
	*vocab
	scores         []float32
	unk            int32
	addSpacePrefix bool
	byteTok        [256]int32 // -1 when the vocabulary lacks <0xXX>
}

var _ Tokenizer = (*SentencePiece)(nil)

const spmSpace = "\u2581"

// NewSentencePiece validates cfg and builds the tokenizer. cfg's slices are
// retained, not copied; the caller must not modify them afterwards.
func NewSentencePiece(cfg SPMConfig) (*SentencePiece, error) {
	v, err := newVocab(cfg.Tokens, cfg.Types, cfg.BOS, cfg.EOS, cfg.AddBOS, cfg.AddEOS, cfg.ExtraEOG)
	if err != nil {
		return nil, err
	}
	n := len(cfg.Tokens)
	if len(cfg.Scores) != n {
		return nil, configErr("Scores has %d entries but Tokens has %d; they must agree", len(cfg.Scores), n)
	}
	for i, sc := range cfg.Scores {
		if math.IsNaN(float64(sc)) {
			return nil, configErr("score of token %d is NaN", i)
		}
	}
	if cfg.UNK < -1 || int(cfg.UNK) >= n {
		return nil, configErr("UNK id %d out of range [-1, %d)", cfg.UNK, n)
	}
	if cfg.Types == nil && cfg.UNK >= 0 {
		v.types[cfg.UNK] = TypeUnknown
	}
	s := &SentencePiece{vocab: v, scores: cfg.Scores, unk: cfg.UNK, addSpacePrefix: true}
	if cfg.AddSpacePrefix != nil {
		s.addSpacePrefix = *cfg.AddSpacePrefix
	}
	for i := range s.byteTok {
		s.byteTok[i] = -1
	}
	v.bytes = make([][]byte, n)
	specials := map[string]int32{}
	for i, t := range cfg.Tokens {
		switch v.types[i] {
		case TypeByte:
			b, ok := parseByteToken(t)
			if !ok {
				return nil, configErr("token %d is typed byte but its text %q is not <0xXX>", i, t)
			}
			if s.byteTok[b] < 0 {
				s.byteTok[b] = int32(i)
			}
			v.bytes[i] = []byte{b}
		case TypeNormal, TypeUserDefined:
			v.bytes[i] = []byte(strings.ReplaceAll(t, spmSpace, " "))
		case TypeUnknown:
			v.bytes[i] = unknownPiece
		}
		if ty := v.types[i]; (ty == TypeControl || ty == TypeUserDefined || ty == TypeUnknown) && t != "" {
			if _, dup := specials[t]; !dup {
				specials[t] = int32(i)
			}
		}
	}
	v.special = newSpecialMatcher(specials)
	return s, nil
}

func (s *SentencePiece) stripsLeadingSpace() bool { return s.addSpacePrefix }

// Encode tokenizes text without parsing special-token text.
func (s *SentencePiece) Encode(text string, addSpecial bool) ([]int32, error) {
	return s.EncodeWithOptions(text, EncodeOptions{AddSpecial: addSpecial})
}

// EncodeWithOptions tokenizes text. Like llama.cpp, a space is prepended
// (when AddSpacePrefix) to every raw-text fragment that starts the input or
// follows a parsed special token; Decode removes only the one at the start.
func (s *SentencePiece) EncodeWithOptions(text string, opts EncodeOptions) ([]int32, error) {
	out := s.prefix(opts)
	var frags []fragment
	if opts.ParseSpecial {
		frags = s.special.split(text)
	} else if text != "" {
		frags = []fragment{{text: text, id: -1}}
	}
	var sess spmSession
	prevSpecial := true
	for _, f := range frags {
		if f.id >= 0 {
			out = append(out, f.id)
			prevSpecial = true
			continue
		}
		raw := f.text
		if s.addSpacePrefix && prevSpecial {
			raw = " " + raw
		}
		var err error
		out, err = sess.tokenize(s, strings.ReplaceAll(raw, " ", spmSpace), out)
		if err != nil {
			return nil, err
		}
		prevSpecial = false
	}
	return s.suffix(out, opts), nil
}

// Decode returns the text of ids (see Tokenizer.Decode).
func (s *SentencePiece) Decode(ids []int32) (string, error) { return decodeIDs(s, ids) }

// mergeID returns the id of piece when it may take part in merges: normal
// and user-defined tokens only, so control text like "<s>" and byte-token
// text like "<0x41>" typed by a user never become those tokens.
func (s *SentencePiece) mergeID(piece string) (int32, bool) {
	id, ok := s.toID[piece]
	if !ok {
		return 0, false
	}
	ty := s.types[id]
	return id, ty == TypeNormal || ty == TypeUserDefined
}

type spmSymbol struct {
	start, n   int
	prev, next int
}

type spmBigram struct {
	left, right int
	score       float32
	size        int
}

// spmSession holds scratch for one Encode call.
type spmSession struct {
	syms []spmSymbol
	heap []spmBigram
}

// less orders the queue: higher score first, then the leftmost pair.
func bigramLess(a, b spmBigram) bool {
	if a.score != b.score {
		return a.score > b.score
	}
	return a.left < b.left
}

func (ss *spmSession) push(b spmBigram) {
	h := append(ss.heap, b)
	i := len(h) - 1
	for i > 0 {
		p := (i - 1) / 2
		if !bigramLess(h[i], h[p]) {
			break
		}
		h[i], h[p] = h[p], h[i]
		i = p
	}
	ss.heap = h
}

func (ss *spmSession) pop() spmBigram {
	h := ss.heap
	top := h[0]
	last := len(h) - 1
	h[0] = h[last]
	h = h[:last]
	i := 0
	for {
		l, r, m := 2*i+1, 2*i+2, i
		if l < len(h) && bigramLess(h[l], h[m]) {
			m = l
		}
		if r < len(h) && bigramLess(h[r], h[m]) {
			m = r
		}
		if m == i {
			break
		}
		h[i], h[m] = h[m], h[i]
		i = m
	}
	ss.heap = h
	return top
}

func (ss *spmSession) tryAdd(s *SentencePiece, text string, left, right int) {
	if left < 0 || right < 0 {
		return
	}
	l, r := ss.syms[left], ss.syms[right]
	piece := text[l.start : l.start+l.n+r.n]
	id, ok := s.mergeID(piece)
	if !ok {
		return
	}
	ss.push(spmBigram{left: left, right: right, score: s.scores[id], size: len(piece)})
}

// tokenize appends the ids of one escaped fragment to out.
func (ss *spmSession) tokenize(s *SentencePiece, text string, out []int32) ([]int32, error) {
	ss.syms = ss.syms[:0]
	ss.heap = ss.heap[:0]
	for i := 0; i < len(text); {
		_, size := utf8.DecodeRuneInString(text[i:])
		k := len(ss.syms)
		ss.syms = append(ss.syms, spmSymbol{start: i, n: size, prev: k - 1, next: k + 1})
		i += size
	}
	if len(ss.syms) == 0 {
		return out, nil
	}
	ss.syms[len(ss.syms)-1].next = -1
	for i := 1; i < len(ss.syms); i++ {
		ss.tryAdd(s, text, i-1, i)
	}
	for len(ss.heap) > 0 {
		b := ss.pop()
		l, r := &ss.syms[b.left], &ss.syms[b.right]
		if l.n == 0 || r.n == 0 || l.n+r.n != b.size {
			continue // stale: one side was merged since this pair was queued
		}
		l.n += r.n
		r.n = 0
		l.next = r.next
		if r.next >= 0 {
			ss.syms[r.next].prev = b.left
		}
		ss.tryAdd(s, text, l.prev, b.left)
		ss.tryAdd(s, text, b.left, l.next)
	}
	for i := 0; i >= 0; i = ss.syms[i].next {
		sym := ss.syms[i]
		piece := text[sym.start : sym.start+sym.n]
		if id, ok := s.mergeID(piece); ok {
			out = append(out, id)
			continue
		}
		var err error
		if out, err = s.fallback(piece, out); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// fallback encodes one character missing from the vocabulary as byte tokens,
// or as one UNK when some byte token is missing.
func (s *SentencePiece) fallback(piece string, out []int32) ([]int32, error) {
	for i := 0; i < len(piece); i++ {
		if s.byteTok[piece[i]] < 0 {
			if s.unk < 0 {
				return nil, fmt.Errorf("%w: %q is not in the vocabulary, byte <0x%02X> is missing and there is no UNK token", ErrUnknownByte, piece, piece[i])
			}
			return append(out, s.unk), nil
		}
	}
	for i := 0; i < len(piece); i++ {
		out = append(out, s.byteTok[piece[i]])
	}
	return out, nil
}
