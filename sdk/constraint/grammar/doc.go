// Package grammar is kvhost's constraint engine: a context-free grammar
// over bytes (the compiled form every structured-output constraint is
// lowered to), a matcher that follows one sequence through it, and the
// computation of the set of tokens a sequence may generate next.
//
// It uses the standard library only, so the same code runs natively in
// the host (tests, benchmarks) and inside the built-in constraint plugin
// compiled for GOOS=wasip1 (plugins/constraint-grammar; ABI in
// ../../CONSTRAINT_ABI.md).
//
// # Model
//
// A Grammar's rules are alternatives of byte ranges and rule references;
// Builder lowers friendlier expressions (literals, Unicode character
// classes as UTF-8 byte sequences, repetition) into them. Compile
// flattens a Grammar for a Vocab. A parse position is a set of parse
// stacks — a configuration — hash-consed, so each distinct configuration
// exists once per Program and is a state of a DFA built lazily over the
// configurations: its transitions (one per byte) and its token mask are
// computed on first use and kept for every later sequence. Calls in tail
// position push no return frame, so repetition (right recursion) runs in
// constant stack and a JSON string body is one configuration however
// long it grows.
//
// A mask is computed by walking the vocabulary's token trie in preorder
// from the configuration: each shared prefix is matched once, and a
// whole subtree is skipped as soon as its prefix is refused; tokens that
// span several characters or split a UTF-8 character are matched byte by
// byte like any other.
//
// # Invariants
//
//   - Validate refuses a grammar with a left-recursive rule or a reachable
//     rule that derives no finite string, so expansion always terminates
//     and every live configuration can still be completed.
//   - A token is in a configuration's mask exactly when Advance accepts
//     it from there (tests check against that brute force).
//   - End-of-generation tokens are allowed exactly when the text so far
//     is a sentence of the grammar; special tokens never are.
//   - With a token budget (Mask's remaining), a token is allowed only if
//     the shortest completion after it, in bytes, fits in the tokens left,
//     so the output is complete within max_tokens whenever single-byte
//     tokens can spell that completion.
//   - Memory is bounded: Options.MaxConfigs caps configurations
//     (ErrTooComplex), Trim bounds the mask cache.
package grammar
