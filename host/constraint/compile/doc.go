// Package compile turns the structured-output requests kvhost accepts into
// grammars (package sdk/constraint/grammar), the compiled form a
// constraint plugin runs: JSON (any object, for response_format
// json_object), JSON Schema (response_format json_schema, guided_json,
// SGLang's json_schema, tool parameters), regular expressions
// (guided_regex, regex), GBNF grammars (guided_grammar, ebnf) and choices
// (guided_choice).
//
// It runs in the host, where libraries may be used: JSON Schema parsing,
// metaschema checks and $ref resolution are github.com/santhosh-tekuri/
// jsonschema/v6 (well kept, complete drafts 4 to 2020-12, and it exposes
// the parsed keywords a compiler needs); regular expressions are parsed by
// the standard library's regexp/syntax (RE2). GBNF has no Go library and
// is parsed here. Grammars are byte-level, so every character class is
// lowered to UTF-8 byte sequences and outputs are always valid UTF-8.
//
// Invariants:
//   - Every grammar produced validates (grammar.Validate): no left
//     recursion, every rule can finish.
//   - Everything a compiled JSON Schema generates validates against the
//     schema (tests check samples with an independent validator); the
//     converse need not hold (additional properties, property order).
//   - A schema keyword, format, regex construct or grammar feature that
//     cannot be honoured is an *UnsupportedError naming it; a document
//     that does not parse is a *SyntaxError. Nothing is silently ignored
//     except annotations (title, description, default, examples, ...).
//   - Numbers are generated so that they parse as float64: at most 16
//     integer digits, exponents of at most two digits, none when a bound
//     is set; \u escapes never encode surrogates; strings with
//     minLength/maxLength hold Basic Multilingual Plane characters only,
//     so their length is the same in code points (JSON Schema) and in
//     UTF-16 units (JavaScript validators such as zod).
//   - Nothing is loaded from outside the request: $ref to another URL is
//     an *UnsupportedError.
package compile
