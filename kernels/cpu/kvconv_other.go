//go:build !amd64

package cpu

func f16ToF32Vec([]float32, []byte) int           { return 0 }
func bf16ToF32Vec([]float32, []byte) int          { return 0 }
func e5m2ToF32Vec([]float32, []byte) int          { return 0 }
func e4m3ToF32Vec([]float32, []byte, []byte) int  { return 0 }
func nvfp4ToF32Vec([]float32, []byte, []byte) int { return 0 }
func f32ToBF16Vec([]byte, []float32) int          { return 0 }
