// Package constrainttest validates generated JSON in tests, independently of the
// grammar compiler: structure and values with github.com/google/
// jsonschema-go, and string formats — which that validator treats as
// annotations — with santhosh-tekuri/jsonschema's format assertions
// (RFC 3339 dates and times, RFC 5321 emails, ...). The compiler only
// uses the latter library to parse schemas, never its validator.
package constrainttest

import (
	"bytes"
	"encoding/json"
	"fmt"

	gjs "github.com/google/jsonschema-go/jsonschema"
	sjs "github.com/santhosh-tekuri/jsonschema/v6"
)

// Schema checks texts against one schema.
type Schema struct {
	structure *gjs.Resolved
	formats   *sjs.Schema
}

// NewSchema prepares doc.
func NewSchema(doc []byte) (*Schema, error) {
	var gs gjs.Schema
	if err := json.Unmarshal(doc, &gs); err != nil {
		return nil, fmt.Errorf("check: google schema: %w", err)
	}
	rs, err := gs.Resolve(nil)
	if err != nil {
		return nil, fmt.Errorf("check: resolve: %w", err)
	}
	v, err := sjs.UnmarshalJSON(bytes.NewReader(doc))
	if err != nil {
		return nil, err
	}
	c := sjs.NewCompiler()
	c.AssertFormat()
	if err := c.AddResource("mem://check/schema.json", v); err != nil {
		return nil, err
	}
	fs, err := c.Compile("mem://check/schema.json")
	if err != nil {
		return nil, err
	}
	return &Schema{structure: rs, formats: fs}, nil
}

// Check parses text as one JSON value and validates it.
func (s *Schema) Check(text string) error {
	dec := json.NewDecoder(bytes.NewReader([]byte(text)))
	var v any
	if err := dec.Decode(&v); err != nil {
		return fmt.Errorf("not JSON: %w", err)
	}
	if dec.More() {
		return fmt.Errorf("not JSON: text after the value")
	}
	if err := s.structure.Validate(v); err != nil {
		return fmt.Errorf("google/jsonschema-go: %w", err)
	}
	sv, err := sjs.UnmarshalJSON(bytes.NewReader([]byte(text)))
	if err != nil {
		return err
	}
	if err := s.formats.Validate(sv); err != nil {
		return fmt.Errorf("format assertion: %w", err)
	}
	return nil
}
