package compile

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"

	g "github.com/kvhost/kvhost/sdk/constraint/grammar"
)

// object is the grammar of s's objects: the declared properties in schema
// order (required ones always, optional ones maybe), commas placed by a
// chain of rules linear in the property count.
func (c *schemaCompiler) object(s *jsonschema.Schema) (g.Expr, error) {
	open, close := g.Seq(g.Lit("{"), ws()), g.Seq(ws(), g.Lit("}"))
	names := c.propertyOrder(s)
	if len(names) == 0 {
		switch ap := s.AdditionalProperties.(type) {
		case bool:
			if !ap {
				return g.Seq(open, close), nil
			}
		case *jsonschema.Schema:
			// A map: any keys, values of the additionalProperties schema.
			name, err := c.ruleFor(ap)
			if err != nil {
				return nil, err
			}
			member := g.Seq(g.Named(ruleString), ws(), g.Lit(":"), ws(), g.Named(name))
			return g.Seq(open, g.Opt(g.Seq(member, g.Star(g.Seq(ws(), g.Lit(","), ws(), member)))), close), nil
		}
		return g.Named(ruleObject), nil
	}
	required := map[string]bool{}
	for _, r := range s.Required {
		required[r] = true
	}
	members := make([]g.Expr, len(names))
	for i, n := range names {
		key, err := jsonLiteral(n)
		if err != nil {
			return nil, unsupported(s, "properties", err.Error())
		}
		val := g.Named(ruleValue)
		if ps, ok := s.Properties[n]; ok {
			if ps.Bool != nil && !*ps.Bool {
				if required[n] {
					return nil, unsupported(s, "required", fmt.Sprintf("property %q is required but its schema is false", n))
				}
				members[i] = nil // never generated
				continue
			}
			name, err := c.ruleFor(ps)
			if err != nil {
				return nil, err
			}
			val = g.Named(name)
		}
		members[i] = g.Seq(g.Lit(key), ws(), g.Lit(":"), ws(), val)
	}
	// tail(i): at least one member emitted, members i.. to go;
	// head(i): none emitted yet.
	base := c.names[s]
	tail := make([]g.Expr, len(names)+1)
	head := make([]g.Expr, len(names)+1)
	tail[len(names)], head[len(names)] = g.Empty(), g.Empty()
	sep := g.Seq(ws(), g.Lit(","), ws())
	for i := len(names) - 1; i >= 0; i-- {
		m := members[i]
		if m == nil {
			tail[i], head[i] = tail[i+1], head[i+1]
			continue
		}
		t := g.Seq(sep, m, tail[i+1])
		h := g.Seq(m, tail[i+1])
		if !required[names[i]] {
			t = g.Alt(t, tail[i+1])
			h = g.Alt(h, head[i+1])
		}
		// Name the links so the grammar stays linear in the properties.
		tn, hn := fmt.Sprintf("%s-t%d", base, i), fmt.Sprintf("%s-h%d", base, i)
		c.b.Define(tn, t)
		c.b.Define(hn, h)
		tail[i], head[i] = g.Named(tn), g.Named(hn)
	}
	return g.Seq(open, head[0], close), nil
}

// propertyOrder is the declared properties in the order the schema text
// lists them, then required names no property declares.
func (c *schemaCompiler) propertyOrder(s *jsonschema.Schema) []string {
	var names []string
	seen := map[string]bool{}
	for _, n := range c.raw.keys[rawPointer(s)+"/properties"] {
		if _, ok := s.Properties[n]; ok && !seen[n] {
			names = append(names, n)
			seen[n] = true
		}
	}
	// Properties the text did not show (a library default): sorted.
	var rest []string
	for n := range s.Properties {
		if !seen[n] {
			rest = append(rest, n)
		}
	}
	slices.Sort(rest)
	for _, n := range append(rest, s.Required...) {
		if !seen[n] {
			names = append(names, n)
			seen[n] = true
		}
	}
	return names
}

// array is the grammar of s's arrays: prefixItems (or draft-7 tuple
// items), then items, between minItems and maxItems elements.
func (c *schemaCompiler) array(s *jsonschema.Schema) (g.Expr, error) {
	var prefix []*jsonschema.Schema
	var rest *jsonschema.Schema
	restAllowed := true
	switch it := s.Items.(type) {
	case []*jsonschema.Schema:
		prefix = it
	case *jsonschema.Schema:
		rest = it
	}
	if len(s.PrefixItems) > 0 {
		prefix = s.PrefixItems
	}
	if s.Items2020 != nil {
		rest = s.Items2020
	}
	if rest != nil && rest.Bool != nil && !*rest.Bool {
		restAllowed, rest = false, nil
	}
	lo, hi := 0, -1
	if s.MinItems != nil {
		lo = *s.MinItems
	}
	if s.MaxItems != nil {
		hi = *s.MaxItems
	}
	if !restAllowed && (hi < 0 || hi > len(prefix)) {
		hi = len(prefix)
	}
	if hi >= 0 && lo > hi {
		return nil, unsupported(s, "minItems", fmt.Sprintf("minItems %d exceeds the %d items allowed", lo, hi))
	}
	if lo > maxItemsChain || len(prefix) > maxItemsChain || hi > maxItemsChain {
		return nil, unsupported(s, "maxItems", fmt.Sprintf("item counts above %d are not supported", maxItemsChain))
	}
	item := func(i int) (g.Expr, error) {
		sch := rest
		if i < len(prefix) {
			sch = prefix[i]
		}
		if sch == nil {
			return g.Named(ruleValue), nil
		}
		name, err := c.ruleFor(sch)
		return g.Named(name), err
	}
	sep := g.Seq(ws(), g.Lit(","), ws())
	// After K elements every further one is an items element: a single
	// repetition. Before, a chain of per-index links.
	k := max(len(prefix), lo)
	if hi >= 0 {
		k = min(k, hi)
	}
	uniform := func(from int) (g.Expr, error) {
		if !restAllowed || from < len(prefix) || hi >= 0 && from >= hi {
			return g.Empty(), nil
		}
		it, err := item(from)
		if err != nil {
			return nil, err
		}
		if hi < 0 {
			return g.Star(g.Seq(sep, it)), nil
		}
		return g.Repeat(g.Seq(sep, it), 0, hi-from), nil
	}
	open, close := g.Seq(g.Lit("["), ws()), g.Seq(ws(), g.Lit("]"))
	if hi == 0 {
		return g.Seq(open, close), nil
	}
	next, err := uniform(max(k, 1))
	if err != nil {
		return nil, err
	}
	for i := k - 1; i >= 1; i-- {
		it, err := item(i)
		if err != nil {
			return nil, err
		}
		link := g.Seq(sep, it, next)
		if i >= lo {
			link = g.Opt(link)
		}
		name := fmt.Sprintf("%s-i%d", c.names[s], i)
		c.b.Define(name, link)
		next = g.Named(name)
	}
	first, err := item(0)
	if err != nil {
		return nil, err
	}
	body := g.Seq(first, next)
	if lo == 0 {
		body = g.Opt(body)
	}
	return g.Seq(open, body, close), nil
}

// rawIndex is what the schema library forgets or drops: the key order of
// every object in the document (by JSON pointer) and every "format"
// string (the library keeps only the formats it knows).
type rawIndex struct {
	keys    map[string][]string
	formats map[string]string
}

func scanRaw(doc []byte) (*rawIndex, error) {
	ix := &rawIndex{keys: map[string][]string{}, formats: map[string]string{}}
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber()
	var walk func(ptr string) error
	walk = func(ptr string) error {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		d, ok := tok.(json.Delim)
		if !ok {
			if s, isStr := tok.(string); isStr && strings.HasSuffix(ptr, "/format") {
				ix.formats[strings.TrimSuffix(ptr, "/format")] = s
			}
			return nil
		}
		switch d {
		case '{':
			keys := []string{}
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return err
				}
				k, _ := kt.(string)
				keys = append(keys, k)
				if err := walk(ptr + "/" + escapePointer(k)); err != nil {
					return err
				}
			}
			ix.keys[ptr] = keys
		case '[':
			for i := 0; dec.More(); i++ {
				if err := walk(fmt.Sprintf("%s/%d", ptr, i)); err != nil {
					return err
				}
			}
		}
		_, err = dec.Token() // the closing delimiter
		return err
	}
	return ix, walk("")
}

func escapePointer(tok string) string {
	return strings.ReplaceAll(strings.ReplaceAll(tok, "~", "~0"), "/", "~1")
}
