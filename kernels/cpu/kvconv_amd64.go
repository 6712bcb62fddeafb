//go:build amd64

package cpu

import "math"

//go:noescape
func f16ToF32AVX(dst *float32, src *byte, n int)

//go:noescape
func bf16ToF32AVX(dst *float32, src *byte, n int)

//go:noescape
func e5m2ToF32AVX(dst *float32, src *byte, n int)

//go:noescape
func e4m3ToF32AVX(dst *float32, src *byte, n int, mul *float32, mstep int)

//go:noescape
func nvfp4ToF32AVX(dst *float32, src *byte, nblk int, half *float32)

//go:noescape
func f32ToBF16AVX(dst *byte, src *float32, n int)

// The Vec wrappers convert the leading part of a row the assembly handles
// (a multiple of 8 elements, whole scale blocks) and return how many
// elements they did; 0 without SIMD. The callers finish the tail.

func f16ToF32Vec(dst []float32, src []byte) int {
	n8 := len(dst) &^ 7
	if !useSIMD || n8 == 0 {
		return 0
	}
	_ = src[2*n8-1]
	f16ToF32AVX(&dst[0], &src[0], n8)
	return n8
}

func bf16ToF32Vec(dst []float32, src []byte) int {
	n8 := len(dst) &^ 7
	if !useSIMD || n8 == 0 {
		return 0
	}
	_ = src[2*n8-1]
	bf16ToF32AVX(&dst[0], &src[0], n8)
	return n8
}

func e5m2ToF32Vec(dst []float32, src []byte) int {
	n8 := len(dst) &^ 7
	if !useSIMD || n8 == 0 {
		return 0
	}
	_ = src[n8-1]
	e5m2ToF32AVX(&dst[0], &src[0], n8)
	return n8
}

// e4m3Mul is the multiplier of unscaled E4M3 (the 2^8 the binary16 trick
// divides out).
var e4m3Mul = float32(256)

// mxChunk is the number of MX or NVFP4 blocks whose multipliers one
// assembly call takes (kept on the stack).
const mxChunk = 64

// e4m3ToF32Vec decodes unscaled E4M3 (scales nil) or MXFP8 (one E8M0 scale
// per 32 elements). A row holding an E8M0 scale above 246 (2^119, which no
// encoder here writes: its products may overflow float32) is left to the
// portable path.
func e4m3ToF32Vec(dst []float32, src, scales []byte) int {
	if scales == nil {
		n8 := len(dst) &^ 7
		if !useSIMD || n8 == 0 {
			return 0
		}
		_ = src[n8-1]
		e4m3ToF32AVX(&dst[0], &src[0], n8, &e4m3Mul, 0)
		return n8
	}
	nb := len(dst) / 32
	if !useSIMD || nb == 0 {
		return 0
	}
	for _, x := range scales[:nb] {
		if x > 246 && x != 0xff {
			return 0
		}
	}
	_ = src[nb*32-1]
	var mul [mxChunk]float32
	for b0 := 0; b0 < nb; b0 += mxChunk {
		c := min(mxChunk, nb-b0)
		for j, x := range scales[b0 : b0+c] {
			if x == 0xff {
				mul[j] = float32(math.NaN())
			} else {
				mul[j] = math.Float32frombits(uint32(x+8) << 23) // 2^(X+8)
			}
		}
		e4m3ToF32AVX(&dst[b0*32], &src[b0*32], c*32, &mul[0], 4)
	}
	return nb * 32
}

func nvfp4ToF32Vec(dst []float32, src, scales []byte) int {
	nb := len(dst) / 16
	if !useSIMD || nb == 0 {
		return 0
	}
	_ = src[nb*8-1]
	var half [mxChunk]float32
	for b0 := 0; b0 < nb; b0 += mxChunk {
		c := min(mxChunk, nb-b0)
		for j, x := range scales[b0 : b0+c] {
			half[j] = e4m3LUT[x] / 2 // exact: E4M3 values are at least 2^-9
		}
		nvfp4ToF32AVX(&dst[b0*16], &src[b0*8], c, &half[0])
	}
	return nb * 16
}

func f32ToBF16Vec(dst []byte, src []float32) int {
	n8 := len(src) &^ 7
	if !useSIMD || n8 == 0 {
		return 0
	}
	_ = dst[2*n8-1]
	f32ToBF16AVX(&dst[0], &src[0], n8)
	return n8
}
