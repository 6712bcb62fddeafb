// Package sampling turns a row of logits into the next token.
//
// The host-native path runs the pre-ops where the logits live — temperature,
// top-k, top-p, min-p — and draws from a per-sequence stream keyed by
// (seed, step), so a request with a seed gets the same tokens whatever else
// shares its batch. Greedy sampling is an argmax and never copies or sorts
// the vocabulary.
package sampling
