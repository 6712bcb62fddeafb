package compile

import (
	"fmt"
	"regexp/syntax"
	"unicode"

	g "github.com/kvhost/kvhost/sdk/constraint/grammar"
)

// Regex is guided_regex / SGLang's regex: the whole output matches pattern
// (RE2 syntax, Perl classes). Anchors are allowed at the ends only; the
// match is always the whole output.
func Regex(pattern string) (*g.Grammar, error) {
	e, err := regexExpr(pattern, false)
	if err != nil {
		return nil, err
	}
	b := g.NewBuilder()
	b.Define("root", e)
	return b.Build("root")
}

// maxRegexRepeat bounds a counted repetition {m,n} in a pattern.
const maxRegexRepeat = 1000

// regexExpr lowers pattern to a grammar expression. In JSON-string mode
// (a schema's "pattern") each character is written as a JSON string
// writes it: quotes, backslashes and control characters escaped.
func regexExpr(pattern string, jsonString bool) (g.Expr, error) {
	re, err := syntax.Parse(pattern, syntax.Perl)
	if err != nil {
		return nil, &SyntaxError{What: "regex", Err: err}
	}
	c := regexCompiler{json: jsonString}
	subs := []*syntax.Regexp{re}
	if re.Op == syntax.OpConcat {
		subs = re.Sub
	}
	// Anchors at the ends say what a whole-output match means anyway.
	for len(subs) > 0 && (subs[0].Op == syntax.OpBeginText || subs[0].Op == syntax.OpBeginLine) {
		subs = subs[1:]
	}
	for len(subs) > 0 && (subs[len(subs)-1].Op == syntax.OpEndText || subs[len(subs)-1].Op == syntax.OpEndLine) {
		subs = subs[:len(subs)-1]
	}
	items := make([]g.Expr, 0, len(subs))
	for _, s := range subs {
		e, err := c.expr(s)
		if err != nil {
			return nil, err
		}
		items = append(items, e)
	}
	return g.Seq(items...), nil
}

type regexCompiler struct{ json bool }

func (c *regexCompiler) expr(re *syntax.Regexp) (g.Expr, error) {
	switch re.Op {
	case syntax.OpEmptyMatch:
		return g.Empty(), nil
	case syntax.OpLiteral:
		items := make([]g.Expr, 0, len(re.Rune))
		for _, r := range re.Rune {
			if re.Flags&syntax.FoldCase != 0 {
				items = append(items, c.class(foldRanges(r)))
			} else {
				items = append(items, c.class([]g.RuneRange{{Lo: r, Hi: r}}))
			}
		}
		return g.Seq(items...), nil
	case syntax.OpCharClass:
		var rs []g.RuneRange
		for i := 0; i+1 < len(re.Rune); i += 2 {
			rs = append(rs, g.RuneRange{Lo: re.Rune[i], Hi: re.Rune[i+1]})
		}
		if len(rs) == 0 {
			return nil, &UnsupportedError{Keyword: "empty character class", Path: re.String(), Reason: "it matches nothing"}
		}
		return c.class(rs), nil
	case syntax.OpAnyCharNotNL:
		return c.class(g.Complement([]g.RuneRange{{Lo: '\n', Hi: '\n'}})), nil
	case syntax.OpAnyChar:
		return c.class([]g.RuneRange{{Lo: 0, Hi: unicode.MaxRune}}), nil
	case syntax.OpCapture:
		return c.expr(re.Sub[0])
	case syntax.OpStar, syntax.OpPlus, syntax.OpQuest, syntax.OpRepeat:
		sub, err := c.expr(re.Sub[0])
		if err != nil {
			return nil, err
		}
		switch re.Op {
		case syntax.OpStar:
			return g.Star(sub), nil
		case syntax.OpPlus:
			return g.Plus(sub), nil
		case syntax.OpQuest:
			return g.Opt(sub), nil
		}
		if re.Min > maxRegexRepeat || re.Max > maxRegexRepeat {
			return nil, &UnsupportedError{Keyword: "repetition count", Path: re.String(), Reason: fmt.Sprintf("counts above %d", maxRegexRepeat)}
		}
		return g.Repeat(sub, re.Min, re.Max), nil
	case syntax.OpConcat, syntax.OpAlternate:
		items := make([]g.Expr, 0, len(re.Sub))
		for _, s := range re.Sub {
			e, err := c.expr(s)
			if err != nil {
				return nil, err
			}
			items = append(items, e)
		}
		if re.Op == syntax.OpConcat {
			return g.Seq(items...), nil
		}
		return g.Alt(items...), nil
	case syntax.OpBeginLine, syntax.OpEndLine, syntax.OpBeginText, syntax.OpEndText:
		return nil, &UnsupportedError{Keyword: "anchor", Path: re.String(), Reason: "^ and $ are allowed only at the start and end of the pattern"}
	case syntax.OpWordBoundary, syntax.OpNoWordBoundary:
		return nil, &UnsupportedError{Keyword: `word boundary \b`, Path: re.String()}
	case syntax.OpNoMatch:
		return nil, &UnsupportedError{Keyword: "empty pattern", Path: re.String(), Reason: "it matches nothing"}
	}
	return nil, &UnsupportedError{Keyword: fmt.Sprintf("regex operator %v", re.Op), Path: re.String()}
}

// foldRanges is r with every case variant (simple folding).
func foldRanges(r rune) []g.RuneRange {
	out := []g.RuneRange{{Lo: r, Hi: r}}
	for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
		out = append(out, g.RuneRange{Lo: f, Hi: f})
	}
	return out
}

// class is one character of rs: as UTF-8, or in JSON-string mode with the
// characters a JSON string must escape written as escapes.
func (c *regexCompiler) class(rs []g.RuneRange) g.Expr {
	rs = g.NormalizeRanges(rs)
	if !c.json {
		return g.Class(false, rs...)
	}
	var raw []g.RuneRange
	var escapes []g.Expr
	for _, r := range rs {
		for x := r.Lo; x <= r.Hi && x <= 0x5c; x++ {
			if e, ok := jsonEscape(x); ok {
				escapes = append(escapes, g.Lit(e))
			}
		}
		raw = append(raw, r)
	}
	raw = subtract(raw, []g.RuneRange{{Lo: 0, Hi: 0x1f}, {Lo: '"', Hi: '"'}, {Lo: '\\', Hi: '\\'}})
	alts := escapes
	if len(raw) > 0 {
		alts = append([]g.Expr{g.Class(false, raw...)}, escapes...)
	}
	return g.Alt(alts...)
}

// jsonEscape is how a JSON string writes x, when it must be escaped.
func jsonEscape(x rune) (string, bool) {
	switch x {
	case '"':
		return `\"`, true
	case '\\':
		return `\\`, true
	case '\n':
		return `\n`, true
	case '\t':
		return `\t`, true
	case '\r':
		return `\r`, true
	case '\b':
		return `\b`, true
	case '\f':
		return `\f`, true
	}
	if x < 0x20 {
		return fmt.Sprintf(`\u%04x`, x), true
	}
	return "", false
}

// subtract removes the ranges of cut from normalized rs.
func subtract(rs, cut []g.RuneRange) []g.RuneRange {
	keep := g.Complement(g.NormalizeRanges(cut))
	var out []g.RuneRange
	for _, r := range rs {
		for _, k := range keep {
			lo, hi := max(r.Lo, k.Lo), min(r.Hi, k.Hi)
			if lo <= hi {
				out = append(out, g.RuneRange{Lo: lo, Hi: hi})
			}
		}
	}
	return out
}
