//go:build unix

package model

import "syscall"

// processCPU is the CPU time this process has used (user + system), in
// seconds: the expert benchmarks report tokens per CPU-second beside tokens
// per second, because on a machine shared with other builds the wall clock
// measures the neighbours as much as the model (kernels/cpu's benchmarks do
// the same).
func processCPU() float64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}
