package guest

import (
	"crypto/sha256"
	"errors"
	"fmt"

	"github.com/kvhost/kvhost/sdk/constraint"
	"github.com/kvhost/kvhost/sdk/constraint/grammar"
)

// Engine is what a Go constraint plugin implements; Register exports it
// with the constraint ABI. Calls come one at a time.
type Engine interface {
	Descriptor() constraint.Descriptor
	// Init receives the vocabulary (KVV1) once, before anything else.
	Init(vocab []byte) error
	// Open starts a sequence for a spec document (constraint.Spec JSON)
	// and returns its handle (>= 1).
	Open(spec []byte) (int32, error)
	Fork(h int32) (int32, error)
	Close(h int32) error
	// BeginStep runs before a step's rows; masks returned by the
	// previous step may be released now.
	BeginStep()
	// Step advances h by token (< 0: none) and returns its mask, valid
	// until the next BeginStep, and FlagAccept / FlagComplete.
	Step(h, token int32, budget int) ([]uint32, uint32, error)
}

// Grammar is the built-in engine: specs of format "kvg1", run by package
// grammar.
type Grammar struct {
	set  *grammar.Set
	opts grammar.Options
	desc constraint.Descriptor
}

// NewGrammar returns the grammar engine, describing itself as name and
// version.
func NewGrammar(name, version string, opts grammar.Options) *Grammar {
	return &Grammar{opts: opts, desc: constraint.Descriptor{ABI: constraint.ABIVersion, Kind: constraint.Kind,
		Name: name, Version: version, Formats: []string{constraint.SpecFormatGrammar}}}
}

var _ Engine = (*Grammar)(nil)

func (e *Grammar) Descriptor() constraint.Descriptor { return e.desc }

func (e *Grammar) Init(vocab []byte) error {
	if e.set != nil {
		return errors.New("guest: init called twice")
	}
	v, err := grammar.DecodeVocab(vocab)
	if err != nil {
		return err
	}
	e.set = grammar.NewSet(v, e.opts)
	return nil
}

// Set is the engine's state (nil before Init).
func (e *Grammar) Set() *grammar.Set { return e.set }

func (e *Grammar) Open(spec []byte) (int32, error) {
	if e.set == nil {
		return 0, errors.New("guest: open before init")
	}
	s, err := constraint.ParseSpec(spec)
	if err != nil {
		return 0, err
	}
	if len(s.Grammar) == 0 {
		return 0, fmt.Errorf("guest: spec of type %q carries no compiled grammar; this plugin takes format %q only", s.Type, constraint.SpecFormatGrammar)
	}
	sum := sha256.Sum256(s.Grammar)
	return e.set.Open(string(sum[:]), func() (*grammar.Grammar, error) { return grammar.Decode(s.Grammar) })
}

func (e *Grammar) Fork(h int32) (int32, error) {
	if e.set == nil {
		return 0, errors.New("guest: fork before init")
	}
	return e.set.Fork(h)
}

func (e *Grammar) Close(h int32) error {
	if e.set == nil {
		return errors.New("guest: close before init")
	}
	return e.set.Close(h)
}

func (e *Grammar) BeginStep() {
	if e.set != nil {
		e.set.BeginStep()
	}
}

func (e *Grammar) Step(h, token int32, budget int) ([]uint32, uint32, error) {
	if e.set == nil {
		return nil, 0, errors.New("guest: step before init")
	}
	m, err := e.set.Step(h, token, budget)
	if err != nil {
		return nil, 0, err
	}
	var f uint32
	if m.Accept {
		f |= constraint.FlagAccept
	}
	if m.Complete {
		f |= constraint.FlagComplete
	}
	return m.Bits, f, nil
}

// Status maps an engine error to the ABI status of a call or row.
func Status(err error) int32 {
	switch {
	case err == nil:
		return constraint.StatusOK
	case errors.Is(err, grammar.ErrBadHandle):
		return constraint.StatusBadHandle
	case errors.Is(err, grammar.ErrRefused):
		return constraint.StatusRefused
	case errors.Is(err, grammar.ErrInvalid):
		return constraint.StatusBadSpec
	}
	return constraint.StatusFailed
}
