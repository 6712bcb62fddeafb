//go:build !amd64

package cpu

func gegluVec(out, gate, up []float32) int                           { return 0 }
func swigluOAIVec(out, gate, up []float32, alpha, limit float32) int { return 0 }
func softcapVec(x []float32, k, cap float32) int                     { return 0 }
