//go:build race

package engine

// raceEnabled: the race detector makes the engine ~10x slower; heavy
// sampling tests draw fewer samples under it.
const raceEnabled = true
