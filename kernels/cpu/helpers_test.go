package cpu

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"
)

// impls runs f once on the portable Go kernels and, when the CPU supports
// them, once on the AVX2 assembly kernels.
func impls(t *testing.T, f func(t *testing.T)) {
	t.Helper()
	saved := useSIMD
	defer func() { useSIMD = saved }()
	useSIMD = false
	t.Run("go", f)
	if simdAvailable {
		useSIMD = true
		t.Run("simd", f)
	}
}

func newRand(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15)) }

func randVec(r *rand.Rand, n int, scale float64) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32((r.Float64()*2 - 1) * scale)
	}
	return v
}

// refHalf decodes IEEE binary16 from its fields with math.Ldexp, independently
// of the package's bit manipulation.
func refHalf(h uint16) float64 {
	sign := 1.0
	if h&0x8000 != 0 {
		sign = -1
	}
	e := int(h>>10) & 0x1f
	m := float64(h & 0x3ff)
	switch e {
	case 0:
		return sign * math.Ldexp(m, -24)
	case 0x1f:
		if m != 0 {
			return math.NaN()
		}
		return sign * math.Inf(1)
	}
	return sign * math.Ldexp(1+m/1024, e-15)
}

// refBF16 decodes bfloat16 from its fields.
func refBF16(h uint16) float64 {
	sign := 1.0
	if h&0x8000 != 0 {
		sign = -1
	}
	e := int(h>>7) & 0xff
	m := float64(h & 0x7f)
	switch e {
	case 0:
		return sign * math.Ldexp(m, -133)
	case 0xff:
		if m != 0 {
			return math.NaN()
		}
		return sign * math.Inf(1)
	}
	return sign * math.Ldexp(1+m/128, e-127)
}

// refDecode decodes one stored row independently of the package.
func refDecode(t DType, data []byte, cols int) []float64 {
	out := make([]float64, cols)
	switch t {
	case F32:
		for j := range out {
			out[j] = float64(math.Float32frombits(binary.LittleEndian.Uint32(data[4*j:])))
		}
	case F16:
		for j := range out {
			out[j] = refHalf(binary.LittleEndian.Uint16(data[2*j:]))
		}
	case BF16:
		for j := range out {
			out[j] = refBF16(binary.LittleEndian.Uint16(data[2*j:]))
		}
	default:
		bs, bb := t.BlockSize(), t.BlockBytes()
		for j := range out {
			out[j] = refElem(t, data[j/bs*bb:], j%bs)
		}
	}
	return out
}

// makeMatrix encodes random weights in dtype dt.
func makeMatrix(tb testing.TB, r *rand.Rand, dt DType, rows, cols int) Matrix {
	tb.Helper()
	src := randVec(r, rows*cols, 1)
	rb, err := dt.RowBytes(cols)
	if err != nil {
		tb.Fatal(err)
	}
	data := make([]byte, rows*rb)
	switch dt {
	case F32:
		for i, v := range src {
			binary.LittleEndian.PutUint32(data[4*i:], math.Float32bits(v))
		}
	case F16:
		for i, v := range src {
			binary.LittleEndian.PutUint16(data[2*i:], F32ToF16(v))
		}
	case BF16:
		for i, v := range src {
			binary.LittleEndian.PutUint16(data[2*i:], F32ToBF16(v))
		}
	default:
		if err := QuantizeBlocks(dt, data, src); err != nil {
			tb.Fatal(err)
		}
	}
	return Matrix{Type: dt, Rows: rows, Cols: cols, Data: data}
}

// near reports whether got is within tol of want (absolute).
func near(got float32, want, tol float64) bool {
	return math.Abs(float64(got)-want) <= tol
}
