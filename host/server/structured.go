package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/kvhost/kvhost/host/constraint"
	"github.com/kvhost/kvhost/host/constraint/compile"
	"github.com/kvhost/kvhost/sdk/constraint/grammar"
)

// structuredFields are the structured-output fields a generating body may
// carry: OpenAI's response_format, vLLM's guided_* and structured_outputs,
// and SGLang's json_schema, regex and ebnf. At most one may be set.
type structuredFields struct {
	ResponseFormat    *responseFormat    `json:"response_format"`
	GuidedJSON        json.RawMessage    `json:"guided_json"`
	GuidedRegex       *string            `json:"guided_regex"`
	GuidedGrammar     *string            `json:"guided_grammar"`
	GuidedChoice      []string           `json:"guided_choice"`
	StructuredOutputs *structuredOutputs `json:"structured_outputs"`
	JSONSchema        json.RawMessage    `json:"json_schema"`
	Regex             *string            `json:"regex"`
	EBNF              *string            `json:"ebnf"`
}

// responseFormat is OpenAI's response_format.
type responseFormat struct {
	Type       string `json:"type"`
	JSONSchema *struct {
		Name        string          `json:"name"`
		Description string          `json:"description"`
		Schema      json.RawMessage `json:"schema"`
		Strict      *bool           `json:"strict"`
	} `json:"json_schema"`
}

// structuredOutputs is vLLM's structured_outputs object (its successor to
// the guided_* fields); unknown keys are refused.
type structuredOutputs struct {
	JSON       json.RawMessage `json:"json"`
	Regex      *string         `json:"regex"`
	Choice     []string        `json:"choice"`
	Grammar    *string         `json:"grammar"`
	JSONObject *bool           `json:"json_object"`
}

func (s *structuredOutputs) UnmarshalJSON(b []byte) error {
	type plain structuredOutputs
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var p plain
	if err := dec.Decode(&p); err != nil {
		return badRequest("structured_outputs", "%v (supported: json, regex, choice, grammar, json_object)", err)
	}
	*s = structuredOutputs(p)
	return nil
}

// present reports whether a JSON field was sent with a non-null value.
func present(raw json.RawMessage) bool {
	t := bytes.TrimSpace(raw)
	return len(t) > 0 && string(t) != "null"
}

// schemaText accepts a schema given as an object or as a JSON string
// holding one (vLLM's guided_json, SGLang's json_schema take both).
func schemaText(raw json.RawMessage, param string) ([]byte, error) {
	t := bytes.TrimSpace(raw)
	if len(t) > 0 && t[0] == '"' {
		var s string
		if err := json.Unmarshal(t, &s); err != nil {
			return nil, badRequest(param, "%v", err)
		}
		t = bytes.TrimSpace([]byte(s))
	}
	if len(t) == 0 || t[0] != '{' && string(t) != "true" {
		return nil, badRequest(param, "expected a JSON Schema object (or a string holding one)")
	}
	return t, nil
}

// structuredSpec is the one request's structured-output constraint.
type structuredSpec struct {
	param   string // the field that asked, for errors
	typ     string
	source  json.RawMessage
	grammar *grammar.Grammar
}

// collect compiles whichever field is set (nil when none); a second one is
// a 400 naming both.
func (f *structuredFields) collect() (*structuredSpec, error) {
	var found []*structuredSpec
	var errs []error
	add := func(param, typ string, source any, build func() (*grammar.Grammar, error)) {
		g, err := build()
		if err != nil {
			errs = append(errs, compileError(param, err))
			return
		}
		src, _ := json.Marshal(source)
		found = append(found, &structuredSpec{param: param, typ: typ, source: src, grammar: g})
	}
	schema := func(param string, raw json.RawMessage) {
		doc, err := schemaText(raw, param)
		if err != nil {
			errs = append(errs, err)
			return
		}
		add(param, "json_schema", json.RawMessage(doc), func() (*grammar.Grammar, error) { return compile.JSONSchema(doc) })
	}
	if rf := f.ResponseFormat; rf != nil {
		switch rf.Type {
		case "text":
		case "json_object":
			add("response_format", "json_object", nil, func() (*grammar.Grammar, error) { return compile.JSONObject(), nil })
		case "json_schema":
			if rf.JSONSchema == nil || !present(rf.JSONSchema.Schema) {
				errs = append(errs, badRequest("response_format.json_schema.schema", "response_format of type json_schema needs json_schema.schema"))
				break
			}
			schema("response_format.json_schema.schema", rf.JSONSchema.Schema)
		default:
			errs = append(errs, badRequest("response_format.type", "%q is not one of text, json_object, json_schema", rf.Type))
		}
	}
	if present(f.GuidedJSON) {
		schema("guided_json", f.GuidedJSON)
	}
	if present(f.JSONSchema) {
		schema("json_schema", f.JSONSchema)
	}
	regex := func(param string, p *string) {
		if p != nil {
			add(param, "regex", *p, func() (*grammar.Grammar, error) { return compile.Regex(*p) })
		}
	}
	regex("guided_regex", f.GuidedRegex)
	regex("regex", f.Regex)
	gbnf := func(param string, p *string) {
		if p != nil {
			add(param, "grammar", *p, func() (*grammar.Grammar, error) { return compile.GBNF(*p) })
		}
	}
	gbnf("guided_grammar", f.GuidedGrammar)
	gbnf("ebnf", f.EBNF)
	if f.GuidedChoice != nil {
		add("guided_choice", "choice", f.GuidedChoice, func() (*grammar.Grammar, error) { return compile.Choice(f.GuidedChoice) })
	}
	if so := f.StructuredOutputs; so != nil {
		if present(so.JSON) {
			schema("structured_outputs.json", so.JSON)
		}
		regex("structured_outputs.regex", so.Regex)
		gbnf("structured_outputs.grammar", so.Grammar)
		if so.Choice != nil {
			add("structured_outputs.choice", "choice", so.Choice, func() (*grammar.Grammar, error) { return compile.Choice(so.Choice) })
		}
		if so.JSONObject != nil && *so.JSONObject {
			add("structured_outputs.json_object", "json_object", nil, func() (*grammar.Grammar, error) { return compile.JSONObject(), nil })
		}
	}
	if len(errs) > 0 {
		return nil, errs[0]
	}
	switch len(found) {
	case 0:
		return nil, nil
	case 1:
		return found[0], nil
	}
	return nil, badRequest(found[1].param, "%s and %s both constrain the output; give at most one", found[0].param, found[1].param)
}

// spec turns a structured-output request into the engine's constraint.
func (s *structuredSpec) spec() (*constraint.Spec, error) {
	return constraint.NewSpec(s.typ, s.source, s.grammar)
}

// compileError explains a compile failure as a 400 on param, naming the
// unsupported keyword when that is what failed.
func compileError(param string, err error) error {
	var ue *compile.UnsupportedError
	var se *compile.SyntaxError
	switch {
	case errors.As(err, &ue):
		where := ""
		if ue.Path != "" {
			where = " at " + ue.Path
		}
		msg := fmt.Sprintf("unsupported %s%s", ue.Keyword, where)
		if ue.Reason != "" {
			msg += ": " + ue.Reason
		}
		return badRequest(param, "%s", msg)
	case errors.As(err, &se):
		return badRequest(param, "%s", strings.TrimPrefix(se.Error(), "compile: "))
	}
	return badRequest(param, "%v", err)
}
