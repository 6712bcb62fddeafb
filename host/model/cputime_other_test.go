//go:build !unix

package model

// processCPU is unavailable here; benchmarks then report no CPU figure.
func processCPU() float64 { return 0 }
