package compile

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	g "github.com/kvhost/kvhost/sdk/constraint/grammar"
)

// GBNF compiles a grammar in llama.cpp's GBNF (the EBNF dialect SGLang's
// "ebnf" and xgrammar also read): rules `name ::= alternatives`, string
// literals "...", character classes [...] and [^...], ".", grouping,
// `*` `+` `?` `{m}` `{m,}` `{m,n}`, `#` comments. The start rule is
// "root". A rule ends at the end of its line unless a parenthesis is
// open or the next line starts with "|". Escapes: \n \r \t \\ \" \[ \]
// \- \xHH \uHHHH \UHHHHHHHH.
func GBNF(src string) (*g.Grammar, error) {
	p := &gbnfParser{src: src, b: g.NewBuilder()}
	if err := p.parse(); err != nil {
		return nil, err
	}
	if !p.defined["root"] {
		return nil, &SyntaxError{What: "GBNF grammar", Err: fmt.Errorf("no rule named root (the start rule)")}
	}
	for name := range p.used {
		if !p.defined[name] {
			return nil, &SyntaxError{What: "GBNF grammar", Pos: fmt.Sprintf("byte %d", p.used[name]), Err: fmt.Errorf("rule %q is used but never defined", name)}
		}
	}
	gr, err := p.b.Build("root")
	if err != nil {
		return nil, &SyntaxError{What: "GBNF grammar", Err: err}
	}
	return gr, nil
}

type gbnfParser struct {
	src     string
	pos     int
	b       *g.Builder
	defined map[string]bool
	used    map[string]int
}

func (p *gbnfParser) errf(format string, args ...any) error {
	line := 1 + strings.Count(p.src[:p.pos], "\n")
	col := p.pos - strings.LastIndexByte(p.src[:p.pos], '\n')
	return &SyntaxError{What: "GBNF grammar", Pos: fmt.Sprintf("line %d column %d", line, col), Err: fmt.Errorf(format, args...)}
}

// space skips blanks and comments, and newlines too when newlines is set.
func (p *gbnfParser) space(newlines bool) {
	for p.pos < len(p.src) {
		switch c := p.src[p.pos]; {
		case c == ' ' || c == '\t' || c == '\r':
			p.pos++
		case c == '#':
			for p.pos < len(p.src) && p.src[p.pos] != '\n' {
				p.pos++
			}
		case c == '\n' && newlines:
			p.pos++
		case c == '\n' && p.continuation():
			p.pos++
		default:
			return
		}
	}
}

// continuation reports whether the line after the newline at p.pos
// starts (after blanks) with "|", continuing the rule.
func (p *gbnfParser) continuation() bool {
	for i := p.pos + 1; i < len(p.src); i++ {
		switch p.src[i] {
		case ' ', '\t', '\r':
			continue
		case '|':
			return true
		}
		return false
	}
	return false
}

func isNameByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_'
}

func (p *gbnfParser) name() string {
	start := p.pos
	for p.pos < len(p.src) && isNameByte(p.src[p.pos]) {
		p.pos++
	}
	return p.src[start:p.pos]
}

func (p *gbnfParser) parse() error {
	p.defined, p.used = map[string]bool{}, map[string]int{}
	for {
		p.space(true)
		if p.pos >= len(p.src) {
			return nil
		}
		name := p.name()
		if name == "" {
			return p.errf("expected a rule name, found %q", p.peekText())
		}
		p.space(false)
		if !strings.HasPrefix(p.src[p.pos:], "::=") {
			return p.errf("expected ::= after rule name %q", name)
		}
		p.pos += 3
		p.space(true)
		e, err := p.alternatives(false)
		if err != nil {
			return err
		}
		if p.defined[name] {
			return p.errf("rule %q is defined twice", name)
		}
		p.defined[name] = true
		p.b.Define(name, e)
		p.space(false)
		if p.pos < len(p.src) && p.src[p.pos] != '\n' {
			return p.errf("unexpected %q after rule %q", p.peekText(), name)
		}
	}
}

func (p *gbnfParser) peekText() string {
	end := min(len(p.src), p.pos+12)
	return p.src[p.pos:end]
}

func (p *gbnfParser) alternatives(nested bool) (g.Expr, error) {
	var alts []g.Expr
	for {
		s, err := p.sequence(nested)
		if err != nil {
			return nil, err
		}
		alts = append(alts, s)
		p.space(nested)
		if p.pos < len(p.src) && p.src[p.pos] == '|' {
			p.pos++
			p.space(true)
			continue
		}
		return g.Alt(alts...), nil
	}
}

func (p *gbnfParser) sequence(nested bool) (g.Expr, error) {
	var items []g.Expr
	for {
		p.space(nested)
		if p.pos >= len(p.src) {
			break
		}
		c := p.src[p.pos]
		var item g.Expr
		switch {
		case c == '"':
			s, err := p.literal()
			if err != nil {
				return nil, err
			}
			item = g.Lit(s)
		case c == '[':
			e, err := p.charClass()
			if err != nil {
				return nil, err
			}
			item = e
		case c == '.':
			p.pos++
			item = g.AnyChar()
		case c == '(':
			p.pos++
			p.space(true)
			e, err := p.alternatives(true)
			if err != nil {
				return nil, err
			}
			p.space(true)
			if p.pos >= len(p.src) || p.src[p.pos] != ')' {
				return nil, p.errf("expected )")
			}
			p.pos++
			item = e
		case isNameByte(c):
			save := p.pos
			name := p.name()
			// A name followed by ::= starts the next rule.
			q := p.pos
			for q < len(p.src) && (p.src[q] == ' ' || p.src[q] == '\t') {
				q++
			}
			if strings.HasPrefix(p.src[q:], "::=") {
				p.pos = save
				return p.seqEnd(items)
			}
			if _, ok := p.used[name]; !ok {
				p.used[name] = save
			}
			p.b.Declare(name)
			item = g.Named(name)
		case c == '<':
			return nil, &UnsupportedError{Keyword: "token reference <...>", Path: fmt.Sprintf("byte %d", p.pos), Reason: "GBNF token references are not supported; write the token's text as a literal"}
		default:
			return p.seqEnd(items)
		}
		item, err := p.postfix(item)
		if err != nil {
			return nil, err
		}
		items = append(items, item)
	}
	return p.seqEnd(items)
}

func (p *gbnfParser) seqEnd(items []g.Expr) (g.Expr, error) {
	return g.Seq(items...), nil
}

func (p *gbnfParser) postfix(item g.Expr) (g.Expr, error) {
	for p.pos < len(p.src) {
		switch p.src[p.pos] {
		case '*':
			item = g.Star(item)
		case '+':
			item = g.Plus(item)
		case '?':
			item = g.Opt(item)
		case '{':
			end := strings.IndexByte(p.src[p.pos:], '}')
			if end < 0 {
				return nil, p.errf("unclosed {")
			}
			spec := strings.ReplaceAll(p.src[p.pos+1:p.pos+end], " ", "")
			lo, hi, ok := strings.Cut(spec, ",")
			m, err1 := strconv.Atoi(lo)
			n := m
			var err2 error
			if ok {
				if hi == "" {
					n = -1
				} else {
					n, err2 = strconv.Atoi(hi)
				}
			}
			if err1 != nil || err2 != nil || m < 0 || n >= 0 && n < m || m > maxRegexRepeat || n > maxRegexRepeat {
				return nil, p.errf("bad repetition {%s} (want {m}, {m,} or {m,n} with 0 <= m <= n <= %d)", spec, maxRegexRepeat)
			}
			p.pos += end
			item = g.Repeat(item, m, n)
		default:
			return item, nil
		}
		p.pos++
	}
	return item, nil
}

// escape decodes the escape at p.pos (just after the backslash).
func (p *gbnfParser) escape() (rune, error) {
	if p.pos >= len(p.src) {
		return 0, p.errf("unfinished escape")
	}
	c := p.src[p.pos]
	p.pos++
	switch c {
	case 'n':
		return '\n', nil
	case 'r':
		return '\r', nil
	case 't':
		return '\t', nil
	case '\\', '"', '[', ']', '-', '^', '/', '\'':
		return rune(c), nil
	case 'x', 'u', 'U':
		n := map[byte]int{'x': 2, 'u': 4, 'U': 8}[c]
		if p.pos+n > len(p.src) {
			return 0, p.errf("short \\%c escape", c)
		}
		v, err := strconv.ParseUint(p.src[p.pos:p.pos+n], 16, 32)
		if err != nil || v > utf8.MaxRune {
			return 0, p.errf("bad \\%c escape %q", c, p.src[p.pos:p.pos+n])
		}
		p.pos += n
		return rune(v), nil
	}
	return 0, p.errf("unknown escape \\%c", c)
}

// literal parses "..." into its UTF-8 bytes (\xHH is one byte).
func (p *gbnfParser) literal() (string, error) {
	p.pos++ // "
	var sb strings.Builder
	for {
		if p.pos >= len(p.src) || p.src[p.pos] == '\n' {
			return "", p.errf("unterminated string literal")
		}
		c := p.src[p.pos]
		switch c {
		case '"':
			p.pos++
			return sb.String(), nil
		case '\\':
			p.pos++
			x := p.src[min(p.pos, len(p.src)-1)]
			r, err := p.escape()
			if err != nil {
				return "", err
			}
			if x == 'x' {
				sb.WriteByte(byte(r))
			} else {
				sb.WriteRune(r)
			}
		default:
			r, size := utf8.DecodeRuneInString(p.src[p.pos:])
			sb.WriteRune(r)
			p.pos += size
		}
	}
}

// classChar reads one character of a class, escapes decoded.
func (p *gbnfParser) classChar() (rune, error) {
	if p.pos >= len(p.src) {
		return 0, p.errf("unterminated character class")
	}
	if p.src[p.pos] == '\\' {
		p.pos++
		return p.escape()
	}
	r, size := utf8.DecodeRuneInString(p.src[p.pos:])
	p.pos += size
	return r, nil
}

func (p *gbnfParser) charClass() (g.Expr, error) {
	p.pos++ // [
	negate := false
	if p.pos < len(p.src) && p.src[p.pos] == '^' {
		negate = true
		p.pos++
	}
	var rs []g.RuneRange
	for {
		if p.pos >= len(p.src) {
			return nil, p.errf("unterminated character class")
		}
		if p.src[p.pos] == ']' {
			p.pos++
			break
		}
		lo, err := p.classChar()
		if err != nil {
			return nil, err
		}
		hi := lo
		if p.pos+1 < len(p.src) && p.src[p.pos] == '-' && p.src[p.pos+1] != ']' {
			p.pos++
			if hi, err = p.classChar(); err != nil {
				return nil, err
			}
			if hi < lo {
				return nil, p.errf("character range %q-%q is reversed", lo, hi)
			}
		}
		rs = append(rs, g.RuneRange{Lo: lo, Hi: hi})
	}
	if !negate && len(rs) == 0 {
		return nil, p.errf("empty character class matches nothing")
	}
	return g.Class(negate, rs...), nil
}
