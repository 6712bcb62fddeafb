package tokenizer

import (
	"fmt"
	"strings"
)

// BPEConfig describes a byte-level BPE vocabulary (GGUF tokenizer.ggml.model
// = "gpt2", or an HF tokenizer.json with model.type "BPE").
type BPEConfig struct {
	Tokens []string
	// Types per token as in SPMConfig; nil means normal, with BOS, EOS and
	// Specials typed control.
	Types []int32
	// Merges in rank order, each "left right".
	Merges []string
	// PreTokenizer names the split regex: PreLlama3, PreQwen2 or PreGPT2.
	PreTokenizer string
	// BOS and EOS are token ids, -1 when absent.
	BOS, EOS       int32
	AddBOS, AddEOS bool
	// Specials are split out of the text (with ParseSpecial) in addition to
	// tokens typed control or user-defined.
	Specials map[string]int32
	// IgnoreMerges emits a pre-token whole when it is itself a token (HF
	// model.ignore_merges). Always on for PreLlama3, as llama.cpp does.
	IgnoreMerges bool
	// ExtraEOG lists more end-of-generation ids.
	ExtraEOG []int32
}

// BPE is a byte-level BPE tokenizer: pre-tokenize by regex, map bytes to the
// GPT-2 alphabet, apply merges lowest rank first (leftmost on ties).
type BPE struct {
	*vocab
	pre          string
	ignoreMerges bool
	merges       map[uint64]bpeMerge // key: left id << 32 | right id
	byteID       [256]int32          // token of each single byte; -1 if absent
}

type bpeMerge struct {
	rank, id int32
}

var _ Tokenizer = (*BPE)(nil)

// maxMerges bounds the merge list length.
const maxMerges = 1 << 23

// NewBPE validates cfg and builds the tokenizer. cfg's slices are retained.
func NewBPE(cfg BPEConfig) (*BPE, error) {
	pairs := make([][2]string, len(cfg.Merges))
	for i, m := range cfg.Merges {
		k := -1
		if len(m) > 1 {
			if j := strings.IndexByte(m[1:], ' '); j >= 0 {
				k = j + 1
			}
		}
		if k < 0 || k == len(m)-1 {
			return nil, configErr("merge %d %q is not of the form \"left right\"", i, m)
		}
		pairs[i] = [2]string{m[:k], m[k+1:]}
	}
	return newBPE(cfg, pairs)
}

func newBPE(cfg BPEConfig, pairs [][2]string) (*BPE, error) {
	switch cfg.PreTokenizer {
	case PreGPT2, PreLlama3, PreQwen2:
	default:
		return nil, configErr("PreTokenizer %q unknown; use %q, %q or %q", cfg.PreTokenizer, PreLlama3, PreQwen2, PreGPT2)
	}
	if len(pairs) > maxMerges {
		return nil, configErr("%d merges exceed the limit of %d", len(pairs), maxMerges)
	}
	v, err := newVocab(cfg.Tokens, cfg.Types, cfg.BOS, cfg.EOS, cfg.AddBOS, cfg.AddEOS, cfg.ExtraEOG)
	if err != nil {
		return nil, err
	}
	n := len(cfg.Tokens)
	specials := make(map[string]int32, len(cfg.Specials))
	for text, id := range cfg.Specials {
		if id < 0 || int(id) >= n {
			return nil, configErr("special %q has id %d out of range [0, %d)", text, id, n)
		}
		if cfg.Types == nil {
			v.types[id] = TypeControl
		}
		specials[text] = id
	}
	b := &BPE{vocab: v, pre: cfg.PreTokenizer,
		ignoreMerges: cfg.IgnoreMerges || cfg.PreTokenizer == PreLlama3,
		merges:       make(map[uint64]bpeMerge, len(pairs))}
	v.bytes = make([][]byte, n)
	for i, t := range cfg.Tokens {
		switch ty := v.types[i]; ty {
		case TypeNormal:
			v.bytes[i] = byteLevelDecode(t)
		case TypeUserDefined:
			v.bytes[i] = []byte(t)
		case TypeUnknown:
			v.bytes[i] = unknownPiece
		case TypeByte:
			if c, ok := parseByteToken(t); ok {
				v.bytes[i] = []byte{c}
			} else {
				v.bytes[i] = byteLevelDecode(t)
			}
		}
		if ty := v.types[i]; (ty == TypeControl || ty == TypeUserDefined) && t != "" {
			if _, dup := specials[t]; !dup {
				specials[t] = int32(i)
			}
		}
	}
	v.special = newSpecialMatcher(specials)
	for c := range b.byteID {
		b.byteID[c] = -1
		if id, ok := v.toID[byteRuneStr[c]]; ok && v.types[id] == TypeNormal {
			b.byteID[c] = id
		}
	}
	for rank, p := range pairs {
		l, okl := v.toID[p[0]]
		r, okr := v.toID[p[1]]
		m, okm := v.toID[p[0]+p[1]]
		if !okl || !okr || !okm {
			return nil, configErr("merge %d (%q %q) uses a piece missing from the vocabulary", rank, p[0], p[1])
		}
		key := uint64(uint32(l))<<32 | uint64(uint32(r))
		if _, dup := b.merges[key]; !dup {
			b.merges[key] = bpeMerge{rank: int32(rank), id: m}
		}
	}
	return b, nil
}

// Encode tokenizes text without parsing special-token text.
func (b *BPE) Encode(text string, addSpecial bool) ([]int32, error) {
	return b.EncodeWithOptions(text, EncodeOptions{AddSpecial: addSpecial})
}

// EncodeWithOptions tokenizes text.
func (b *BPE) EncodeWithOptions(text string, opts EncodeOptions) ([]int32, error) {
	out := b.prefix(opts)
	var frags []fragment
	if opts.ParseSpecial {
		frags = b.special.split(text)
	} else if text != "" {
		frags = []fragment{{text: text, id: -1}}
	}
	var sess bpeSession
	var err error
	for _, f := range frags {
		if f.id >= 0 {
			out = append(out, f.id)
			continue
		}
		sess.runes = preTokenize(b.pre, f.text, sess.runes, func(piece string) {
			if err == nil {
				out, err = sess.word(b, piece, out)
			}
		})
		if err != nil {
			return nil, err
		}
	}
	return b.suffix(out, opts), nil
}

// Decode returns the text of ids (see Tokenizer.Decode).
func (b *BPE) Decode(ids []int32) (string, error) { return decodeIDs(b, ids) }

type bpeSymbol struct {
	id         int32 // -1 once merged into its left neighbour
	prev, next int32
}

type bpeCand struct {
	rank, left int32
	lid, rid   int32
}

// bpeSession holds scratch reused across the pre-tokens of one Encode call.
type bpeSession struct {
	runes  []runeInfo
	mapped []byte
	syms   []bpeSymbol
	heap   []bpeCand
}

func candLess(a, b bpeCand) bool {
	if a.rank != b.rank {
		return a.rank < b.rank
	}
	return a.left < b.left
}

func (s *bpeSession) push(c bpeCand) {
	h := append(s.heap, c)
	i := len(h) - 1
	for i > 0 {
		p := (i - 1) / 2
		if !candLess(h[i], h[p]) {
			break
		}
		h[i], h[p] = h[p], h[i]
		i = p
	}
	s.heap = h
}

func (s *bpeSession) pop() bpeCand {
	h := s.heap
	top := h[0]
	last := len(h) - 1
	h[0] = h[last]
	h = h[:last]
	i := 0
	for {
		l, r, m := 2*i+1, 2*i+2, i
		if l < len(h) && candLess(h[l], h[m]) {
			m = l
		}
		if r < len(h) && candLess(h[r], h[m]) {
			m = r
		}
		if m == i {
			break
		}
		h[i], h[m] = h[m], h[i]
		i = m
	}
	s.heap = h
	return top
}

func (s *bpeSession) tryAdd(b *BPE, left int32) {
	if left < 0 {
		return
	}
	right := s.syms[left].next
	if right < 0 {
		return
	}
	lid, rid := s.syms[left].id, s.syms[right].id
	if m, ok := b.merges[uint64(uint32(lid))<<32|uint64(uint32(rid))]; ok {
		s.push(bpeCand{rank: m.rank, left: left, lid: lid, rid: rid})
	}
}

// word appends the ids of one pre-token.
func (s *bpeSession) word(b *BPE, piece string, out []int32) ([]int32, error) {
	if piece == "" {
		return out, nil
	}
	if b.ignoreMerges {
		s.mapped = s.mapped[:0]
		for i := 0; i < len(piece); i++ {
			s.mapped = append(s.mapped, byteRuneStr[piece[i]]...)
		}
		if id, ok := b.toID[string(s.mapped)]; ok && b.types[id] == TypeNormal {
			return append(out, id), nil
		}
	}
	s.syms = s.syms[:0]
	s.heap = s.heap[:0]
	for i := 0; i < len(piece); i++ {
		id := b.byteID[piece[i]]
		if id < 0 {
			return nil, fmt.Errorf("%w: the vocabulary has no token for byte 0x%02X", ErrUnknownByte, piece[i])
		}
		k := int32(len(s.syms))
		s.syms = append(s.syms, bpeSymbol{id: id, prev: k - 1, next: k + 1})
	}
	s.syms[len(s.syms)-1].next = -1
	for i := range s.syms {
		s.tryAdd(b, int32(i))
	}
	for len(s.heap) > 0 {
		c := s.pop()
		l := &s.syms[c.left]
		if l.id != c.lid || l.next < 0 || s.syms[l.next].id != c.rid {
			continue // stale: a neighbour changed since this pair was queued
		}
		r := &s.syms[l.next]
		l.id = b.merges[uint64(uint32(c.lid))<<32|uint64(uint32(c.rid))].id
		r.id = -1
		l.next = r.next
		if r.next >= 0 {
			s.syms[r.next].prev = c.left
		}
		s.tryAdd(b, l.prev)
		s.tryAdd(b, c.left)
	}
	for i := int32(0); i >= 0; i = s.syms[i].next {
		out = append(out, s.syms[i].id)
	}
	return out, nil
}
