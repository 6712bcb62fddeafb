package grammar

import (
	"errors"
	"fmt"
	"math/bits"
)

// Mask is what a sequence may generate next.
type Mask struct {
	// Bits has bit id%32 of word id/32 set for every allowed token id.
	// It is shared and read-only, valid until the Program's next Trim.
	Bits []uint32
	// Accept: the text so far is complete; end-of-generation tokens are
	// allowed (and set in Bits).
	Accept bool
	// Complete: nothing but end-of-generation can follow.
	Complete bool
}

// Matcher is one sequence's position in a Program. A Matcher is used by
// one goroutine at a time; Clone gives an independent copy.
type Matcher struct {
	p    *Program
	cfg  int32
	done bool
}

// ErrRefused is wrapped when a token or byte is not allowed.
var ErrRefused = errors.New("grammar: not allowed by the constraint")

// Start returns a Matcher at the beginning of the grammar.
func (p *Program) Start() *Matcher { return &Matcher{p: p, cfg: p.start} }

// Program is the program m runs.
func (m *Matcher) Program() *Program { return m.p }

// Clone returns a Matcher at the same position.
func (m *Matcher) Clone() *Matcher { c := *m; return &c }

// Done reports whether an end-of-generation token was accepted.
func (m *Matcher) Done() bool { return m.done }

// Accepting reports whether the text so far is complete.
func (m *Matcher) Accepting() bool {
	m.p.mu.Lock()
	defer m.p.mu.Unlock()
	return !m.done && m.p.cfgs[m.cfg].accept
}

// Advance consumes token id: its bytes, or, for an end-of-generation
// token, the end of the text (allowed only when accepting).
func (m *Matcher) Advance(id int32) error {
	v := m.p.vocab
	if id < 0 || int(id) >= v.n {
		return fmt.Errorf("%w: token id %d is outside the vocabulary of %d", ErrRefused, id, v.n)
	}
	if m.done {
		return fmt.Errorf("%w: token %d after the end of the output", ErrRefused, id)
	}
	m.p.mu.Lock()
	defer m.p.mu.Unlock()
	if v.flags[id]&FlagEOG != 0 {
		if !m.p.cfgs[m.cfg].accept {
			return fmt.Errorf("%w: end-of-generation token %d before the output is complete", ErrRefused, id)
		}
		m.done = true
		return nil
	}
	if v.flags[id]&FlagSpecial != 0 {
		return fmt.Errorf("%w: special token %d", ErrRefused, id)
	}
	return m.advance(v.bytes[id], id)
}

// AdvanceBytes consumes text that is not a single token (tests, forced
// prefixes).
func (m *Matcher) AdvanceBytes(b []byte) error {
	if m.done {
		return fmt.Errorf("%w: text after the end of the output", ErrRefused)
	}
	m.p.mu.Lock()
	defer m.p.mu.Unlock()
	return m.advance(b, -1)
}

func (m *Matcher) advance(b []byte, id int32) error {
	c := m.cfg
	for i, x := range b {
		next, err := m.p.step(c, x)
		if err != nil {
			return err
		}
		if next < 0 {
			if id >= 0 {
				return fmt.Errorf("%w: token %d (%q) at its byte %d", ErrRefused, id, b, i)
			}
			return fmt.Errorf("%w: %q at byte %d", ErrRefused, b, i)
		}
		c = next
	}
	m.cfg = c
	return nil
}

// Mask returns what may follow. remaining > 0 is how many tokens the
// sequence may still generate, this one included: when it gets short,
// tokens after which the shortest completion (in bytes) no longer fits
// are refused, so the output closes in time whenever single-byte tokens
// can spell it. remaining <= 0 means no limit.
func (m *Matcher) Mask(remaining int) (Mask, error) {
	if m.done {
		return Mask{}, fmt.Errorf("%w: the output already ended", ErrRefused)
	}
	p := m.p
	p.mu.Lock()
	defer p.mu.Unlock()
	c := m.cfg
	bitsAll, err := p.maskOf(c)
	if err != nil {
		return Mask{}, err
	}
	cfg := &p.cfgs[c]
	out := Mask{Bits: bitsAll, Accept: cfg.accept, Complete: !cfg.bytes}
	if remaining <= 0 || cfg.dist > int32(min(remaining, maxDist)) || cfg.maxEnd <= int32(remaining-1) {
		return out, nil
	}
	limit := int32(remaining - 1)
	key := [2]int32{c, limit}
	if f, ok := p.filtered[key]; ok {
		out.Bits = f
		return out, nil
	}
	f, _, n, err := p.walkMask(c, limit)
	if err != nil {
		return Mask{}, err
	}
	if n == 0 {
		// The vocabulary cannot spell the shortest completion one byte
		// at a time: keep every allowed token.
		f = bitsAll
	}
	p.filtered[key] = f
	p.maskBytes += 4 * len(f)
	out.Bits = f
	return out, nil
}

// maskOf returns configuration c's mask, computing it on first use.
func (p *Program) maskOf(c int32) ([]uint32, error) {
	if m := p.cfgs[c].mask; m != nil {
		return m, nil
	}
	m, maxEnd, _, err := p.walkMask(c, -1)
	if err != nil {
		return nil, err
	}
	p.cfgs[c].mask, p.cfgs[c].maxEnd = m, maxEnd
	p.maskBytes += 4 * len(m)
	p.masked = append(p.masked, c)
	return m, nil
}

// walkMask walks the token trie from configuration c in preorder, skipping
// every subtree whose prefix the grammar refuses, and sets the bit of each
// token that ends in a live configuration (whose distance to acceptance
// is at most limit, when limit >= 0). It returns the mask, the largest
// such distance and the number of tokens set.
func (p *Program) walkMask(c int32, limit int32) ([]uint32, int32, int, error) {
	v := p.vocab
	mask := make([]uint32, v.Words())
	if cap(p.walk) < v.maxLen+1 {
		p.walk = make([]int32, v.maxLen+1)
	}
	states := p.walk[:v.maxLen+1]
	states[0] = c
	var maxEnd int32
	n := 0
	for k := 0; k < len(v.tByte); {
		d := v.tDepth[k]
		child, err := p.step(states[d-1], v.tByte[k])
		if err != nil {
			return nil, 0, 0, err
		}
		if child < 0 {
			k = int(v.tEnd[k])
			continue
		}
		states[d] = child
		if t0, t1 := v.tTok[k], v.tTok[k+1]; t0 < t1 {
			dist := p.cfgs[child].dist
			if limit < 0 || dist <= limit {
				for _, t := range v.toks[t0:t1] {
					mask[t>>5] |= 1 << (t & 31)
				}
				n += int(t1 - t0)
				maxEnd = max(maxEnd, dist)
			}
		}
		k++
	}
	if p.cfgs[c].accept {
		for _, t := range v.eog {
			mask[t>>5] |= 1 << (t & 31)
		}
		n += len(v.eog)
	}
	return mask, maxEnd, n, nil
}

// Trim drops cached masks when they outgrow Options.MaxMaskBytes: the
// older half of the unfiltered masks and every filtered one. Masks handed
// out before stay valid for their holders (they are never reused), but
// callers that give mask memory to others (the plugin ABI) call Trim only
// between steps.
func (p *Program) Trim() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.maskBytes <= p.opts.MaxMaskBytes {
		return
	}
	drop := len(p.masked) / 2
	for _, c := range p.masked[:drop] {
		p.maskBytes -= 4 * len(p.cfgs[c].mask)
		p.cfgs[c].mask = nil
	}
	p.masked = append(p.masked[:0], p.masked[drop:]...)
	for _, f := range p.filtered {
		p.maskBytes -= 4 * len(f)
	}
	clear(p.filtered)
}

// MaskBytes is the size of the cached masks.
func (p *Program) MaskBytes() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.maskBytes
}

// Count returns the number of bits set in a mask.
func Count(mask []uint32) int {
	n := 0
	for _, w := range mask {
		n += bits.OnesCount32(w)
	}
	return n
}

// Allowed reports whether token id's bit is set.
func Allowed(mask []uint32, id int32) bool {
	return id >= 0 && int(id>>5) < len(mask) && mask[id>>5]&(1<<(id&31)) != 0
}
