package compile

import (
	"bytes"
	"errors"
	"fmt"
	"math/big"
	"slices"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"

	g "github.com/kvhost/kvhost/sdk/constraint/grammar"
)

// schemaURL is where a request's schema lives for the schema library; no
// other URL is ever loaded ($ref to anything outside the document fails).
const schemaURL = "mem://kvhost/schema.json"

// Limits on what a schema may ask for (each costs grammar rules).
const (
	maxItemsChain = 4096
	maxLengthRep  = 10000
)

// JSONSchema compiles a JSON Schema (draft 2020-12 unless $schema names
// another) into the grammar of the JSON texts that validate against it.
//
// The library github.com/santhosh-tekuri/jsonschema/v6 parses the schema,
// checks it against its metaschema and resolves $ref/$defs; this package
// walks the result. Supported: type (and arrays of types), properties,
// required, additionalProperties, enum, const, anyOf, oneOf, allOf with
// one member, $ref/$defs (recursion included), items, prefixItems,
// minItems, maxItems, minLength, maxLength, pattern, format (Formats),
// minimum, maximum, exclusiveMinimum, exclusiveMaximum, multipleOf 1.
// Annotations (title, description, default, examples, ...) are ignored.
// Any other assertion is an *UnsupportedError naming it.
//
// What is generated is a subset of what validates: properties come in
// schema order, additional properties are not generated (a schema that
// declares none but gives additionalProperties a schema is a map), and
// oneOf is generated as anyOf (branches must not overlap).
func JSONSchema(doc []byte) (*g.Grammar, error) {
	b := g.NewBuilder()
	name, err := schemaInto(b, doc, "")
	if err != nil {
		return nil, err
	}
	b.Define("root", g.Seq(ws(), g.Named(name)))
	gr, err := b.Build("root")
	if err != nil {
		return nil, &UnsupportedError{Keyword: "schema", Reason: err.Error()}
	}
	return gr, nil
}

// schemaInto compiles doc into b (with the shared JSON rules), its rule
// names prefixed, and returns the name of the rule of its values.
func schemaInto(b *g.Builder, doc []byte, prefix string) (string, error) {
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(doc))
	if err != nil {
		return "", &SyntaxError{What: "JSON Schema", Err: err}
	}
	raw, err := scanRaw(doc)
	if err != nil {
		return "", &SyntaxError{What: "JSON Schema", Err: err}
	}
	jc := jsonschema.NewCompiler()
	jc.UseLoader(noLoader{})
	jc.DefaultDraft(jsonschema.Draft2020)
	if err := jc.AddResource(schemaURL, v); err != nil {
		return "", &SyntaxError{What: "JSON Schema", Err: err}
	}
	root, err := jc.Compile(schemaURL)
	if err != nil {
		var le *jsonschema.LoadURLError
		if errors.As(err, &le) {
			return "", &UnsupportedError{Keyword: "$ref", Path: le.URL, Reason: "only references inside the schema ($defs, definitions, #...) are resolved"}
		}
		return "", &SyntaxError{What: "JSON Schema", Err: err}
	}
	c := &schemaCompiler{b: b, names: map[*jsonschema.Schema]string{}, raw: raw, prefix: prefix}
	defineJSON(b)
	return c.ruleFor(root)
}

// noLoader refuses every URL: a request's schema must be self-contained.
type noLoader struct{}

func (noLoader) Load(url string) (any, error) {
	return nil, &UnsupportedError{Keyword: "$ref", Path: url, Reason: "only references inside the schema ($defs, definitions, #...) are resolved"}
}

type schemaCompiler struct {
	b      *g.Builder
	names  map[*jsonschema.Schema]string
	raw    *rawIndex
	prefix string
	n      int
}

// pointer is the JSON pointer of s within the request's schema.
func pointer(s *jsonschema.Schema) string {
	_, p, _ := strings.Cut(s.Location, "#")
	if p == "" {
		return "/"
	}
	return p
}

// rawPointer is pointer(s) as scanRaw keys it ("" for the root).
func rawPointer(s *jsonschema.Schema) string {
	if p := pointer(s); p != "/" {
		return p
	}
	return ""
}

// format is s's "format" value as written ("" when none).
func (c *schemaCompiler) format(s *jsonschema.Schema) string {
	return c.raw.formats[rawPointer(s)]
}

// ruleFor names the rule of s's JSON values, compiling s once (so $ref
// cycles become recursive rules).
func (c *schemaCompiler) ruleFor(s *jsonschema.Schema) (string, error) {
	if name, ok := c.names[s]; ok {
		return name, nil
	}
	name := fmt.Sprintf("%sschema-%d", c.prefix, c.n)
	c.n++
	c.names[s] = name
	c.b.Declare(name)
	e, err := c.expr(s)
	if err != nil {
		return "", err
	}
	c.b.Define(name, e)
	return name, nil
}

func unsupported(s *jsonschema.Schema, kw, reason string) error {
	return &UnsupportedError{Keyword: kw, Path: pointer(s), Reason: reason}
}

// unsupportedKeywords are assertions kvhost cannot generate for.
var unsupportedKeywords = []string{"not", "if", "then", "else", "maxProperties", "minProperties", "propertyNames",
	"patternProperties", "dependencies", "dependentRequired", "dependentSchemas", "unevaluatedProperties",
	"uniqueItems", "contains", "minContains", "maxContains", "unevaluatedItems", "additionalItems",
	"$dynamicRef", "$recursiveRef"}

// keywords lists the assertion keywords s uses.
func (c *schemaCompiler) keywords(s *jsonschema.Schema) []string {
	var kw []string
	add := func(name string, present bool) {
		if present {
			kw = append(kw, name)
		}
	}
	add("$ref", s.Ref != nil)
	add("$dynamicRef", s.DynamicRef != nil)
	add("$recursiveRef", s.RecursiveRef != nil)
	add("type", s.Types != nil && !s.Types.IsEmpty())
	add("enum", s.Enum != nil)
	add("const", s.Const != nil)
	add("not", s.Not != nil)
	add("allOf", len(s.AllOf) > 0)
	add("anyOf", len(s.AnyOf) > 0)
	add("oneOf", len(s.OneOf) > 0)
	add("if", s.If != nil)
	add("then", s.Then != nil)
	add("else", s.Else != nil)
	add("format", c.format(s) != "")
	add("maxProperties", s.MaxProperties != nil)
	add("minProperties", s.MinProperties != nil)
	add("required", len(s.Required) > 0)
	add("propertyNames", s.PropertyNames != nil)
	add("properties", len(s.Properties) > 0)
	add("patternProperties", len(s.PatternProperties) > 0)
	add("additionalProperties", s.AdditionalProperties != nil)
	add("dependencies", len(s.Dependencies) > 0)
	add("dependentRequired", len(s.DependentRequired) > 0)
	add("dependentSchemas", len(s.DependentSchemas) > 0)
	add("unevaluatedProperties", s.UnevaluatedProperties != nil)
	add("minItems", s.MinItems != nil)
	add("maxItems", s.MaxItems != nil)
	add("uniqueItems", s.UniqueItems)
	add("contains", s.Contains != nil)
	add("minContains", s.MinContains != nil)
	add("maxContains", s.MaxContains != nil)
	add("items", s.Items != nil || s.Items2020 != nil)
	add("additionalItems", s.AdditionalItems != nil)
	add("prefixItems", len(s.PrefixItems) > 0)
	add("unevaluatedItems", s.UnevaluatedItems != nil)
	add("minLength", s.MinLength != nil)
	add("maxLength", s.MaxLength != nil)
	add("pattern", s.Pattern != nil)
	add("maximum", s.Maximum != nil)
	add("minimum", s.Minimum != nil)
	add("exclusiveMaximum", s.ExclusiveMaximum != nil)
	add("exclusiveMinimum", s.ExclusiveMinimum != nil)
	add("multipleOf", s.MultipleOf != nil)
	return kw
}

// only reports whether s's keywords all lie in allowed; else it names the
// first that does not.
func only(kw []string, allowed ...string) (string, bool) {
	for _, k := range kw {
		if !slices.Contains(allowed, k) {
			return k, false
		}
	}
	return "", true
}

var (
	objectKeywords = []string{"properties", "required", "additionalProperties"}
	arrayKeywords  = []string{"items", "prefixItems", "minItems", "maxItems"}
	stringKeywords = []string{"minLength", "maxLength", "pattern", "format"}
	numberKeywords = []string{"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"}
)

// expr is the grammar of s's JSON values.
func (c *schemaCompiler) expr(s *jsonschema.Schema) (g.Expr, error) {
	if s.Bool != nil {
		if *s.Bool {
			return g.Named(ruleValue), nil
		}
		return nil, unsupported(s, "false schema", "no value validates against it")
	}
	kw := c.keywords(s)
	for _, k := range kw {
		if slices.Contains(unsupportedKeywords, k) {
			return nil, unsupported(s, k, "kvhost cannot constrain generation by it")
		}
	}
	switch {
	case s.Ref != nil:
		if k, ok := only(kw, "$ref"); !ok {
			return nil, unsupported(s, k, "keywords beside $ref are not supported; move them into the referenced schema")
		}
		name, err := c.ruleFor(s.Ref)
		return g.Named(name), err
	case len(s.AllOf) > 0:
		if k, ok := only(kw, "allOf"); !ok || len(s.AllOf) != 1 {
			if ok {
				k = "allOf"
			}
			return nil, unsupported(s, k, "allOf is supported with exactly one subschema and no other keyword")
		}
		name, err := c.ruleFor(s.AllOf[0])
		return g.Named(name), err
	case s.Enum != nil || s.Const != nil:
		return c.enum(s)
	case len(s.AnyOf) > 0 || len(s.OneOf) > 0:
		kwName := "anyOf"
		subs := s.AnyOf
		if len(s.OneOf) > 0 {
			kwName, subs = "oneOf", s.OneOf
		}
		if k, ok := only(kw, kwName); !ok {
			return nil, unsupported(s, k, fmt.Sprintf("keywords beside %s are not supported; move them into each branch", kwName))
		}
		alts := make([]g.Expr, 0, len(subs))
		for _, sub := range subs {
			name, err := c.ruleFor(sub)
			if err != nil {
				return nil, err
			}
			alts = append(alts, g.Named(name))
		}
		return g.Alt(alts...), nil
	}
	types := c.types(s, kw)
	if len(types) == 0 {
		return g.Named(ruleValue), nil
	}
	alts := make([]g.Expr, 0, len(types))
	for _, t := range types {
		e, err := c.typed(s, t)
		if err != nil {
			return nil, err
		}
		alts = append(alts, e)
	}
	return g.Alt(alts...), nil
}

// types is the JSON types to generate: the schema's, or those its
// keywords imply; none means any value. integer is dropped when number
// is there (it is a subset).
func (c *schemaCompiler) types(s *jsonschema.Schema, kw []string) []string {
	var ts []string
	if s.Types != nil && !s.Types.IsEmpty() {
		ts = s.Types.ToStrings()
	} else {
		has := func(list []string) bool {
			for _, k := range kw {
				if slices.Contains(list, k) {
					return true
				}
			}
			return false
		}
		for _, t := range []struct {
			name string
			kws  []string
		}{{"object", objectKeywords}, {"array", arrayKeywords}, {"string", stringKeywords}, {"number", numberKeywords}} {
			if has(t.kws) {
				ts = append(ts, t.name)
			}
		}
	}
	if slices.Contains(ts, "number") {
		ts = slices.DeleteFunc(ts, func(t string) bool { return t == "integer" })
	}
	return ts
}

func (c *schemaCompiler) typed(s *jsonschema.Schema, t string) (g.Expr, error) {
	switch t {
	case "null":
		return g.Lit("null"), nil
	case "boolean":
		return g.Alt(g.Lit("true"), g.Lit("false")), nil
	case "string":
		return c.str(s)
	case "integer", "number":
		return c.number(s, t == "integer")
	case "array":
		return c.array(s)
	case "object":
		return c.object(s)
	}
	return nil, unsupported(s, "type", fmt.Sprintf("unknown type %q", t))
}

// enum is the listed values (enum, or const) that validate against the
// whole schema s, as JSON literals.
func (c *schemaCompiler) enum(s *jsonschema.Schema) (g.Expr, error) {
	var values []any
	if s.Enum != nil {
		values = s.Enum.Values
	}
	if s.Const != nil {
		values = append(values, *s.Const)
	}
	var alts []g.Expr
	for _, v := range values {
		if err := s.Validate(v); err != nil {
			continue // another keyword rules it out
		}
		lit, err := jsonLiteral(v)
		if err != nil {
			return nil, unsupported(s, "enum", err.Error())
		}
		alts = append(alts, g.Lit(lit))
	}
	if len(alts) == 0 {
		return nil, unsupported(s, "enum", "no listed value satisfies the schema's other keywords")
	}
	return g.Alt(alts...), nil
}

func (c *schemaCompiler) str(s *jsonschema.Schema) (g.Expr, error) {
	quote := g.Lit(`"`)
	switch {
	case c.format(s) != "":
		if s.MinLength != nil || s.MaxLength != nil || s.Pattern != nil {
			return nil, unsupported(s, "format", "format together with minLength, maxLength or pattern is not supported")
		}
		e, ok := formatExpr(c.format(s))
		if !ok {
			return nil, unsupported(s, "format", fmt.Sprintf("format %q is not supported (supported: %s)", c.format(s), formatList()))
		}
		return e, nil
	case s.Pattern != nil:
		if s.MinLength != nil || s.MaxLength != nil {
			return nil, unsupported(s, "pattern", "pattern together with minLength or maxLength is not supported; bound the length in the pattern")
		}
		e, err := regexExpr(s.Pattern.String(), true)
		if err != nil {
			var ue *UnsupportedError
			if errors.As(err, &ue) {
				ue.Keyword, ue.Path = "pattern ("+ue.Keyword+")", pointer(s)
				return nil, ue
			}
			return nil, unsupported(s, "pattern", err.Error())
		}
		return g.Seq(quote, e, quote), nil
	case s.MinLength != nil || s.MaxLength != nil:
		lo, hi := 0, -1
		if s.MinLength != nil {
			lo = *s.MinLength
		}
		if s.MaxLength != nil {
			hi = *s.MaxLength
		}
		if lo > maxLengthRep || hi > maxLengthRep {
			return nil, unsupported(s, "maxLength", fmt.Sprintf("lengths above %d are not supported", maxLengthRep))
		}
		if hi >= 0 && hi < lo {
			return nil, unsupported(s, "maxLength", fmt.Sprintf("maxLength %d is below minLength %d", hi, lo))
		}
		return g.Seq(quote, g.Repeat(g.Named(ruleCharBMP), lo, hi), quote), nil
	}
	return g.Named(ruleString), nil
}

func (c *schemaCompiler) number(s *jsonschema.Schema, integer bool) (g.Expr, error) {
	if m := s.MultipleOf; m != nil {
		if m.Cmp(big.NewRat(1, 1)) != 0 {
			return nil, unsupported(s, "multipleOf", "only multipleOf 1 (an integer) is supported")
		}
		integer = true
	}
	var lo, hi bound
	tighter := func(cur bound, v *big.Rat, strict bool, upper bool) bound {
		if v == nil {
			return cur
		}
		if cur.v == nil {
			return bound{v: v, strict: strict}
		}
		c := v.Cmp(cur.v)
		if upper {
			c = -c
		}
		if c > 0 || c == 0 && strict {
			return bound{v: v, strict: strict}
		}
		return cur
	}
	lo = tighter(lo, s.Minimum, false, false)
	lo = tighter(lo, s.ExclusiveMinimum, true, false)
	hi = tighter(hi, s.Maximum, false, true)
	hi = tighter(hi, s.ExclusiveMaximum, true, true)
	if lo.v == nil && hi.v == nil {
		if integer {
			return g.Named(ruleInteger), nil
		}
		return g.Named(ruleNumber), nil
	}
	e, err := numberExpr(lo, hi, integer)
	if err != nil {
		return nil, unsupported(s, "minimum", err.Error())
	}
	return e, nil
}
