// Package constraint runs output constraints for the engine: structured
// output (JSON, JSON Schema, regex, grammar, choice) and enforced tool
// calls. A request's constraint is a Spec — the request's own text and the
// grammar package compile made of it (sdk/constraint/grammar's KVG1) —
// and a Runner keeps one state per sequence and, once per engine step,
// consumes each sequence's last token and returns the tokens it may
// generate next, as a bitmask over the vocabulary.
//
// Runners: the constraint-grammar plugin on the plugin runtime (the
// production path, sdk/CONSTRAINT_ABI.md), and Native, the same engine
// linked into the host for tests and benchmarks. Vocab builds the
// vocabulary both are given once: each token's exact output bytes, its
// special and end-of-generation flags, padded to the logit row width.
//
// Invariants:
//   - The engine applies a mask to the logits before any sampling step
//     reads them (sampling.ApplyMask): pre-ops, the cut to K candidates
//     and every policy see allowed tokens only; greedy is an argmax over
//     them.
//   - End-of-generation tokens are allowed only when the runner reports
//     the output complete (Row.Accept); the engine removes them otherwise,
//     whatever the mask says. A complete output (Row.Complete) ends with
//     finish reason "stop" before sampling.
//   - A mask that allows nothing, a failed step or a refused token ends
//     that sequence's request with an error naming the runner; no other
//     sequence is affected. A spec the runner refuses is ErrSpec (a 400).
//   - Each sequence consumes every generated token exactly once, at the
//     step after it was sampled; n > 1 choices fork the state before the
//     first token, so each choice's state is its own.
package constraint
