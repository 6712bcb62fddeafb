package grammar

import (
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"
)

// Expr is a grammar expression the Builder lowers to rules: literals,
// byte and character classes, sequences, alternations, repetitions and
// references to named rules.
type Expr interface{ expr() }

type (
	litExpr   struct{ s string }
	bytesExpr struct{ lo, hi byte }
	classExpr struct {
		ranges []RuneRange
		negate bool
	}
	seqExpr    struct{ items []Expr }
	altExpr    struct{ items []Expr }
	repeatExpr struct {
		e        Expr
		min, max int // max < 0: unbounded
	}
	refExpr struct{ name string }
)

func (litExpr) expr()    {}
func (bytesExpr) expr()  {}
func (classExpr) expr()  {}
func (seqExpr) expr()    {}
func (altExpr) expr()    {}
func (repeatExpr) expr() {}
func (refExpr) expr()    {}

// RuneRange is an inclusive range of Unicode code points.
type RuneRange struct{ Lo, Hi rune }

// Lit matches s byte for byte.
func Lit(s string) Expr { return litExpr{s} }

// Bytes matches one byte in [lo, hi].
func Bytes(lo, hi byte) Expr { return bytesExpr{lo, hi} }

// Class matches one character (its UTF-8 encoding) in one of ranges, or,
// negated, any Unicode scalar value outside them. Surrogates never match.
func Class(negate bool, ranges ...RuneRange) Expr {
	return classExpr{ranges: slices.Clone(ranges), negate: negate}
}

// Chars matches one of the characters of s.
func Chars(s string) Expr {
	var rs []RuneRange
	for _, r := range s {
		rs = append(rs, RuneRange{r, r})
	}
	return classExpr{ranges: rs}
}

// AnyChar matches any Unicode scalar value.
func AnyChar() Expr { return classExpr{negate: true} }

// Seq matches its items one after the other (nothing, when empty).
func Seq(items ...Expr) Expr {
	if len(items) == 1 {
		return items[0]
	}
	return seqExpr{items}
}

// Alt matches any one of its items.
func Alt(items ...Expr) Expr {
	if len(items) == 1 {
		return items[0]
	}
	return altExpr{items}
}

// Empty matches the empty string.
func Empty() Expr { return seqExpr{} }

// Repeat matches e between min and max times (max < 0: no upper bound).
func Repeat(e Expr, min, max int) Expr { return repeatExpr{e, min, max} }

// Star is Repeat(e, 0, -1); Plus is Repeat(e, 1, -1); Opt is Repeat(e, 0, 1).
func Star(e Expr) Expr { return repeatExpr{e, 0, -1} }
func Plus(e Expr) Expr { return repeatExpr{e, 1, -1} }
func Opt(e Expr) Expr  { return repeatExpr{e, 0, 1} }

// Named refers to the rule Define gives that name.
func Named(name string) Expr { return refExpr{name} }

// Builder collects named rules and lowers them into a Grammar.
type Builder struct {
	names  map[string]int
	g      Grammar
	defs   []Expr // by rule index; nil once lowered or for helper rules
	elems  int
	err    error
	memo   map[string]int // lowered helper rules by a structural key
	prefix string
}

// NewBuilder returns an empty Builder.
func NewBuilder() *Builder {
	return &Builder{names: map[string]int{}, memo: map[string]int{}}
}

// Declare reserves a rule name (so it can be referenced before it is
// defined) and returns its index.
func (b *Builder) Declare(name string) int {
	if i, ok := b.names[name]; ok {
		return i
	}
	i := len(b.g.Rules)
	b.g.Rules = append(b.g.Rules, Rule{Name: name})
	b.defs = append(b.defs, nil)
	b.names[name] = i
	return i
}

// Define sets the expression of the rule name (declaring it if needed).
// Defining a name twice is an error.
func (b *Builder) Define(name string, e Expr) {
	i := b.Declare(name)
	if b.defs[i] != nil || len(b.g.Rules[i].Alts) > 0 {
		b.fail("rule %q defined twice", name)
		return
	}
	b.defs[i] = e
}

// Has reports whether name was declared.
func (b *Builder) Has(name string) bool { _, ok := b.names[name]; return ok }

func (b *Builder) fail(format string, args ...any) {
	if b.err == nil {
		b.err = fmt.Errorf("grammar: "+format, args...)
	}
}

// Build lowers every rule, makes root the start symbol (Rules[0]) and
// validates the result.
func (b *Builder) Build(root string) (*Grammar, error) {
	ri, ok := b.names[root]
	if !ok {
		return nil, fmt.Errorf("grammar: no rule %q", root)
	}
	for i := 0; i < len(b.defs) && b.err == nil; i++ {
		if e := b.defs[i]; e != nil {
			b.defs[i] = nil
			b.g.Rules[i].Alts = b.alts(e)
		}
	}
	if b.err != nil {
		return nil, b.err
	}
	for i, r := range b.g.Rules {
		if len(r.Alts) == 0 {
			return nil, fmt.Errorf("grammar: rule %q is referenced but never defined", b.g.Rules[i].Name)
		}
	}
	g := &Grammar{Rules: slices.Clone(b.g.Rules)}
	if ri != 0 {
		// Swap root into place 0 and renumber the two.
		g.Rules[0], g.Rules[ri] = g.Rules[ri], g.Rules[0]
		for _, r := range g.Rules {
			for _, a := range r.Alts {
				for k, e := range a {
					switch e.Rule {
					case 0:
						a[k].Rule = int32(ri)
					case int32(ri):
						a[k].Rule = 0
					}
				}
			}
		}
	}
	if err := g.Validate(); err != nil {
		return nil, err
	}
	return g, nil
}

// alts lowers e into a rule's alternatives.
func (b *Builder) alts(e Expr) [][]Elem {
	if a, ok := e.(altExpr); ok {
		out := make([][]Elem, 0, len(a.items))
		for _, it := range a.items {
			out = append(out, b.seq(it, nil))
		}
		return out
	}
	if c, ok := e.(classExpr); ok {
		return b.classAlts(c)
	}
	return [][]Elem{b.seq(e, nil)}
}

// seq appends the elements matching e to out.
func (b *Builder) seq(e Expr, out []Elem) []Elem {
	if b.err != nil {
		return out
	}
	switch e := e.(type) {
	case litExpr:
		for i := 0; i < len(e.s); i++ {
			out = append(out, Byte(e.s[i], e.s[i]))
		}
		b.count(len(e.s))
	case bytesExpr:
		if e.lo > e.hi {
			b.fail("empty byte range [%#x, %#x]", e.lo, e.hi)
		}
		out = append(out, Byte(e.lo, e.hi))
		b.count(1)
	case seqExpr:
		for _, it := range e.items {
			out = b.seq(it, out)
		}
	case refExpr:
		i, ok := b.names[e.name]
		if !ok {
			b.fail("reference to undefined rule %q", e.name)
			return out
		}
		out = append(out, Ref(i))
		b.count(1)
	case classExpr:
		alts := b.classAlts(e)
		if len(alts) == 1 {
			out = append(out, alts[0]...)
			b.count(len(alts[0]))
		} else {
			out = append(out, Ref(b.helper(e, func() [][]Elem { return alts })))
			b.count(1)
		}
	case altExpr:
		if len(e.items) == 0 {
			b.fail("empty alternation matches nothing")
			return out
		}
		out = append(out, Ref(b.helper(e, func() [][]Elem { return b.alts(e) })))
		b.count(1)
	case repeatExpr:
		out = b.repeat(e, out)
	case nil:
		b.fail("nil expression")
	default:
		b.fail("unknown expression %T", e)
	}
	return out
}

func (b *Builder) count(n int) {
	b.elems += n
	if b.elems > MaxElems {
		b.fail("grammar grows beyond %d elements", MaxElems)
	}
}

// helper returns the rule for an anonymous expression, shared between
// identical expressions.
func (b *Builder) helper(e Expr, lower func() [][]Elem) int {
	key := exprKey(e)
	if i, ok := b.memo[key]; ok {
		return i
	}
	i := len(b.g.Rules)
	b.g.Rules = append(b.g.Rules, Rule{})
	b.defs = append(b.defs, nil)
	b.memo[key] = i
	b.g.Rules[i].Alts = lower()
	return i
}

// repeat lowers e{min,max}: min copies, then either a right-recursive tail
// rule (unbounded; the matcher runs it in constant stack) or nested
// optional rules.
func (b *Builder) repeat(r repeatExpr, out []Elem) []Elem {
	if r.min < 0 || r.max >= 0 && r.max < r.min {
		b.fail("bad repetition {%d,%d}", r.min, r.max)
		return out
	}
	if r.max == 0 {
		return out
	}
	// One element standing for e: itself when it lowers to a single
	// element, else a helper rule.
	unit := b.unit(r.e)
	if b.err != nil {
		return out
	}
	for range r.min {
		out = append(out, unit)
		b.count(1)
	}
	if r.max < 0 {
		key := "*" + exprKey(r.e)
		i, ok := b.memo[key]
		if !ok {
			i = len(b.g.Rules)
			b.g.Rules = append(b.g.Rules, Rule{})
			b.defs = append(b.defs, nil)
			b.memo[key] = i
			b.g.Rules[i].Alts = [][]Elem{{unit, Ref(i)}, {}}
		}
		b.count(1)
		return append(out, Ref(i))
	}
	if r.max == r.min {
		return out
	}
	// opt_k matches 0..k copies: opt_k ::= unit opt_{k-1} | ε.
	prev := -1
	for k := 1; k <= r.max-r.min; k++ {
		key := fmt.Sprintf("?%d:%s", k, exprKey(r.e))
		i, ok := b.memo[key]
		if !ok {
			i = len(b.g.Rules)
			b.g.Rules = append(b.g.Rules, Rule{})
			b.defs = append(b.defs, nil)
			b.memo[key] = i
			first := []Elem{unit}
			if prev >= 0 {
				first = append(first, Ref(prev))
			}
			b.g.Rules[i].Alts = [][]Elem{first, {}}
			b.count(len(first))
		}
		prev = i
	}
	b.count(1)
	return append(out, Ref(prev))
}

// unit lowers e to a single element.
func (b *Builder) unit(e Expr) Elem {
	switch e := e.(type) {
	case refExpr, bytesExpr:
		return b.seq(e, nil)[0]
	case litExpr:
		if len(e.s) == 1 {
			return Byte(e.s[0], e.s[0])
		}
	case classExpr:
		if alts := b.classAlts(e); len(alts) == 1 && len(alts[0]) == 1 {
			return alts[0][0]
		}
	}
	return Ref(b.helper(e, func() [][]Elem { return b.alts(e) }))
}

// classAlts lowers a character class to UTF-8 byte sequences.
func (b *Builder) classAlts(c classExpr) [][]Elem {
	rs := NormalizeRanges(c.ranges)
	if c.negate {
		rs = Complement(rs)
	}
	if len(rs) == 0 {
		b.fail("character class matches nothing")
		return nil
	}
	var out [][]Elem
	for _, r := range rs {
		for _, s := range utf8Sequences(r.Lo, r.Hi) {
			out = append(out, s)
		}
	}
	b.count(len(out) * 2)
	return out
}

// exprKey is a structural key for sharing helper rules.
func exprKey(e Expr) string {
	var sb strings.Builder
	writeKey(&sb, e)
	return sb.String()
}

func writeKey(sb *strings.Builder, e Expr) {
	switch e := e.(type) {
	case litExpr:
		fmt.Fprintf(sb, "L%q", e.s)
	case bytesExpr:
		fmt.Fprintf(sb, "B%d-%d", e.lo, e.hi)
	case classExpr:
		fmt.Fprintf(sb, "C%v%v", e.negate, NormalizeRanges(e.ranges))
	case seqExpr:
		sb.WriteString("S(")
		for _, it := range e.items {
			writeKey(sb, it)
			sb.WriteByte(',')
		}
		sb.WriteByte(')')
	case altExpr:
		sb.WriteString("A(")
		for _, it := range e.items {
			writeKey(sb, it)
			sb.WriteByte('|')
		}
		sb.WriteByte(')')
	case repeatExpr:
		fmt.Fprintf(sb, "R%d,%d(", e.min, e.max)
		writeKey(sb, e.e)
		sb.WriteByte(')')
	case refExpr:
		fmt.Fprintf(sb, "N%q", e.name)
	}
}

// NormalizeRanges sorts ranges, merges overlapping and adjacent ones and
// clips them to valid code points.
func NormalizeRanges(rs []RuneRange) []RuneRange {
	out := make([]RuneRange, 0, len(rs))
	for _, r := range rs {
		r.Lo, r.Hi = max(r.Lo, 0), min(r.Hi, utf8.MaxRune)
		if r.Lo <= r.Hi {
			out = append(out, r)
		}
	}
	slices.SortFunc(out, func(a, b RuneRange) int { return int(a.Lo - b.Lo) })
	m := out[:0]
	for _, r := range out {
		if n := len(m); n > 0 && r.Lo <= m[n-1].Hi+1 {
			m[n-1].Hi = max(m[n-1].Hi, r.Hi)
			continue
		}
		m = append(m, r)
	}
	return m
}

// Complement returns the code points outside normalized ranges rs.
func Complement(rs []RuneRange) []RuneRange {
	var out []RuneRange
	next := rune(0)
	for _, r := range rs {
		if r.Lo > next {
			out = append(out, RuneRange{next, r.Lo - 1})
		}
		next = r.Hi + 1
	}
	if next <= utf8.MaxRune {
		out = append(out, RuneRange{next, utf8.MaxRune})
	}
	return out
}
