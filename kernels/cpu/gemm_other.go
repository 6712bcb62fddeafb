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

func gemmTOn() bool { return false }

func gemmTKernel([]float32, int, []float32, int, *[gemmTMR * gemmNR]float32, bool) {
	panic("cpu: the small-batch GEMM kernel needs AVX-512")
}

func gemmTKernelStage([]float32, int, []float32, int, *[gemmTMR * gemmNR]float32, bool, []float32, Matrix, int, int, int, int, int, []byte, int) {
	panic("cpu: the small-batch GEMM kernel needs AVX-512")
}

func stageSIMD([]float32, Matrix, int, int, int, int) int { return 0 }

func gemmTStore(*[gemmTMR * gemmNR]float32, []float32, int, int, int, int) {
	panic("cpu: the small-batch GEMM kernel needs AVX-512")
}
