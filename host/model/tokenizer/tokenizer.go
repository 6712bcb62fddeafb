package tokenizer

import (
	"errors"
	"fmt"
	"strconv"
)

// Tokenizer turns text into token ids and back. Implementations in this
// package are immutable after construction and safe for concurrent use.
type Tokenizer interface {
	// Encode tokenizes text. Special-token text in the input (for example a
	// literal "<s>") is treated as ordinary text; use EncodeWithOptions with
	// ParseSpecial to recognise it. addSpecial adds BOS/EOS per the model.
	Encode(text string, addSpecial bool) ([]int32, error)
	// Decode returns the text of ids. Control tokens contribute nothing; the
	// leading space a SentencePiece model adds is stripped from the first
	// text-contributing token.
	Decode(ids []int32) (string, error)
	VocabSize() int
	// BOS and EOS return -1 when the model has none.
	BOS() int32
	EOS() int32
	// EOG reports whether id ends generation (EOS, <|eot_id|>, <|im_end|>, ...).
	EOG(id int32) bool
	// TokenText is the raw vocabulary piece ("" when id is out of range).
	TokenText(id int32) string
	// TokenBytes is what id contributes to decoded output (nil when out of
	// range or a control token). The slice is shared: callers must not modify it.
	TokenBytes(id int32) []byte
}

// EncodeOptions controls EncodeWithOptions.
type EncodeOptions struct {
	// AddSpecial adds BOS and/or EOS as the model's configuration says.
	AddSpecial bool
	// ParseSpecial splits control and user-defined tokens (and, for BPE,
	// Specials) out of the text before tokenizing, so a rendered chat template
	// containing "<|im_start|>" yields the special id. Leave it off for
	// untrusted user text.
	ParseSpecial bool
}

// Token types as stored in GGUF tokenizer.ggml.token_type (llama.cpp's
// llama_token_type).
const (
	TypeUndefined   int32 = 0
	TypeNormal      int32 = 1
	TypeUnknown     int32 = 2
	TypeControl     int32 = 3
	TypeUserDefined int32 = 4
	TypeUnused      int32 = 5
	TypeByte        int32 = 6
)

// MaxVocab bounds the vocabulary size a config may declare; real models stay
// far below it (the largest common vocabularies are ~260k).
const MaxVocab = 1 << 22

// maxTokenLen bounds the byte length of one vocabulary piece.
const maxTokenLen = 1 << 16

var (
	// ErrInvalidConfig is wrapped by every constructor validation error.
	ErrInvalidConfig = errors.New("tokenizer: invalid config")
	// ErrUnsupported is wrapped when a tokenizer.json uses a feature this
	// package does not implement (model type, pre-tokenizer regex, ...).
	ErrUnsupported = errors.New("tokenizer: unsupported")
	// ErrInvalidToken is wrapped when Decode meets an id outside the vocabulary.
	ErrInvalidToken = errors.New("tokenizer: invalid token id")
	// ErrUnknownByte is wrapped when a byte-level BPE vocabulary lacks the
	// token for a single input byte, so the text cannot be encoded.
	ErrUnknownByte = errors.New("tokenizer: byte has no token")
)

func configErr(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalidConfig}, args...)...)
}

// knownEOG lists the texts of end-of-generation tokens across model families
// (the list llama.cpp uses). They count only when typed control or user-defined.
var knownEOG = map[string]bool{
	"<|eot_id|>":          true,
	"<|im_end|>":          true,
	"<|end_of_text|>":     true,
	"<|endoftext|>":       true,
	"<|eom_id|>":          true,
	"<|end|>":             true,
	"<end_of_turn>":       true,
	"<|end_of_turn|>":     true,
	"<EOT>":               true,
	"_<EOT>":              true,
	"<|return|>":          true,
	"<|call|>":            true,
	"<｜end▁of▁sentence｜>": true,
}

// vocab holds what both tokenizers share: pieces, types, specials, EOG set and
// the precomputed output bytes of every token.
type vocab struct {
	tokens  []string
	types   []int32
	bytes   [][]byte
	toID    map[string]int32
	bos     int32
	eos     int32
	addBOS  bool
	addEOS  bool
	eog     map[int32]bool
	special specialMatcher
}

// newVocab validates what both configs have in common; the caller fills
// v.bytes and v.special.
func newVocab(tokens []string, types []int32, bos, eos int32, addBOS, addEOS bool, extraEOG []int32) (*vocab, error) {
	n := len(tokens)
	if n == 0 {
		return nil, configErr("empty vocabulary: Tokens must hold at least one piece")
	}
	if n > MaxVocab {
		return nil, configErr("vocabulary of %d tokens exceeds the limit of %d", n, MaxVocab)
	}
	if types != nil && len(types) != n {
		return nil, configErr("Types has %d entries but Tokens has %d; they must agree (or leave Types nil)", len(types), n)
	}
	for _, f := range []struct {
		name string
		id   int32
	}{{"BOS", bos}, {"EOS", eos}} {
		if f.id < -1 || int(f.id) >= n {
			return nil, configErr("%s id %d out of range [-1, %d)", f.name, f.id, n)
		}
	}
	if addBOS && bos < 0 {
		return nil, configErr("AddBOS is set but BOS is -1")
	}
	if addEOS && eos < 0 {
		return nil, configErr("AddEOS is set but EOS is -1")
	}
	v := &vocab{tokens: tokens, bos: bos, eos: eos, addBOS: addBOS, addEOS: addEOS,
		toID: make(map[string]int32, n), eog: map[int32]bool{}}
	v.types = make([]int32, n)
	for i, t := range tokens {
		if len(t) > maxTokenLen {
			return nil, configErr("token %d is %d bytes long; the limit is %d", i, len(t), maxTokenLen)
		}
		ty := TypeNormal
		if types != nil {
			ty = types[i]
			if ty < TypeUndefined || ty > TypeByte {
				return nil, configErr("token %d has type %d; allowed types are 0..6", i, ty)
			}
			if ty == TypeUndefined {
				ty = TypeNormal
			}
		} else if _, ok := parseByteToken(t); ok {
			ty = TypeByte
		}
		v.types[i] = ty
		if _, dup := v.toID[t]; !dup {
			v.toID[t] = int32(i)
		}
	}
	if types == nil {
		for _, id := range []int32{bos, eos} {
			if id >= 0 {
				v.types[id] = TypeControl
			}
		}
	}
	if eos >= 0 {
		v.eog[eos] = true
	}
	for i, t := range tokens {
		if knownEOG[t] && (v.types[i] == TypeControl || v.types[i] == TypeUserDefined) {
			v.eog[int32(i)] = true
		}
	}
	for _, id := range extraEOG {
		if id < 0 || int(id) >= n {
			return nil, configErr("ExtraEOG id %d out of range [0, %d)", id, n)
		}
		v.eog[id] = true
	}
	// harmony (gpt-oss) ends a turn with <|return|> or a tool call with
	// <|call|>; its <|end|> closes a message (the analysis before the
	// final answer) and generation goes on: it is not an EOG token there
	// (llama.cpp's rule for vocabularies holding all three, even when a
	// file names <|end|> its end-of-turn token).
	if v.knownEOGText("<|return|>") && v.knownEOGText("<|call|>") && v.knownEOGText("<|end|>") {
		delete(v.eog, v.toID["<|end|>"])
	}
	return v, nil
}

// knownEOGText reports whether the piece text is in the vocabulary and
// an EOG token.
func (v *vocab) knownEOGText(text string) bool {
	id, ok := v.toID[text]
	return ok && v.eog[id]
}

// parseByteToken recognises "<0xXX>".
func parseByteToken(s string) (byte, bool) {
	if len(s) != 6 || s[:3] != "<0x" || s[5] != '>' {
		return 0, false
	}
	b, err := strconv.ParseUint(s[3:5], 16, 8)
	if err != nil {
		return 0, false
	}
	return byte(b), true
}

func (v *vocab) VocabSize() int { return len(v.tokens) }
func (v *vocab) BOS() int32     { return v.bos }
func (v *vocab) EOS() int32     { return v.eos }
func (v *vocab) EOG(id int32) bool {
	return v.eog[id]
}

func (v *vocab) TokenText(id int32) string {
	if id < 0 || int(id) >= len(v.tokens) {
		return ""
	}
	return v.tokens[id]
}

func (v *vocab) TokenBytes(id int32) []byte {
	if id < 0 || int(id) >= len(v.bytes) {
		return nil
	}
	return v.bytes[id]
}

// unknownPiece is what an unknown token decodes to (U+2585, as llama.cpp).
var unknownPiece = []byte("\u2585")

// prefix starts an encoding with BOS when configured.
func (v *vocab) prefix(opts EncodeOptions) []int32 {
	out := make([]int32, 0, 16)
	if opts.AddSpecial && v.addBOS {
		out = append(out, v.bos)
	}
	return out
}

func (v *vocab) suffix(out []int32, opts EncodeOptions) []int32 {
	if opts.AddSpecial && v.addEOS {
		out = append(out, v.eos)
	}
	return out
}

// decodeIDs concatenates TokenBytes with the shared leading-space rule.
func decodeIDs(t Tokenizer, ids []int32) (string, error) {
	n := t.VocabSize()
	d := detok{t: t, strip: stripsLeadingSpace(t)}
	var out []byte
	for i, id := range ids {
		if id < 0 || int(id) >= n {
			return "", fmt.Errorf("%w: ids[%d] = %d, vocabulary size %d", ErrInvalidToken, i, id, n)
		}
		out = d.append(out, id)
	}
	return string(out), nil
}

// leadingSpacer is implemented by tokenizers whose encoder prepends a space
// that decoding must remove again (SentencePiece add_space_prefix).
type leadingSpacer interface{ stripsLeadingSpace() bool }

func stripsLeadingSpace(t Tokenizer) bool {
	ls, ok := t.(leadingSpacer)
	return ok && ls.stripsLeadingSpace()
}

// detok applies the one leading-space rule shared by Decode and StreamDecoder:
// the first token that contributes any bytes loses one leading ' '.
type detok struct {
	t     Tokenizer
	strip bool
}

func (d *detok) append(dst []byte, id int32) []byte {
	b := d.t.TokenBytes(id)
	if len(b) == 0 {
		return dst
	}
	if d.strip {
		d.strip = false
		if b[0] == ' ' {
			b = b[1:]
		}
	}
	return append(dst, b...)
}
