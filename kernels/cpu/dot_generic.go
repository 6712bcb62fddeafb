package cpu

import "encoding/binary"

// Portable dot-product kernels. They are the fallback on CPUs without
// AVX2+FMA+F16C and handle the tails the assembly leaves; every one is tested
// against the float64 reference on its own. The "4" variants compute four dot
// products of one weight row with four x rows (x, x+xs, x+2xs, x+3xs) so the
// weight row is read and converted once per four activations.

func dotF32Go(a, b []float32) float32 {
	b = b[:len(a)]
	var s0, s1, s2, s3 float32
	k := 0
	for ; k+4 <= len(a); k += 4 {
		s0 += a[k] * b[k]
		s1 += a[k+1] * b[k+1]
		s2 += a[k+2] * b[k+2]
		s3 += a[k+3] * b[k+3]
	}
	for ; k < len(a); k++ {
		s0 += a[k] * b[k]
	}
	return (s0 + s1) + (s2 + s3)
}

func dot4F32Go(w, x []float32, xs int, out *[4]float32) {
	n := len(w)
	x0, x1, x2, x3 := x[:n], x[xs:xs+n], x[2*xs:2*xs+n], x[3*xs:3*xs+n]
	var s0, s1, s2, s3 float32
	for k, v := range w {
		s0 += v * x0[k]
		s1 += v * x1[k]
		s2 += v * x2[k]
		s3 += v * x3[k]
	}
	out[0] += s0
	out[1] += s1
	out[2] += s2
	out[3] += s3
}

func dotF16Go(w []byte, x []float32) float32 {
	w = w[:2*len(x)]
	var s0, s1 float32
	k := 0
	for ; k+2 <= len(x); k += 2 {
		s0 += F16ToF32(binary.LittleEndian.Uint16(w[2*k:])) * x[k]
		s1 += F16ToF32(binary.LittleEndian.Uint16(w[2*k+2:])) * x[k+1]
	}
	if k < len(x) {
		s0 += F16ToF32(binary.LittleEndian.Uint16(w[2*k:])) * x[k]
	}
	return s0 + s1
}

func dot4F16Go(w []byte, x []float32, xs int, out *[4]float32) {
	n := len(w) / 2
	x0, x1, x2, x3 := x[:n], x[xs:xs+n], x[2*xs:2*xs+n], x[3*xs:3*xs+n]
	var s0, s1, s2, s3 float32
	for k := range n {
		v := F16ToF32(binary.LittleEndian.Uint16(w[2*k:]))
		s0 += v * x0[k]
		s1 += v * x1[k]
		s2 += v * x2[k]
		s3 += v * x3[k]
	}
	out[0] += s0
	out[1] += s1
	out[2] += s2
	out[3] += s3
}

func dotBF16Go(w []byte, x []float32) float32 {
	w = w[:2*len(x)]
	var s0, s1 float32
	k := 0
	for ; k+2 <= len(x); k += 2 {
		s0 += BF16ToF32(binary.LittleEndian.Uint16(w[2*k:])) * x[k]
		s1 += BF16ToF32(binary.LittleEndian.Uint16(w[2*k+2:])) * x[k+1]
	}
	if k < len(x) {
		s0 += BF16ToF32(binary.LittleEndian.Uint16(w[2*k:])) * x[k]
	}
	return s0 + s1
}

func dot4BF16Go(w []byte, x []float32, xs int, out *[4]float32) {
	n := len(w) / 2
	x0, x1, x2, x3 := x[:n], x[xs:xs+n], x[2*xs:2*xs+n], x[3*xs:3*xs+n]
	var s0, s1, s2, s3 float32
	for k := range n {
		v := BF16ToF32(binary.LittleEndian.Uint16(w[2*k:]))
		s0 += v * x0[k]
		s1 += v * x1[k]
		s2 += v * x2[k]
		s3 += v * x3[k]
	}
	out[0] += s0
	out[1] += s1
	out[2] += s2
	out[3] += s3
}

// axpyGo: y += a*x.
func axpyGo(y []float32, a float32, x []float32) {
	x = x[:len(y)]
	for i := range y {
		y[i] += a * x[i]
	}
}
