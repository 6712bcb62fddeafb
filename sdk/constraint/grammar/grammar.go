package grammar

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Elem is one symbol of an alternative: a byte in [Lo, Hi] when Rule < 0,
// otherwise a reference to Rules[Rule].
type Elem struct {
	Rule   int32
	Lo, Hi byte
}

// Byte is the element matching one byte in [lo, hi].
func Byte(lo, hi byte) Elem { return Elem{Rule: -1, Lo: lo, Hi: hi} }

// Ref is the element expanding rule r.
func Ref(r int) Elem { return Elem{Rule: int32(r)} }

// IsRef reports whether e references a rule.
func (e Elem) IsRef() bool { return e.Rule >= 0 }

// Rule is a nonterminal: it derives any one of its alternatives, each a
// sequence of elements (an empty sequence derives the empty string).
type Rule struct {
	Name string
	Alts [][]Elem
}

// Grammar is a context-free grammar over bytes; Rules[0] is the start
// symbol. It is the compiled form every built-in constraint is lowered to
// (JSON, JSON Schema, regular expressions, GBNF, choices) and what the
// host hands a constraint plugin.
type Grammar struct {
	Rules []Rule
}

// Limits a Grammar must respect (Validate): they bound the matcher's
// tables, not any real schema or grammar.
const (
	MaxRules    = 1 << 18
	MaxElems    = 1 << 22 // over all alternatives
	MaxNameLen  = 256
	maxAltCount = 1 << 20
)

// ErrInvalid is wrapped by every error Validate and Decode return.
var ErrInvalid = errors.New("grammar: invalid")

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalid}, args...)...)
}

// Size returns the number of rules and of elements over all alternatives.
func (g *Grammar) Size() (rules, elems int) {
	for _, r := range g.Rules {
		for _, a := range r.Alts {
			elems += len(a)
		}
	}
	return len(g.Rules), elems
}

// name is how errors refer to rule i.
func (g *Grammar) name(i int) string {
	if n := g.Rules[i].Name; n != "" {
		return fmt.Sprintf("%q", n)
	}
	return fmt.Sprintf("#%d", i)
}

// Validate checks the structure and the two properties the matcher relies
// on: every rule reachable from the start derives at least one finite
// string, and no rule is left-recursive (directly, or through rules that
// can derive the empty string).
func (g *Grammar) Validate() error {
	if len(g.Rules) == 0 {
		return invalid("no rules")
	}
	if len(g.Rules) > MaxRules {
		return invalid("%d rules, at most %d", len(g.Rules), MaxRules)
	}
	_, elems := g.Size()
	if elems > MaxElems {
		return invalid("%d elements, at most %d", elems, MaxElems)
	}
	for i, r := range g.Rules {
		if len(r.Name) > MaxNameLen {
			return invalid("rule %d: name of %d bytes, at most %d", i, len(r.Name), MaxNameLen)
		}
		if len(r.Alts) == 0 {
			return invalid("rule %s has no alternatives", g.name(i))
		}
		if len(r.Alts) > maxAltCount {
			return invalid("rule %s has %d alternatives, at most %d", g.name(i), len(r.Alts), maxAltCount)
		}
		for _, a := range r.Alts {
			for _, e := range a {
				switch {
				case e.Rule >= int32(len(g.Rules)):
					return invalid("rule %s references rule %d of %d", g.name(i), e.Rule, len(g.Rules))
				case e.Rule < -1:
					return invalid("rule %s has element with rule %d", g.name(i), e.Rule)
				case e.Rule == -1 && e.Lo > e.Hi:
					return invalid("rule %s has empty byte range [%#x, %#x]", g.name(i), e.Lo, e.Hi)
				}
			}
		}
	}
	reach := g.reachable()
	minLen := g.minLengths()
	for i := range g.Rules {
		if reach[i] && minLen[i] == infinite {
			return invalid("rule %s derives no finite string (every alternative recurses without end)", g.name(i))
		}
	}
	return g.checkLeftRecursion(reach, minLen)
}

const infinite = int64(1) << 50

// minLengths returns, per rule, the length of its shortest derivation
// (infinite for a rule with none), by fixpoint iteration.
func (g *Grammar) minLengths() []int64 {
	m := make([]int64, len(g.Rules))
	for i := range m {
		m[i] = infinite
	}
	for changed := true; changed; {
		changed = false
		for i, r := range g.Rules {
			for _, a := range r.Alts {
				var s int64
				for _, e := range a {
					if e.IsRef() {
						s += m[e.Rule]
					} else {
						s++
					}
					if s >= infinite {
						s = infinite
						break
					}
				}
				if s < m[i] {
					m[i], changed = s, true
				}
			}
		}
	}
	return m
}

// reachable marks the rules the start symbol can reach.
func (g *Grammar) reachable() []bool {
	seen := make([]bool, len(g.Rules))
	stack := []int32{0}
	seen[0] = true
	for len(stack) > 0 {
		r := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		for _, a := range g.Rules[r].Alts {
			for _, e := range a {
				if e.IsRef() && !seen[e.Rule] {
					seen[e.Rule] = true
					stack = append(stack, e.Rule)
				}
			}
		}
	}
	return seen
}

// checkLeftRecursion looks for a cycle in the "can begin with" graph: rule
// A can begin with rule B when B occurs in an alternative of A after only
// nullable elements.
func (g *Grammar) checkLeftRecursion(reach []bool, minLen []int64) error {
	const (
		white = iota
		grey
		black
	)
	color := make([]uint8, len(g.Rules))
	type frame struct {
		rule     int32
		alt, pos int
	}
	for start := range g.Rules {
		if !reach[start] || color[start] != white {
			continue
		}
		stack := []frame{{rule: int32(start)}}
		color[start] = grey
		for len(stack) > 0 {
			f := &stack[len(stack)-1]
			alts := g.Rules[f.rule].Alts
			var next int32 = -1
			for next < 0 && f.alt < len(alts) {
				a := alts[f.alt]
				if f.pos >= len(a) {
					f.alt, f.pos = f.alt+1, 0
					continue
				}
				e := a[f.pos]
				if !e.IsRef() {
					f.alt, f.pos = f.alt+1, 0
					continue
				}
				if minLen[e.Rule] == 0 {
					f.pos++
				} else {
					f.alt, f.pos = f.alt+1, 0
				}
				next = e.Rule
			}
			if next < 0 {
				color[f.rule] = black
				stack = stack[:len(stack)-1]
				continue
			}
			switch color[next] {
			case grey:
				return invalid("rule %s is left-recursive (it can begin with itself without consuming input); rewrite it with repetition", g.name(int(next)))
			case white:
				color[next] = grey
				stack = append(stack, frame{rule: next})
			}
		}
	}
	return nil
}

// magic starts the binary form of a Grammar.
var magic = [4]byte{'K', 'V', 'G', '1'}

// MarshalBinary encodes g compactly: "KVG1", then uvarints: the rule
// count, and per rule its name (length, bytes), its alternative count and
// per alternative its element count and elements (2·rule+1 for a
// reference, 0 followed by the bytes Lo and Hi for a byte range).
func (g *Grammar) MarshalBinary() ([]byte, error) {
	_, elems := g.Size()
	out := make([]byte, 0, 8+3*elems)
	out = append(out, magic[:]...)
	out = binary.AppendUvarint(out, uint64(len(g.Rules)))
	for _, r := range g.Rules {
		out = binary.AppendUvarint(out, uint64(len(r.Name)))
		out = append(out, r.Name...)
		out = binary.AppendUvarint(out, uint64(len(r.Alts)))
		for _, a := range r.Alts {
			out = binary.AppendUvarint(out, uint64(len(a)))
			for _, e := range a {
				if e.IsRef() {
					out = binary.AppendUvarint(out, 2*uint64(e.Rule)+1)
				} else {
					out = append(out, 0, e.Lo, e.Hi)
				}
			}
		}
	}
	return out, nil
}

// Decode parses the binary form and validates the result.
func Decode(b []byte) (*Grammar, error) {
	if len(b) < 4 || [4]byte(b[:4]) != magic {
		return nil, invalid("not a KVG1 grammar")
	}
	d := decoder{b: b[4:]}
	n := d.count("rules", MaxRules)
	g := &Grammar{Rules: make([]Rule, n)}
	total := 0
	for i := range g.Rules {
		nl := d.count("rule name length", MaxNameLen)
		g.Rules[i].Name = string(d.bytes(nl))
		na := d.count("alternatives", maxAltCount)
		g.Rules[i].Alts = make([][]Elem, na)
		for j := range na {
			ne := d.count("elements", MaxElems-total)
			total += ne
			a := make([]Elem, ne)
			for k := range a {
				t := d.uvarint()
				switch {
				case t == 0:
					lh := d.bytes(2)
					if len(lh) == 2 {
						a[k] = Byte(lh[0], lh[1])
					}
				case t%2 == 1 && t/2 < uint64(n):
					a[k] = Ref(int(t / 2))
				default:
					d.fail("bad element tag %d", t)
				}
			}
			g.Rules[i].Alts[j] = a
		}
		if d.err != nil {
			return nil, d.err
		}
	}
	if d.err != nil {
		return nil, d.err
	}
	if len(d.b) != 0 {
		return nil, invalid("%d trailing bytes", len(d.b))
	}
	if err := g.Validate(); err != nil {
		return nil, err
	}
	return g, nil
}

type decoder struct {
	b   []byte
	err error
}

func (d *decoder) fail(format string, args ...any) {
	if d.err == nil {
		d.err = invalid(format, args...)
	}
	d.b = nil
}

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail("truncated or overlong varint")
		return 0
	}
	d.b = d.b[n:]
	return v
}

// count reads a count of items that each take at least one more byte of
// input, so a short input can never make the decoder allocate much.
func (d *decoder) count(what string, limit int) int {
	v := d.uvarint()
	if v > uint64(limit) || v > uint64(len(d.b)) {
		d.fail("%s count %d exceeds the limit %d or the %d bytes left", what, v, limit, len(d.b))
		return 0
	}
	return int(v)
}

func (d *decoder) bytes(n int) []byte {
	if d.err != nil {
		return nil
	}
	if n > len(d.b) {
		d.fail("truncated: want %d bytes, have %d", n, len(d.b))
		return nil
	}
	out := d.b[:n]
	d.b = d.b[n:]
	return out
}

// Union is the grammar of the sentences of any of gs: their rules side by
// side under a new start rule.
func Union(gs ...*Grammar) (*Grammar, error) {
	out := &Grammar{Rules: []Rule{{Name: "union"}}}
	for _, g := range gs {
		base := int32(len(out.Rules))
		out.Rules[0].Alts = append(out.Rules[0].Alts, []Elem{Ref(int(base))})
		for _, r := range g.Rules {
			alts := make([][]Elem, len(r.Alts))
			for i, a := range r.Alts {
				na := make([]Elem, len(a))
				for k, e := range a {
					if e.IsRef() {
						e.Rule += base
					}
					na[k] = e
				}
				alts[i] = na
			}
			out.Rules = append(out.Rules, Rule{Name: r.Name, Alts: alts})
		}
	}
	if err := out.Validate(); err != nil {
		return nil, err
	}
	return out, nil
}
