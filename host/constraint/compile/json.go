package compile

import (
	"bytes"
	"encoding/json"
	"fmt"

	g "github.com/kvhost/kvhost/sdk/constraint/grammar"
)

// Names of the shared JSON rules.
const (
	ruleWS      = "ws"
	ruleString  = "json-string"
	ruleChar    = "json-char"
	ruleCharBMP = "json-char-bmp"
	ruleNumber  = "json-number"
	ruleInteger = "json-integer"
	ruleValue   = "json-value"
	ruleObject  = "json-object"
	ruleArray   = "json-array"
)

// maxIntDigits bounds the integer part of a generated number (and the
// exponent to two digits), so every number parses as a float64 without
// overflow; 16 digits is past float64's exact-integer range.
const maxIntDigits = 16

// ws is JSON's insignificant whitespace. It is unbounded (one parser state
// however long), so a model that emits whitespace forever is stopped by
// max_tokens, before which the budget closes the value (package grammar).
func ws() g.Expr { return g.Named(ruleWS) }

// defineJSON adds the shared JSON rules to b once.
func defineJSON(b *g.Builder) {
	if b.Has(ruleWS) {
		return
	}
	digit := g.Bytes('0', '9')
	hex := g.Alt(digit, g.Bytes('a', 'f'), g.Bytes('A', 'F'))
	b.Define(ruleWS, g.Star(g.Chars(" \t\n\r")))
	// A JSON string character: anything but '"', '\\' and controls, or an
	// escape. \u escapes of surrogates are not generated, so each escape
	// is exactly one code point (what minLength/maxLength count).
	b.Define(ruleChar, g.Alt(
		g.Class(true, g.RuneRange{Lo: 0, Hi: 0x1f}, g.RuneRange{Lo: '"', Hi: '"'}, g.RuneRange{Lo: '\\', Hi: '\\'}),
		g.Seq(g.Lit(`\`), g.Alt(g.Chars(`"\/bfnrt`), g.Seq(g.Lit("u"), nonSurrogateHex4(hex, digit))))))
	// A character of a length-bounded string: within the Basic
	// Multilingual Plane, so code points (JSON Schema's length) and
	// UTF-16 units (JavaScript's, zod's) count the same.
	b.Define(ruleCharBMP, g.Alt(
		g.Class(false, g.RuneRange{Lo: 0x20, Hi: '"' - 1}, g.RuneRange{Lo: '"' + 1, Hi: '\\' - 1}, g.RuneRange{Lo: '\\' + 1, Hi: 0xFFFF}),
		g.Seq(g.Lit(`\`), g.Alt(g.Chars(`"\/bfnrt`), g.Seq(g.Lit("u"), nonSurrogateHex4(hex, digit))))))
	b.Define(ruleString, g.Seq(g.Lit(`"`), g.Star(g.Named(ruleChar)), g.Lit(`"`)))
	intPart := g.Alt(g.Lit("0"), g.Seq(g.Bytes('1', '9'), g.Repeat(digit, 0, maxIntDigits-1)))
	b.Define(ruleInteger, g.Seq(g.Opt(g.Lit("-")), intPart))
	b.Define(ruleNumber, g.Seq(g.Opt(g.Lit("-")), intPart,
		g.Opt(g.Seq(g.Lit("."), g.Plus(digit))),
		g.Opt(g.Seq(g.Chars("eE"), g.Opt(g.Chars("+-")), g.Repeat(digit, 1, 2)))))
	b.Define(ruleValue, g.Alt(g.Named(ruleObject), g.Named(ruleArray), g.Named(ruleString), g.Named(ruleNumber),
		g.Lit("true"), g.Lit("false"), g.Lit("null")))
	member := g.Seq(g.Named(ruleString), ws(), g.Lit(":"), ws(), g.Named(ruleValue))
	b.Define(ruleObject, g.Seq(g.Lit("{"), ws(), g.Opt(g.Seq(member, g.Star(g.Seq(ws(), g.Lit(","), ws(), member)))), ws(), g.Lit("}")))
	b.Define(ruleArray, g.Seq(g.Lit("["), ws(), g.Opt(g.Seq(g.Named(ruleValue), g.Star(g.Seq(ws(), g.Lit(","), ws(), g.Named(ruleValue))))), ws(), g.Lit("]")))
}

// nonSurrogateHex4 is four hex digits outside D800..DFFF.
func nonSurrogateHex4(hex, digit g.Expr) g.Expr {
	notD := g.Alt(digit, g.Bytes('a', 'c'), g.Bytes('A', 'C'), g.Chars("efEF"))
	return g.Alt(
		g.Seq(notD, hex, hex, hex),
		g.Seq(g.Chars("dD"), g.Bytes('0', '7'), hex, hex))
}

// JSONObject is the constraint of response_format json_object: one JSON
// object, with optional whitespace before it.
func JSONObject() *g.Grammar {
	b := g.NewBuilder()
	defineJSON(b)
	b.Define("root", g.Seq(ws(), g.Named(ruleObject)))
	gr, err := b.Build("root")
	if err != nil {
		panic(err) // a fixed grammar: a failure is a bug
	}
	return gr
}

// JSONValue is any JSON value.
func JSONValue() *g.Grammar {
	b := g.NewBuilder()
	defineJSON(b)
	b.Define("root", g.Seq(ws(), g.Named(ruleValue)))
	gr, err := b.Build("root")
	if err != nil {
		panic(err)
	}
	return gr
}

// Choice is guided_choice: exactly one of the given strings.
func Choice(options []string) (*g.Grammar, error) {
	if len(options) == 0 {
		return nil, &SyntaxError{What: "choice", Err: fmt.Errorf("the list of choices is empty")}
	}
	alts := make([]g.Expr, 0, len(options))
	for i, o := range options {
		if o == "" {
			return nil, &SyntaxError{What: "choice", Pos: fmt.Sprintf("element %d", i), Err: fmt.Errorf("an empty choice cannot be generated")}
		}
		alts = append(alts, g.Lit(o))
	}
	b := g.NewBuilder()
	b.Define("root", g.Alt(alts...))
	return b.Build("root")
}

// jsonLiteral is the JSON text of v (no HTML escaping).
func jsonLiteral(v any) (string, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return "", err
	}
	return string(bytes.TrimRight(buf.Bytes(), "\n")), nil
}
