package grammar

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sync"
)

// Element kinds of the flattened grammar.
const (
	kEnd  = 0 // end of an alternative: return to the caller
	kByte = 1
	kRef  = 2
)

type pelem struct {
	kind   uint8
	lo, hi byte
	ref    int32
}

// node is one frame of a parse stack, hash-consed: pos is the next
// element of its alternative (a byte range for the top frame, the element
// after the call for the frames below) and parent the frame below (-1:
// none). Node 0 is the accepting empty stack.
type node struct {
	pos, parent int32
	dist        int32 // bytes at least to empty the stack from here
}

const acceptNode = 0

// config is a parser configuration: the set of parse stacks alive after
// the input so far (a state of the lazily built DFA over configurations).
type config struct {
	nodes  []int32 // sorted node ids; acceptNode first when present
	accept bool
	bytes  bool  // some byte can follow
	dist   int32 // min over nodes
	// trans[b] is 0 when not computed, -1 when b kills the
	// configuration, else 1 + the next configuration.
	trans *[256]int32
	mask  []uint32
	// maxEnd is the largest dist over the configurations the allowed
	// tokens lead to (valid once mask is set).
	maxEnd int32
}

// ErrTooComplex is wrapped when a grammar's configurations outgrow
// Options.MaxConfigs.
var ErrTooComplex = errors.New("grammar: constraint too complex")

// Program is a Grammar compiled for one vocabulary: the flattened rules,
// every configuration met so far with its transitions and token mask.
// Configurations, transitions and masks are computed on first use and
// kept, so sequences that revisit a state (every sequence of a request,
// and later requests with the same grammar) pay nothing. A Program is
// safe for concurrent use.
type Program struct {
	elems   []pelem
	alts    [][]int32 // per rule: the start positions of its alternatives
	minRest []int32   // per position: bytes at least to finish its alternative
	vocab   *Vocab
	opts    Options

	mu      sync.Mutex
	nodes   []node
	nodeIdx map[uint64]int32
	cfgs    []config
	cfgIdx  map[string]int32
	start   int32
	// closure scratch
	seen map[uint64]struct{}
	buf  []int32
	key  []byte
	// mask cache accounting
	maskBytes int
	masked    []int32
	filtered  map[[2]int32][]uint32
	walk      []int32
}

// Options bound a Program's memory.
type Options struct {
	// MaxConfigs caps the configurations one Program may create
	// (default 200000); beyond it Advance and Mask fail with ErrTooComplex.
	MaxConfigs int
	// MaxMaskBytes is the mask cache size above which Trim drops the
	// oldest masks (default 64 MiB).
	MaxMaskBytes int
}

func (o Options) withDefaults() Options {
	if o.MaxConfigs <= 0 {
		o.MaxConfigs = 200000
	}
	if o.MaxMaskBytes <= 0 {
		o.MaxMaskBytes = 64 << 20
	}
	return o
}

const maxDist = 1 << 30

// Compile prepares g (which must be valid) for matching against vocab.
func Compile(g *Grammar, v *Vocab, opts Options) (*Program, error) {
	if err := g.Validate(); err != nil {
		return nil, err
	}
	p := &Program{vocab: v, opts: opts.withDefaults(), nodeIdx: map[uint64]int32{}, cfgIdx: map[string]int32{},
		seen: map[uint64]struct{}{}, filtered: map[[2]int32][]uint32{}}
	minLen := g.minLengths()
	p.alts = make([][]int32, len(g.Rules))
	for r, rule := range g.Rules {
		for _, a := range rule.Alts {
			p.alts[r] = append(p.alts[r], int32(len(p.elems)))
			for _, e := range a {
				if e.IsRef() {
					p.elems = append(p.elems, pelem{kind: kRef, ref: e.Rule})
				} else {
					p.elems = append(p.elems, pelem{kind: kByte, lo: e.Lo, hi: e.Hi})
				}
			}
			p.elems = append(p.elems, pelem{kind: kEnd})
		}
	}
	p.minRest = make([]int32, len(p.elems))
	var rest int64
	for i := len(p.elems) - 1; i >= 0; i-- {
		switch e := p.elems[i]; e.kind {
		case kEnd:
			rest = 0
		case kByte:
			rest++
		case kRef:
			rest += minLen[e.ref]
		}
		p.minRest[i] = int32(min(rest, maxDist))
	}
	p.nodes = append(p.nodes, node{pos: -1, parent: -1})
	// The start configuration: rule 0 called from an empty stack.
	p.resetScratch()
	for _, a := range p.alts[0] {
		p.closure(a, -1)
	}
	start, err := p.intern()
	if err != nil {
		return nil, err
	}
	if start < 0 {
		return nil, fmt.Errorf("%w: the grammar matches nothing", ErrInvalid)
	}
	p.start = start
	return p, nil
}

// Vocab is the vocabulary the program masks.
func (p *Program) Vocab() *Vocab { return p.vocab }

// internNode returns the id of frame (pos, parent).
func (p *Program) internNode(pos, parent int32) int32 {
	k := uint64(uint32(pos))<<32 | uint64(uint32(parent))
	if id, ok := p.nodeIdx[k]; ok {
		return id
	}
	d := int64(p.minRest[pos])
	if parent >= 0 {
		d += int64(p.nodes[parent].dist)
	}
	id := int32(len(p.nodes))
	p.nodes = append(p.nodes, node{pos: pos, parent: parent, dist: int32(min(d, maxDist))})
	p.nodeIdx[k] = id
	return id
}

// closure adds to p.buf the stacks with a byte range on top that
// continuing at pos with return frame parent leads to, without input:
// finished alternatives return to their caller, calls expand into the
// callee's alternatives. A call in tail position pushes no return frame,
// so right recursion (repetition) runs in constant stack.
func (p *Program) closure(pos, parent int32) {
	k := uint64(uint32(pos))<<32 | uint64(uint32(parent))
	if _, ok := p.seen[k]; ok {
		return
	}
	p.seen[k] = struct{}{}
	switch e := p.elems[pos]; e.kind {
	case kEnd:
		if parent < 0 {
			p.buf = append(p.buf, acceptNode)
			return
		}
		n := p.nodes[parent]
		p.closure(n.pos, n.parent)
	case kByte:
		p.buf = append(p.buf, p.internNode(pos, parent))
	case kRef:
		ret := parent
		if p.elems[pos+1].kind != kEnd {
			ret = p.internNode(pos+1, parent)
		}
		for _, a := range p.alts[e.ref] {
			p.closure(a, ret)
		}
	}
}

// intern turns p.buf into a configuration id (-1: empty, dead).
func (p *Program) intern() (int32, error) {
	if len(p.buf) == 0 {
		return -1, nil
	}
	slices.Sort(p.buf)
	p.buf = slices.Compact(p.buf)
	p.key = p.key[:0]
	for _, n := range p.buf {
		p.key = binary.LittleEndian.AppendUint32(p.key, uint32(n))
	}
	if id, ok := p.cfgIdx[string(p.key)]; ok {
		return id, nil
	}
	if len(p.cfgs) >= p.opts.MaxConfigs {
		return -1, fmt.Errorf("%w: more than %d parser states (a deeply nested or highly ambiguous grammar); simplify it", ErrTooComplex, p.opts.MaxConfigs)
	}
	c := config{nodes: slices.Clone(p.buf), dist: maxDist}
	for _, n := range c.nodes {
		if n == acceptNode {
			c.accept = true
		} else {
			c.bytes = true
		}
		c.dist = min(c.dist, p.nodes[n].dist)
	}
	id := int32(len(p.cfgs))
	p.cfgs = append(p.cfgs, c)
	p.cfgIdx[string(p.key)] = id
	return id, nil
}

// resetScratch empties the closure scratch (a map that grew large is
// replaced: clearing it would cost its size on every step).
func (p *Program) resetScratch() {
	p.buf = p.buf[:0]
	if len(p.seen) > 1024 {
		p.seen = map[uint64]struct{}{}
	} else {
		clear(p.seen)
	}
}

// step returns the configuration after byte b from configuration c (-1:
// b is not allowed). Callers hold p.mu.
func (p *Program) step(c int32, b byte) (int32, error) {
	cfg := &p.cfgs[c]
	if cfg.trans != nil {
		switch t := cfg.trans[b]; {
		case t > 0:
			return t - 1, nil
		case t < 0:
			return -1, nil
		}
	}
	p.resetScratch()
	for _, n := range cfg.nodes {
		if n == acceptNode {
			continue
		}
		nd := p.nodes[n]
		if e := p.elems[nd.pos]; e.lo <= b && b <= e.hi {
			p.closure(nd.pos+1, nd.parent)
		}
	}
	next, err := p.intern()
	if err != nil {
		return -1, err
	}
	cfg = &p.cfgs[c] // intern may have grown p.cfgs
	if cfg.trans == nil {
		cfg.trans = new([256]int32)
	}
	if next < 0 {
		cfg.trans[b] = -1
		return -1, nil
	}
	cfg.trans[b] = next + 1
	return next, nil
}

// Configs is the number of configurations created so far.
func (p *Program) Configs() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.cfgs)
}
