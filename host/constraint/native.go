package constraint

import (
	"context"
	"errors"
	"fmt"
	"sync"

	sdkc "github.com/kvhost/kvhost/sdk/constraint"
	"github.com/kvhost/kvhost/sdk/constraint/grammar"
	"github.com/kvhost/kvhost/sdk/constraint/guest"
)

// Native runs the built-in grammar engine linked into the host: the same
// code the constraint-grammar plugin runs, without the sandbox. Tests and
// benchmarks use it to measure the engine apart from the plugin boundary.
type Native struct {
	mu  sync.Mutex
	eng *guest.Grammar
	eog []int32
}

var _ Runner = (*Native)(nil)

// NewNative builds the engine over a KVV1 vocabulary (Vocab).
func NewNative(vocab []byte, eog []int32, opts grammar.Options) (*Native, error) {
	e := guest.NewGrammar("grammar-native", "1.0.0", opts)
	if err := e.Init(vocab); err != nil {
		return nil, err
	}
	return &Native{eng: e, eog: eog}, nil
}

// Name implements Runner.
func (n *Native) Name() string { return "grammar-native" }

// EOG implements Runner.
func (n *Native) EOG() []int32 { return n.eog }

type nativeSeq struct {
	n      *Native
	h      int32
	closed bool
}

// Open implements Runner.
func (n *Native) Open(_ context.Context, spec *Spec) (Seq, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	h, err := n.eng.Open(spec.Wire())
	if err != nil {
		if errors.Is(err, grammar.ErrInvalid) {
			return nil, fmt.Errorf("%w: %v", ErrSpec, err)
		}
		return nil, err
	}
	return &nativeSeq{n: n, h: h}, nil
}

func (q *nativeSeq) Fork(context.Context) (Seq, error) {
	q.n.mu.Lock()
	defer q.n.mu.Unlock()
	h, err := q.n.eng.Fork(q.h)
	if err != nil {
		return nil, err
	}
	return &nativeSeq{n: q.n, h: h}, nil
}

func (q *nativeSeq) Close() {
	q.n.mu.Lock()
	defer q.n.mu.Unlock()
	if !q.closed {
		q.closed = true
		_ = q.n.eng.Close(q.h)
	}
}

// Step implements Runner.
func (n *Native) Step(_ context.Context, rows []Row) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.eng.BeginStep()
	for i := range rows {
		r := &rows[i]
		q, ok := r.Seq.(*nativeSeq)
		if !ok || q.n != n {
			r.Err = fmt.Errorf("constraint: row %d belongs to another runner", i)
			continue
		}
		mask, flags, err := n.eng.Step(q.h, r.Token, r.Budget)
		r.Mask, r.Err = mask, err
		r.Accept, r.Complete = flags&sdkc.FlagAccept != 0, flags&sdkc.FlagComplete != 0
		if err == nil && grammar.Count(mask) == 0 {
			r.Err = fmt.Errorf("%w by %s", ErrNoToken, n.Name())
		}
	}
}

// NewNativeFor builds the native runner over a tokenizer's vocabulary of
// n ids (the logit row width).
func NewNativeFor(t Tokens, n int, opts grammar.Options) (*Native, error) {
	vocab, eog, err := Vocab(t, n)
	if err != nil {
		return nil, err
	}
	return NewNative(vocab, eog, opts)
}
