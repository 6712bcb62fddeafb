//go:build wasip1

// Command constraint-grammar is kvhost's built-in output-constraint
// plugin: it runs the compiled grammars (KVG1) the host makes from JSON
// Schemas, regular expressions, GBNF grammars and choices, with the
// engine of package sdk/constraint/grammar (constraint ABI,
// sdk/CONSTRAINT_ABI.md).
package main

import (
	"github.com/kvhost/kvhost/sdk/constraint/grammar"
	"github.com/kvhost/kvhost/sdk/constraint/guest"
)

// Version is the plugin's version; bump it when behaviour changes.
const Version = "1.0.0"

func init() { guest.Register(guest.NewGrammar("grammar", Version, grammar.Options{})) }

func main() {}
