//go:build !amd64

package cpu

func attnTile(c []float32, ldc int, x []float32, xs, m int, b []float32, ldb, kc int, acc bool) {
	attnTileGo(c, ldc, x, xs, m, b, ldb, kc, acc)
}

func transpose16(dst, src []float32, d int) { transpose16Go(dst, src, d, 0) }

func axpy4Rows(DType, []float32, *[4]float32, []byte, int) bool { return false }

// prefetchRows is a no-op without a prefetch instruction to call.
func prefetchRows([]byte, int, int, int) {}

func dots16Rows(DType, []byte, int, []float32, []float32) int { return 0 }

func axpy64Rows(DType, []float32, []float32, []byte, int) int { return 0 }
