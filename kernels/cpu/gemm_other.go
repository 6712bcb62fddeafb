//go:build !amd64

package cpu

func gemmTileSIMD([]float32, int, int, []float32, *[gemmMR]int, []float32, int, bool) bool {
	return false
}

func packSIMD([]float32, Matrix, int, int, int, int) int { return 0 }

const avx512Available = false

var useAVX512 = false

func gemmTile12SIMD([]float32, int, int, []float32, int, int, []float32, int, bool) bool {
	return false
}

func gemmTile16SIMD([]float32, int, int, []float32, int, int, []float32, int, bool) bool {
	return false
}
