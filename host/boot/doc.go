// Package boot assembles a serving stack in the order the memory ledger
// records it: device init, weights, KV pool, engine. It is the one place
// that knows how the parts fit together; host/cmd only turns flags into a
// Config.
package boot
