//go:build amd64

package cpu

// vecDotRowsSIMD runs the assembly kernel for t over n weight rows and
// reports whether it did (false without SIMD or without a kernel for t).
func vecDotRowsSIMD(t DType, w []byte, rb, n int, xq []byte, out []float32) bool {
	return false
}
