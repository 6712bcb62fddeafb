package compile

import (
	"encoding/json"
	"errors"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"

	check "github.com/kvhost/kvhost/host/constraint/constrainttest"
)

// jsonGBNF is llama.cpp's grammars/json.gbnf, as llama.cpp writes it.
const jsonGBNF = `root   ::= object
value  ::= object | array | string | number | ("true" | "false" | "null") ws

object ::=
  "{" ws (
            string ":" ws value
    ("," ws string ":" ws value)*
  )? "}" ws

array  ::=
  "[" ws (
            value
    ("," ws value)*
  )? "]" ws

string ::=
  "\"" (
    [^"\\\x7F\x00-\x1F] |
    "\\" (["\\bfnrt] | "u" [0-9a-fA-F]{4}) # escapes
  )* "\"" ws

number ::= ("-"? ([0-9] | [1-9] [0-9]{0,15})) ("." [0-9]+)? ([eE] [-+]? [0-9] [1-9]{0,15})? ws

# Optional space: by convention, applied in this grammar after literal chars when allowed
ws ::= | " " | "\n" [ \t]{0,20}
`

// arithGBNF has left-factored precedence levels.
const arithGBNF = `root ::= expr
expr ::= term (("+" | "-") term)*
term ::= factor (("*" | "/") factor)*
factor ::= num | "(" expr ")"
num ::= [1-9] [0-9]{0,2}
`

// evalArith parses and evaluates an arithArith sentence (the reference
// parser: it fails on anything the grammar should not produce).
func evalArith(s string) (int, error) {
	p := 0
	var expr, term, factor func() (int, error)
	factor = func() (int, error) {
		if p < len(s) && s[p] == '(' {
			p++
			v, err := expr()
			if err != nil || p >= len(s) || s[p] != ')' {
				return 0, errors.New("missing )")
			}
			p++
			return v, nil
		}
		q := p
		for p < len(s) && s[p] >= '0' && s[p] <= '9' {
			p++
		}
		return strconv.Atoi(s[q:p])
	}
	term = func() (int, error) {
		v, err := factor()
		for err == nil && p < len(s) && (s[p] == '*' || s[p] == '/') {
			p++
			_, err = factor()
		}
		return v, err
	}
	expr = func() (int, error) {
		v, err := term()
		for err == nil && p < len(s) && (s[p] == '+' || s[p] == '-') {
			p++
			_, err = term()
		}
		return v, err
	}
	v, err := expr()
	if err == nil && p != len(s) {
		err = errors.New("trailing input")
	}
	return v, err
}

// TestGBNFSamplesParse: samples of llama.cpp's JSON grammar are JSON, and
// samples of an arithmetic grammar parse with a hand-written parser.
func TestGBNFSamplesParse(t *testing.T) {
	r := rand.New(rand.NewPCG(21, 22))
	gj, err := GBNF(jsonGBNF)
	if err != nil {
		t.Fatal(err)
	}
	pj := program(t, gj)
	for i := range 100 {
		s, err := check.Sample(pj, r, 200)
		if err != nil {
			t.Fatal(err)
		}
		var v map[string]any
		dec := json.NewDecoder(strings.NewReader(s))
		dec.UseNumber() // the grammar allows exponents beyond float64
		if err := dec.Decode(&v); err != nil || dec.More() {
			t.Fatalf("sample %d %q is not a JSON object: %v", i, s, err)
		}
	}
	ga, err := GBNF(arithGBNF)
	if err != nil {
		t.Fatal(err)
	}
	pa := program(t, ga)
	for i := range 100 {
		s, err := check.Sample(pa, r, 40)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := evalArith(s); err != nil {
			t.Fatalf("sample %d %q does not parse: %v", i, s, err)
		}
	}
}

func TestGBNFSyntax(t *testing.T) {
	ok := []string{
		"root ::= \"a\" | \"b\"\n",
		"root ::= x\n  | y\nx ::= [a-c]+\ny ::= \"\\u00e9\" \"\\x41\" .\n",
		"# comment\nroot ::= (\"a\"\n   \"b\")? [^\\]\\n]{2,3}\n",
		"root ::= \"a\"{2} \"b\"{1,} \"c\"{0,3}",
	}
	for _, src := range ok {
		if _, err := GBNF(src); err != nil {
			t.Errorf("%q: %v", src, err)
		}
	}
	bad := map[string]string{
		"rot ::= \"a\"":                  "no rule named root",
		"root ::= x":                     "never defined",
		"root ::= \"a":                   "unterminated",
		"root ::= [a-":                   "unterminated",
		"root ::= root \"a\" | \"b\"":    "left-recursive",
		"root ::= \"a\"\nroot ::= \"b\"": "defined twice",
		"root := \"a\"":                  "expected ::=",
		"root ::= \"a\"{3,1}":            "bad repetition",
		"root ::= [z-a]":                 "reversed",
	}
	for src, want := range bad {
		_, err := GBNF(src)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %q", src, err, want)
		}
	}
	_, err := GBNF("root ::= <think>")
	var ue *UnsupportedError
	if !errors.As(err, &ue) {
		t.Errorf("token reference: %v", err)
	}
}

func FuzzGBNF(f *testing.F) {
	f.Add(jsonGBNF)
	f.Add(arithGBNF)
	f.Fuzz(func(t *testing.T, src string) {
		gr, err := GBNF(src)
		if err != nil {
			return
		}
		if err := gr.Validate(); err != nil {
			t.Fatalf("compiled to an invalid grammar: %v", err)
		}
	})
}
