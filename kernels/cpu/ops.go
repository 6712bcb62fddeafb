package cpu

import (
	"fmt"
	"math"
)

// AddBias adds bias to each of the m rows of out: out[i*len(bias)+j] += bias[j].
func AddBias(out, bias []float32, m int) {
	n := len(bias)
	if len(out) < m*n {
		panic(fmt.Sprintf("cpu: add bias: out has %d floats, need %d", len(out), m*n))
	}
	for i := range m {
		row := out[i*n : (i+1)*n]
		for j, b := range bias {
			row[j] += b
		}
	}
}

// Add sets out = a + b elementwise over len(out); out may alias a or b.
func Add(out, a, b []float32) {
	a, b = a[:len(out)], b[:len(out)]
	for i := range out {
		out[i] = a[i] + b[i]
	}
}

// RMSNorm normalises each of rows rows of dim floats:
// out = x / sqrt(mean(x²) + eps) * weight. out may alias x.
func RMSNorm(out, x, weight []float32, rows, dim int, eps float32) {
	if len(x) < rows*dim || len(out) < rows*dim || len(weight) < dim {
		panic(fmt.Sprintf("cpu: rmsnorm %dx%d: x has %d, out %d, weight %d floats", rows, dim, len(x), len(out), len(weight)))
	}
	weight = weight[:dim]
	for i := range rows {
		xr := x[i*dim : (i+1)*dim]
		or := out[i*dim : (i+1)*dim]
		ss := float64(dotF32(xr, xr))
		s := float32(1 / math.Sqrt(ss/float64(dim)+float64(eps)))
		for j, w := range weight {
			or[j] = xr[j] * s * w
		}
	}
}

// SiLUMul sets out = gate·sigmoid(gate)·up elementwise over len(out); out may
// alias gate or up.
func SiLUMul(out, gate, up []float32) {
	gate, up = gate[:len(out)], up[:len(out)]
	n := siluMulVec(out, gate, up)
	siluMulGo(out[n:], gate[n:], up[n:])
}

func siluMulGo(out, gate, up []float32) {
	gate, up = gate[:len(out)], up[:len(out)]
	for i := range out {
		g := gate[i]
		out[i] = g / (1 + expf(-g)) * up[i]
	}
}

// Softmax replaces x with softmax(x), subtracting the maximum first. The sum
// is accumulated in float64. An empty row is left alone.
func Softmax(x []float32) {
	if len(x) == 0 {
		return
	}
	sum := expSubSum(x, maxOf(x))
	inv := float32(1 / sum)
	for i := range x {
		x[i] *= inv
	}
}

// expSubSum replaces x[i] by exp(x[i]-mx) and returns their sum. Callers
// pass mx = max(x): the vector path gives exactly 0 where x[i]-mx < -87
// (including masked -Inf logits), the scalar path expf's value there
// (below 1.7e-38 either way).
func expSubSum(x []float32, mx float32) float64 {
	n8, sum := expSubSumVec(x, mx)
	for i := n8; i < len(x); i++ {
		e := expf(x[i] - mx)
		x[i] = e
		sum += float64(e)
	}
	return sum
}

// LogSoftmax writes log(softmax(x)) to out[:len(x)]; out may alias x.
func LogSoftmax(out, x []float32) {
	if len(x) == 0 {
		return
	}
	out = out[:len(x)]
	mx := maxOf(x)
	var sum float64
	for _, v := range x {
		sum += float64(expf(v - mx))
	}
	// (v - max) first: exact for values near the max, where precision matters.
	ls := float32(math.Log(sum))
	for i, v := range x {
		out[i] = (v - mx) - ls
	}
}

// Argmax returns the first index of the largest value (NaNs never win), or -1
// for an empty slice.
func Argmax(x []float32) int {
	if len(x) == 0 {
		return -1
	}
	best, bi := x[0], 0
	for i, v := range x {
		if v > best || (best != best && v == v) {
			best, bi = v, i
		}
	}
	return bi
}

func maxOf(x []float32) float32 {
	m := float32(math.Inf(-1))
	for _, v := range x {
		if v > m {
			m = v
		}
	}
	return m
}

// expf is a float32 exp accurate to about 1 ulp on its range (Cephes
// polynomial after reduction by ln 2 split in two parts), several times faster
// than math.Exp; overflow gives +Inf and underflow 0 (subnormals kept).
func expf(x float32) float32 {
	switch {
	case x != x:
		return x
	case x > 88.72284:
		return float32(math.Inf(1))
	case x < -103.972084:
		return 0
	}
	const (
		log2e = 1.44269504088896341
		c1    = 0.693359375
		c2    = -2.12194440e-4
	)
	n := float32(math.Floor(float64(x*log2e + 0.5)))
	r := x - n*c1
	r -= n * c2
	p := float32(1.9875691500e-4)
	p = p*r + 1.3981999507e-3
	p = p*r + 8.3334519073e-3
	p = p*r + 4.1665795894e-2
	p = p*r + 1.6666665459e-1
	p = p*r + 5.0000001201e-1
	p = p*r*r + r + 1
	k := int32(n)
	if k < -126 {
		p *= 1.0 / (1 << 60) // keep the result representable as a subnormal
		k += 60
	}
	if k > 127 {
		p *= 2
		k--
	}
	return p * math.Float32frombits(uint32(k+127)<<23)
}
