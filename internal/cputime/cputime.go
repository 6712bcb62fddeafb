// Package cputime reads the CPU time this process has used: the start-up
// timeline's CPU column, and benchmarks that report work per CPU-second
// beside work per second (on a machine shared with other builds the wall
// clock measures the neighbours as much as the code under test).
package cputime

import "time"

// Process is the CPU time this process has used (user + system); 0 where
// the platform does not report it.
func Process() time.Duration { return process() }
