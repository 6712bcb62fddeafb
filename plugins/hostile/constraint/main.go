//go:build wasip1

// Command constraint is a hostile output-constraint plugin for the host's
// tests. It runs the grammar engine, except for sequences opened with a
// spec whose type names a misbehaviour:
//
//   - loop: step never returns (stopped by fuel or the call deadline)
//   - membomb: step allocates until the memory cap (trap)
//   - panic: open panics (trap)
//   - none: the mask allows no token
//   - range: the mask allows only ids past the vocabulary
//   - eos: the mask allows only end-of-generation, never accepting
package main

import (
	"encoding/json"

	"github.com/kvhost/kvhost/sdk/constraint"
	"github.com/kvhost/kvhost/sdk/constraint/grammar"
	"github.com/kvhost/kvhost/sdk/constraint/guest"
)

type hostile struct {
	*guest.Grammar
	vocab []byte
	mode  map[int32]string
	sink  [][]byte
}

func (h *hostile) Init(vocab []byte) error {
	h.vocab = vocab
	return h.Grammar.Init(vocab)
}

func (h *hostile) Open(spec []byte) (int32, error) {
	var s struct {
		Type string `json:"type"`
	}
	_ = json.Unmarshal(spec, &s)
	switch s.Type {
	case "panic":
		panic("hostile constraint: open panics")
	case "loop", "membomb", "none", "range", "eos":
		h.mode[int32(len(h.mode)+1<<20)] = s.Type
		return int32(len(h.mode) + 1<<20 - 1), nil
	}
	return h.Grammar.Open(spec)
}

var spin int

func (h *hostile) Step(handle, token int32, budget int) ([]uint32, uint32, error) {
	mode, ok := h.mode[handle]
	if !ok {
		return h.Grammar.Step(handle, token, budget)
	}
	v := h.Grammar.Set().Vocab()
	mask := make([]uint32, v.Words())
	switch mode {
	case "loop":
		for i := 0; ; i++ {
			spin = i
		}
	case "membomb":
		for {
			h.sink = append(h.sink, make([]byte, 1<<20))
		}
	case "range":
		if v.Size()%32 != 0 {
			mask[len(mask)-1] = ^uint32(0) << (v.Size() % 32)
		}
	case "eos":
		for id := int32(0); int(id) < v.Size(); id++ {
			if v.IsEOG(id) {
				mask[id>>5] |= 1 << (id & 31)
			}
		}
	}
	return mask, 0, nil
}

func (h *hostile) Close(handle int32) error {
	if _, ok := h.mode[handle]; ok {
		delete(h.mode, handle)
		return nil
	}
	return h.Grammar.Close(handle)
}

func (h *hostile) Fork(handle int32) (int32, error) {
	if m, ok := h.mode[handle]; ok {
		n := int32(len(h.mode) + 1<<20)
		h.mode[n] = m
		return n, nil
	}
	return h.Grammar.Fork(handle)
}

var _ guest.Engine = (*hostile)(nil)
var _ = constraint.ABIVersion

func init() {
	guest.Register(&hostile{Grammar: guest.NewGrammar("hostile-constraint", "0.0.1", grammar.Options{}), mode: map[int32]string{}})
}

func main() {}
