package grammar

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"slices"
)

// Token flags (one byte per token in the vocabulary wire form).
const (
	// FlagSpecial marks a token that is never text (control tokens,
	// padding rows): never allowed, except as FlagEOG says.
	FlagSpecial = 1 << 0
	// FlagEOG marks an end-of-generation token: allowed exactly when the
	// constraint accepts what was generated.
	FlagEOG = 1 << 1
)

// MaxTokenBytes bounds one token's bytes (trie depth).
const MaxTokenBytes = 1<<16 - 1

// Vocab is a tokenizer's vocabulary as the matcher sees it: the bytes each
// token appends, and a token trie in preorder so that computing a mask
// walks each shared prefix once and skips a whole subtree as soon as its
// prefix is refused. Immutable; shared by every Program built on it.
type Vocab struct {
	n      int
	bytes  [][]byte
	flags  []uint8
	eog    []int32
	tByte  []byte
	tDepth []uint16 // 1 for a child of the root
	tEnd   []int32  // preorder index just past the node's subtree
	tTok   []int32  // tokens ending at node k: toks[tTok[k]:tTok[k+1]]
	toks   []int32
	maxLen int
}

// NewVocab builds a Vocab of len(tokens) ids; flags may be nil (no special
// tokens) or hold one FlagSpecial|FlagEOG byte per token. A token with no
// bytes that is not an EOG token is never allowed.
func NewVocab(tokens [][]byte, flags []uint8) (*Vocab, error) {
	if flags != nil && len(flags) != len(tokens) {
		return nil, fmt.Errorf("%w: %d tokens but %d flags", ErrInvalid, len(tokens), len(flags))
	}
	v := &Vocab{n: len(tokens), bytes: make([][]byte, len(tokens)), flags: make([]uint8, len(tokens))}
	var order []int32
	for i, t := range tokens {
		if flags != nil {
			v.flags[i] = flags[i]
		}
		if v.flags[i]&FlagEOG != 0 {
			v.flags[i] |= FlagSpecial
			v.eog = append(v.eog, int32(i))
		}
		if len(t) > MaxTokenBytes {
			return nil, fmt.Errorf("%w: token %d is %d bytes, at most %d", ErrInvalid, i, len(t), MaxTokenBytes)
		}
		if v.flags[i]&FlagSpecial != 0 || len(t) == 0 {
			v.flags[i] |= FlagSpecial
			continue
		}
		v.bytes[i] = t
		order = append(order, int32(i))
		v.maxLen = max(v.maxLen, len(t))
	}
	slices.SortStableFunc(order, func(a, b int32) int { return bytes.Compare(v.bytes[a], v.bytes[b]) })
	var path []int32 // node index at each depth
	var prev []byte
	closeTo := func(depth int) {
		for len(path) > depth {
			v.tEnd[path[len(path)-1]] = int32(len(v.tByte))
			path = path[:len(path)-1]
		}
	}
	for _, id := range order {
		b := v.bytes[id]
		l := 0
		for l < len(b) && l < len(prev) && b[l] == prev[l] {
			l++
		}
		closeTo(l)
		for d := l; d < len(b); d++ {
			path = append(path, int32(len(v.tByte)))
			v.tByte = append(v.tByte, b[d])
			v.tDepth = append(v.tDepth, uint16(d+1))
			v.tEnd = append(v.tEnd, 0)
			v.tTok = append(v.tTok, int32(len(v.toks)))
		}
		v.toks = append(v.toks, id)
		prev = b
	}
	closeTo(0)
	v.tTok = append(v.tTok, int32(len(v.toks)))
	return v, nil
}

// Size is the number of token ids (the width of a mask in bits).
func (v *Vocab) Size() int { return v.n }

// Words is the length of a mask in uint32 words.
func (v *Vocab) Words() int { return (v.n + 31) / 32 }

// Nodes is the number of trie nodes.
func (v *Vocab) Nodes() int { return len(v.tByte) }

// Bytes returns token id's bytes (nil for special tokens).
func (v *Vocab) Bytes(id int32) []byte {
	if id < 0 || int(id) >= v.n {
		return nil
	}
	return v.bytes[id]
}

// IsEOG reports whether id is an end-of-generation token.
func (v *Vocab) IsEOG(id int32) bool {
	return id >= 0 && int(id) < v.n && v.flags[id]&FlagEOG != 0
}

// MarshalVocab encodes a vocabulary as the constraint ABI hands it to a
// plugin: "KVV1", u32 token count, then per token a flags byte, a u32 byte
// length and the bytes (all little-endian).
func MarshalVocab(tokens [][]byte, flags []uint8) []byte {
	n := 8
	for _, t := range tokens {
		n += 5 + len(t)
	}
	out := make([]byte, 0, n)
	out = append(out, "KVV1"...)
	out = binary.LittleEndian.AppendUint32(out, uint32(len(tokens)))
	for i, t := range tokens {
		var f uint8
		if flags != nil {
			f = flags[i]
		}
		out = append(out, f)
		out = binary.LittleEndian.AppendUint32(out, uint32(len(t)))
		out = append(out, t...)
	}
	return out
}

// MaxVocab bounds the token count of a vocabulary on the wire.
const MaxVocab = 1 << 22

// DecodeVocab parses MarshalVocab's form and builds the Vocab. The token
// bytes alias b.
func DecodeVocab(b []byte) (*Vocab, error) {
	if len(b) < 8 || string(b[:4]) != "KVV1" {
		return nil, fmt.Errorf("%w: not a KVV1 vocabulary", ErrInvalid)
	}
	n := binary.LittleEndian.Uint32(b[4:])
	if n == 0 || n > MaxVocab || uint64(n)*5 > uint64(len(b)-8) {
		return nil, fmt.Errorf("%w: vocabulary of %d tokens in %d bytes (want 1..%d tokens of at least 5 bytes each)", ErrInvalid, n, len(b), MaxVocab)
	}
	tokens := make([][]byte, n)
	flags := make([]uint8, n)
	b = b[8:]
	for i := range tokens {
		if len(b) < 5 {
			return nil, fmt.Errorf("%w: vocabulary truncated at token %d", ErrInvalid, i)
		}
		flags[i] = b[0]
		l := binary.LittleEndian.Uint32(b[1:])
		b = b[5:]
		if uint64(l) > uint64(len(b)) {
			return nil, fmt.Errorf("%w: token %d claims %d bytes, %d left", ErrInvalid, i, l, len(b))
		}
		tokens[i] = b[:l:l]
		b = b[l:]
	}
	if len(b) != 0 {
		return nil, fmt.Errorf("%w: %d trailing bytes after the vocabulary", ErrInvalid, len(b))
	}
	return NewVocab(tokens, flags)
}
