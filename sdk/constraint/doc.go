// Package constraint is the shared contract of kvhost's output-constraint
// plugins (constraint ABI version 1, ../CONSTRAINT_ABI.md): the names of
// the exports, the descriptor a plugin's kvhost_describe returns, the spec
// document kvhost_constraint_open receives, and the layout of the I/O
// region the plugin allocates once in kvhost_constraint_init. The engine
// the built-in plugin runs is package grammar; the Go guest library is
// package guest.
//
// Invariants: a Descriptor that passes Validate names a constraint plugin
// of this ABI with at least one spec format; header indices and flags
// never change meaning within an ABI version.
package constraint
