//go:build !amd64

package cpu

func vecDot8RowsSIMD(DType, []byte, int, int, []byte, int, int, []float32, int) bool { return false }
