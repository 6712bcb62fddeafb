package constraint

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"

	sdkc "github.com/kvhost/kvhost/sdk/constraint"
	"github.com/kvhost/kvhost/sdk/constraint/grammar"
)

// Spec is one request's constraint, compiled: immutable and shared by the
// request's choices.
type Spec struct {
	// Type is what the request asked for: json_object, json_schema,
	// regex, grammar, choice or tool_calls.
	Type string
	wire []byte
	key  string
}

// NewSpec wraps a compiled grammar and the request's source (its schema,
// pattern, grammar text or choices, as JSON) into the document a
// constraint plugin's open receives.
func NewSpec(typ string, source json.RawMessage, g *grammar.Grammar) (*Spec, error) {
	s := sdkc.Spec{Type: typ, Source: source}
	if g != nil {
		b, err := g.MarshalBinary()
		if err != nil {
			return nil, err
		}
		s.Grammar = b
	}
	wire, err := s.Marshal()
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(wire)
	return &Spec{Type: typ, wire: wire, key: hex.EncodeToString(sum[:])}, nil
}

// Wire is the spec document (sdk/constraint.Spec JSON).
func (s *Spec) Wire() []byte { return s.wire }

// Key identifies the spec's content.
func (s *Spec) Key() string { return s.key }

// Runner runs constraints for the engine: the built-in grammar engine in
// a plugin (Plugin), or linked natively (Native).
type Runner interface {
	// Open starts a sequence under spec. A spec the runner refuses is an
	// error wrapping ErrSpec.
	Open(ctx context.Context, spec *Spec) (Seq, error)
	// Step advances every row's sequence by its token and fills in its
	// mask; one call per engine step, from one goroutine.
	Step(ctx context.Context, rows []Row)
	// EOG lists the end-of-generation token ids of the vocabulary.
	EOG() []int32
	// Name names the constraint implementation in errors ("grammar@1.0.0").
	Name() string
}

// Seq is one sequence's constraint state.
type Seq interface {
	// Fork opens a sequence at the same position (n > 1 choices).
	Fork(ctx context.Context) (Seq, error)
	// Close releases it; closing twice is harmless.
	Close()
}

// Row is one sequence's part of a step.
type Row struct {
	Seq Seq
	// Token is the token generated last step, not yet consumed, or -1.
	Token int32
	// Budget is how many tokens the output may still take, this step's
	// included (0: no limit); the constraint closes the output in time
	// (package grammar). The engine passes the tokens left less one, kept
	// for the end-of-generation token.
	Budget int
	// Results: Mask has a bit per vocabulary id (valid until the next
	// Step); Accept says end-of-generation may come now, Complete that
	// nothing else may.
	Mask     []uint32
	Accept   bool
	Complete bool
	Err      error
}

// ErrSpec is wrapped by Open when the constraint refuses the spec itself
// (a 400 for the request).
var ErrSpec = errors.New("constraint: spec refused")

// ErrNoToken is wrapped when a constraint allows no token at all.
var ErrNoToken = errors.New("constraint: no token allowed")

// Tokens is the vocabulary a runner is built over.
type Tokens interface {
	// TokenBytes is what id adds to the output (nil for control tokens).
	TokenBytes(id int32) []byte
	// EOG reports an end-of-generation token.
	EOG(id int32) bool
}

// Vocab builds the constraint ABI's vocabulary (KVV1) of n ids — the
// logit row width, which may exceed the tokenizer's vocabulary: ids past
// it are special — and lists the EOG ids.
func Vocab(t Tokens, n int) ([]byte, []int32, error) {
	if n <= 0 || n > grammar.MaxVocab {
		return nil, nil, fmt.Errorf("constraint: vocabulary of %d tokens, want 1..%d", n, grammar.MaxVocab)
	}
	toks := make([][]byte, n)
	flags := make([]uint8, n)
	var eog []int32
	for id := range int32(n) {
		switch {
		case t.EOG(id):
			flags[id] = grammar.FlagEOG
			eog = append(eog, id)
		default:
			b := t.TokenBytes(id)
			if len(b) == 0 {
				flags[id] = grammar.FlagSpecial
			}
			toks[id] = b
		}
	}
	return grammar.MarshalVocab(toks, flags), eog, nil
}
