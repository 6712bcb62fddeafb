package constrainttest

import (
	"fmt"
	"math/rand/v2"

	"github.com/kvhost/kvhost/sdk/constraint/grammar"
)

// ByteVocab is a test vocabulary: the 256 single bytes, the given
// multi-byte pieces and one EOG token (the last id).
func ByteVocab(pieces ...string) (*grammar.Vocab, error) {
	var toks [][]byte
	for b := 0; b < 256; b++ {
		toks = append(toks, []byte{byte(b)})
	}
	for _, p := range pieces {
		toks = append(toks, []byte(p))
	}
	toks = append(toks, nil)
	flags := make([]uint8, len(toks))
	flags[len(toks)-1] = grammar.FlagEOG
	return grammar.NewVocab(toks, flags)
}

// Sample draws one output of p by choosing uniformly among the allowed
// tokens at each step, within budget tokens (the mask's budget closes the
// output in time). It returns the text and whether it is complete.
func Sample(p *grammar.Program, r *rand.Rand, budget int) (string, error) {
	m := p.Start()
	v := p.Vocab()
	var out []byte
	allowed := make([]int32, 0, v.Size())
	for left := budget; left > 0; left-- {
		mk, err := m.Mask(left)
		if err != nil {
			return string(out), err
		}
		if mk.Complete {
			return string(out), nil
		}
		allowed = allowed[:0]
		for id := int32(0); int(id) < v.Size(); id++ {
			if grammar.Allowed(mk.Bits, id) {
				allowed = append(allowed, id)
			}
		}
		if len(allowed) == 0 {
			return string(out), fmt.Errorf("no token allowed after %q", out)
		}
		id := allowed[r.IntN(len(allowed))]
		if v.IsEOG(id) {
			return string(out), nil
		}
		if err := m.Advance(id); err != nil {
			return string(out), err
		}
		out = append(out, v.Bytes(id)...)
	}
	if !m.Accepting() {
		return string(out), fmt.Errorf("budget of %d tokens ran out in %q", budget, out)
	}
	return string(out), nil
}
