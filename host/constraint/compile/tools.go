package compile

import (
	"encoding/json"
	"errors"
	"fmt"

	g "github.com/kvhost/kvhost/sdk/constraint/grammar"
)

// Tool is one callable function: its name and the JSON Schema of its
// arguments (nil: any object).
type Tool struct {
	Name       string
	Parameters json.RawMessage
}

// ToolCalls describes how a model writes function calls, so that
// tool_choice "required" or a named function can be enforced: each call
// is Open + {"name": "<name>", "<ArgsKey>": <arguments>} + Close, calls
// are separated by Sep, and the whole list sits between ListOpen and
// ListClose. Between Min and Max calls (Max < 0: no limit).
type ToolCalls struct {
	Tools               []Tool
	ArgsKey             string
	Open, Close, Sep    string
	ListOpen, ListClose string
	Min, Max            int
}

// ToolCallGrammar compiles the tool calls tc allows. Each tool's
// parameters are compiled like a JSON Schema request (the same keywords,
// the same errors, with Path naming the tool).
func ToolCallGrammar(tc ToolCalls) (*g.Grammar, error) {
	if len(tc.Tools) == 0 {
		return nil, fmt.Errorf("compile: no tools to call")
	}
	if tc.Min < 1 || tc.Max >= 0 && tc.Max < tc.Min {
		return nil, fmt.Errorf("compile: tool call count %d..%d", tc.Min, tc.Max)
	}
	b := g.NewBuilder()
	defineJSON(b)
	alts := make([]g.Expr, 0, len(tc.Tools))
	for i, t := range tc.Tools {
		params := t.Parameters
		if len(params) == 0 || string(params) == "null" {
			params = json.RawMessage(`{"type":"object"}`)
		}
		rule, err := schemaInto(b, params, fmt.Sprintf("tool%d-", i))
		if err != nil {
			var ue *UnsupportedError
			if errors.As(err, &ue) {
				ue.Path = fmt.Sprintf("tools[%d] (%s) parameters %s", i, t.Name, ue.Path)
				return nil, ue
			}
			return nil, fmt.Errorf("tools[%d] (%s) parameters: %w", i, t.Name, err)
		}
		name, err := jsonLiteral(t.Name)
		if err != nil {
			return nil, err
		}
		key, err := jsonLiteral(tc.ArgsKey)
		if err != nil {
			return nil, err
		}
		alts = append(alts, g.Seq(g.Lit(`{"name": `+name+`, `+key+`: `), g.Named(rule), g.Lit("}")))
	}
	call := g.Seq(g.Lit(tc.Open), g.Alt(alts...), g.Lit(tc.Close))
	more := g.Seq(g.Lit(tc.Sep), call)
	extra := g.Star(more)
	if tc.Max >= 0 {
		extra = g.Repeat(more, 0, tc.Max-tc.Min)
	}
	b.Define("root", g.Seq(g.Lit(tc.ListOpen), call, g.Repeat(more, tc.Min-1, tc.Min-1), extra, g.Lit(tc.ListClose)))
	return b.Build("root")
}
