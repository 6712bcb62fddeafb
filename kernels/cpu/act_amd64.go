//go:build amd64

package cpu

// AVX2/FMA activations (silu_amd64.s): n is a multiple of 8; a lane whose
// exp would overflow gives 0, as expf's +Inf does on the Go path.

//go:noescape
func gegluTanhAVX(out, gate, up *float32, n int)

//go:noescape
func swigluOAIAVX(out, gate, up *float32, alpha, limit float32, n int)

//go:noescape
func softcapAVX(x *float32, k, cap float32, n int)

// gegluVec runs gegluTanhAVX over the leading multiple of 8 of out and
// returns how many values it did (0 without SIMD).
func gegluVec(out, gate, up []float32) int {
	n8 := len(out) &^ 7
	if !useSIMD || n8 == 0 {
		return 0
	}
	_, _ = gate[n8-1], up[n8-1]
	gegluTanhAVX(&out[0], &gate[0], &up[0], n8)
	return n8
}

func swigluOAIVec(out, gate, up []float32, alpha, limit float32) int {
	n8 := len(out) &^ 7
	if !useSIMD || n8 == 0 {
		return 0
	}
	_, _ = gate[n8-1], up[n8-1]
	swigluOAIAVX(&out[0], &gate[0], &up[0], alpha, limit, n8)
	return n8
}

func softcapVec(x []float32, k, cap float32) int {
	n8 := len(x) &^ 7
	if !useSIMD || n8 == 0 {
		return 0
	}
	softcapAVX(&x[0], k, cap, n8)
	return n8
}
