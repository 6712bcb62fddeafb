package budget

import (
	"math"
	"strconv"
)

// GiB and MiB are the spec's units (§ header): SGLang logs say "GB" but mean GiB.
const (
	MiB = 1 << 20
	GiB = 1 << 30
)

// pyRound is Python's round(x, ndigits): the decimal with ndigits places
// nearest to the exact binary value of x, ties to even, converted back to the
// nearest float64. strconv formats from the exact binary value, so it is the
// same correctly rounded conversion CPython's dtoa performs.
func pyRound(x float64, ndigits int) float64 {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return x
	}
	v, err := strconv.ParseFloat(strconv.FormatFloat(x, 'f', ndigits, 64), 64)
	if err != nil { // cannot happen for a finite formatted float
		return x
	}
	return v
}

// pyFloorDiv is CPython's float floor division a // b (Objects/floatobject.c
// _float_div_mod), which is not always math.Floor(a/b): it divides the exact
// difference a - fmod(a, b) and snaps to the nearest integer.
func pyFloorDiv(a, b float64) float64 {
	mod := math.Mod(a, b)
	div := (a - mod) / b
	if mod != 0 {
		if (b < 0) != (mod < 0) {
			div -= 1.0
		}
	}
	if div == 0 {
		return math.Copysign(0, a/b)
	}
	fl := math.Floor(div)
	if div-fl > 0.5 {
		fl += 1.0
	}
	return fl
}

// worldMinGiB converts a free-byte reading to GiB as
// get_available_gpu_memory returns it (§1): free/2^30 as float64, and with a
// world larger than one rank, through the float32 all-reduce. Dividing by
// 2^30 is exact, so the float32 step rounds the byte count to 24 bits.
func worldMinGiB(bytes int64, world int) float64 {
	g := float64(bytes) / GiB
	if world > 1 {
		g = float64(float32(g))
	}
	return g
}

// floorMultiple rounds n down to a multiple of m (m <= 1 returns n).
func floorMultiple(n, m int) int {
	if m <= 1 {
		return n
	}
	return n / m * m
}

// alignUp rounds n up to a multiple of m (m <= 1 returns n).
func alignUp(n, m int64) int64 {
	if m <= 1 {
		return n
	}
	return (n + m - 1) / m * m
}

// finite reports whether x is neither NaN nor infinite.
func finite(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }
