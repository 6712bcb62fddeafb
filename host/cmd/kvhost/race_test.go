//go:build race

package main

// raceEnabled: under the race detector every byte the process touches has
// shadow memory beside it, so resident-memory bounds scale with it.
const raceEnabled = true
