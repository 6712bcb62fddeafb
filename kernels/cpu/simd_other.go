//go:build !amd64

package cpu

// simdAvailable is false off amd64: every kernel uses the portable Go path.
const simdAvailable = false

var useSIMD = false

func dotF32(a, b []float32) float32                   { return dotF32Go(a, b) }
func dot4F32(w, x []float32, xs int, out *[4]float32) { *out = [4]float32{}; dot4F32Go(w, x, xs, out) }
func dotF16(w []byte, x []float32) float32            { return dotF16Go(w, x) }
func dot4F16(w []byte, x []float32, xs int, out *[4]float32) {
	*out = [4]float32{}
	dot4F16Go(w, x, xs, out)
}
func dotBF16(w []byte, x []float32) float32 { return dotBF16Go(w, x) }
func dot4BF16(w []byte, x []float32, xs int, out *[4]float32) {
	*out = [4]float32{}
	dot4BF16Go(w, x, xs, out)
}
func axpy(y []float32, a float32, x []float32) { axpyGo(y, a, x) }

func siluMulVec(out, gate, up []float32) int              { return 0 }
func expSubSumVec(x []float32, mx float32) (int, float64) { return 0, 0 }

func dot4Strided([]float32, int, []float32, *[4]float32) bool  { return false }
func axpy4Strided([]float32, *[4]float32, []float32, int) bool { return false }

func f32ToF16Vec([]byte, []float32) int { return 0 }

func rows4(DType, []byte, int, []float32, *[4]float32) bool { return false }

func mm3x4(DType, []byte, int, []float32, int, int, *[12]float32) bool { return false }

func vecDotRowsSIMD(DType, []byte, int, int, []byte, []float32) bool { return false }

func vecDot4RowsSIMD(DType, []byte, int, int, []byte, int, int, []float32, int) bool { return false }

const q512Available = false

var useQ512 = false

func quantQ8Vec([]q8Block, []float32) bool   { return false }
func quantQ8KVec([]q8KBlock, []float32) bool { return false }
