package compile

import "fmt"

// UnsupportedError is a schema keyword, regex construct or grammar feature
// kvhost cannot turn into a constraint. The server answers it with a 400
// whose param is the request field and whose message names Keyword.
type UnsupportedError struct {
	// Keyword is the JSON Schema keyword ("not", "uniqueItems"), the
	// format name, or the regex / grammar construct.
	Keyword string
	// Path is where it occurs: a JSON pointer into the schema, a byte
	// offset into a pattern or grammar.
	Path   string
	Reason string
}

func (e *UnsupportedError) Error() string {
	where := ""
	if e.Path != "" {
		where = " at " + e.Path
	}
	if e.Reason != "" {
		return fmt.Sprintf("compile: unsupported %s%s: %s", e.Keyword, where, e.Reason)
	}
	return fmt.Sprintf("compile: unsupported %s%s", e.Keyword, where)
}

// SyntaxError is a schema, pattern or grammar that does not parse.
type SyntaxError struct {
	What string // "JSON Schema", "regex", "GBNF grammar"
	Pos  string // where, when known
	Err  error
}

func (e *SyntaxError) Error() string {
	if e.Pos != "" {
		return fmt.Sprintf("compile: invalid %s at %s: %v", e.What, e.Pos, e.Err)
	}
	return fmt.Sprintf("compile: invalid %s: %v", e.What, e.Err)
}

func (e *SyntaxError) Unwrap() error { return e.Err }
