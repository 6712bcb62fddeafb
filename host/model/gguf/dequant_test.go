package gguf

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	kcpu "github.com/kvhost/kvhost/kernels/cpu"
)

// refElem decodes element i of one block straight from the format's
// description, locating each field from the index alone (no shared loop
// structure with Dequantize), in float64.
func refElem(t TensorType, blk []byte, i int) float64 {
	h := func(off int) float64 { return float64(kcpu.F16ToF32(uint16(blk[off]) | uint16(blk[off+1])<<8)) }
	nib := func(qs []byte, i int) int { // legacy 32-blocks: element i<16 low nibble of byte i, else high of i-16
		if i < 16 {
			return int(qs[i] & 15)
		}
		return int(qs[i-16] >> 4)
	}
	bit5 := func(qh []byte, i int) int { return int(qh[i/8]>>(i%8)) & 1 }
	switch t {
	case TypeQ4_0:
		return float64(nib(blk[2:], i)-8) * h(0)
	case TypeQ4_1:
		return float64(nib(blk[4:], i))*h(0) + h(2)
	case TypeQ5_0:
		return float64(nib(blk[6:], i)+16*bit5(blk[2:6], i)-16) * h(0)
	case TypeQ5_1:
		return float64(nib(blk[8:], i)+16*bit5(blk[4:8], i))*h(0) + h(2)
	case TypeQ8_0:
		return float64(int8(blk[2+i])) * h(0)
	case TypeQ4_K, TypeQ5_K:
		sub := i / 32 // eight sub-blocks of 32, each with a 6-bit scale and min
		sc6 := func(k int) int {
			if k < 4 {
				return int(blk[4+k] & 63)
			}
			return int(blk[4+k+4]&15) | int(blk[4+k-4]>>6)<<4
		}
		mn6 := func(k int) int {
			if k < 4 {
				return int(blk[4+k+4] & 63)
			}
			return int(blk[4+k+4]>>4) | int(blk[4+k]>>6)<<4
		}
		qs := blk[16:]
		if t == TypeQ5_K {
			qs = blk[48:]
		}
		b := qs[32*(sub/2)+i%32]
		q := int(b & 15)
		if sub%2 == 1 {
			q = int(b >> 4)
		}
		if t == TypeQ5_K {
			q += 16 * (int(blk[16+i%32]>>sub) & 1)
		}
		return h(0)*float64(sc6(sub))*float64(q) - h(2)*float64(mn6(sub))
	case TypeQ6_K:
		half, r := i/128, i%128
		quarter, l := r/32, r%32
		lowByte := blk[64*half+l+32*(quarter%2)]
		low := int(lowByte>>(4*(quarter/2))) & 15
		high := int(blk[128+32*half+l]>>(2*quarter)) & 3
		scale := int8(blk[192+8*half+l/16+2*quarter])
		return h(208) * float64(scale) * float64(low|high<<4-32)
	}
	panic("no reference for " + t.String())
}

// randomBlocks fills n blocks of t with random bytes, then gives every f16
// scale field a modest value so the decoded numbers are finite and varied.
func randomBlocks(r *rand.Rand, t TensorType, n int) []byte {
	ts := int(t.TypeSize())
	raw := make([]byte, n*ts)
	for i := range raw {
		raw[i] = byte(r.Uint32())
	}
	put := func(b []byte, v float32) { h := kcpu.F32ToF16(v); b[0], b[1] = byte(h), byte(h>>8) }
	for b := range n {
		blk := raw[b*ts:]
		switch t {
		case TypeQ4_1, TypeQ5_1, TypeQ4_K, TypeQ5_K:
			put(blk, float32(r.NormFloat64()*0.01))
			put(blk[2:], float32(r.NormFloat64()*0.01))
		case TypeQ6_K:
			put(blk[208:], float32(r.NormFloat64()*0.01))
		default:
			put(blk, float32(r.NormFloat64()*0.01))
		}
	}
	return raw
}

var dequantTypes = []TensorType{TypeQ4_0, TypeQ4_1, TypeQ5_0, TypeQ5_1, TypeQ8_0, TypeQ4_K, TypeQ5_K, TypeQ6_K}

func TestDequantizeMatchesReference(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for _, typ := range dequantTypes {
		t.Run(typ.String(), func(t *testing.T) {
			const blocks = 9
			bs := int(typ.BlockSize())
			raw := randomBlocks(r, typ, blocks)
			out := make([]float32, blocks*bs)
			if err := Dequantize(typ, raw, out); err != nil {
				t.Fatal(err)
			}
			var nonzero int
			for i, got := range out {
				blk := raw[i/bs*int(typ.TypeSize()):]
				want := refElem(typ, blk, i%bs)
				if math.Abs(float64(got)-want) > 1e-6*math.Abs(want)+1e-9 {
					t.Fatalf("element %d = %v, want %v", i, got, want)
				}
				if got != 0 {
					nonzero++
				}
			}
			if nonzero < len(out)/2 {
				t.Fatalf("only %d of %d values are nonzero: the test data is degenerate", nonzero, len(out))
			}
		})
	}
}

// TestDequantizeByHand: blocks whose values are worked out by hand.
func TestDequantizeByHand(t *testing.T) {
	one := []byte{0x00, 0x3c} // f16 1.0
	two := []byte{0x00, 0x40} // f16 2.0
	rep := func(b byte, n int) []byte { return []byte(strings.Repeat(string([]byte{b}), n)) }
	cat := func(parts ...[]byte) []byte {
		var out []byte
		for _, p := range parts {
			out = append(out, p...)
		}
		return out
	}
	for _, c := range []struct {
		typ     TensorType
		blk     []byte
		i0, i16 float32 // elements 0 and 16
	}{
		{TypeQ4_0, cat(two, rep(0x9f, 16)), (15 - 8) * 2, (9 - 8) * 2},
		{TypeQ4_1, cat(two, one, rep(0x31, 16)), 1*2 + 1, 3*2 + 1},
		// Q5_0: fifth bits set for elements 0 and 16 only.
		{TypeQ5_0, cat(one, []byte{0x01, 0x00, 0x01, 0x00}, rep(0x21, 16)), 1 + 16 - 16, 2 + 16 - 16},
		{TypeQ8_0, cat(two, []byte{0xfe}, rep(0, 15), []byte{0x7f}, rep(0, 15)), -4, 254},
	} {
		out := make([]float32, 32)
		if err := Dequantize(c.typ, c.blk, out); err != nil {
			t.Fatalf("%s: %v", c.typ, err)
		}
		if out[0] != c.i0 || out[16] != c.i16 {
			t.Errorf("%s: elements 0, 16 = %v, %v; want %v, %v", c.typ, out[0], out[16], c.i0, c.i16)
		}
	}
	// Q4_K: d = 1, dmin = 2, pair 0 = (scale 3, min 1), pair 1 = (5, 2),
	// byte 0 of qs = 0x4a: element 0 = 1·3·10 − 2·1, element 32 = 1·5·4 − 2·2.
	blk := make([]byte, TypeQ4_K.TypeSize())
	copy(blk, one)
	copy(blk[2:], two)
	blk[4], blk[5], blk[8], blk[9] = 3, 5, 1, 2
	blk[16] = 0x4a
	out := make([]float32, 256)
	if err := Dequantize(TypeQ4_K, blk, out); err != nil {
		t.Fatal(err)
	}
	if out[0] != 28 || out[32] != 16 {
		t.Errorf("Q4_K elements 0, 32 = %v, %v; want 28, 16", out[0], out[32])
	}
}

func TestDequantizeErrors(t *testing.T) {
	if err := Dequantize(TypeQ4_K, make([]byte, 144), make([]float32, 255)); err == nil {
		t.Error("255 Q4_K elements accepted")
	}
	if err := Dequantize(TypeQ4_K, make([]byte, 143), make([]float32, 256)); err == nil {
		t.Error("a short Q4_K block accepted")
	}
	if err := Dequantize(TypeIQ2_XXS, make([]byte, 66), make([]float32, 256)); err == nil || !strings.Contains(err.Error(), "IQ2_XXS") {
		t.Errorf("IQ2_XXS: %v", err)
	}
	for _, typ := range dequantTypes {
		if !typ.Dequantizable() {
			t.Errorf("%s not dequantizable", typ)
		}
	}
	if TypeF32.Dequantizable() || TypeQ2_K.Dequantizable() {
		t.Error("F32 or Q2_K claims to be dequantizable")
	}
}

func TestQuantizeQ4_0RoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	src := make([]float32, 32*20)
	for i := range src {
		src[i] = float32(r.NormFloat64())
	}
	copy(src[32:64], make([]float32, 32)) // an all-zero block
	raw := make([]byte, 18*20)
	if err := QuantizeQ4_0(raw, src); err != nil {
		t.Fatal(err)
	}
	out := make([]float32, len(src))
	if err := Dequantize(TypeQ4_0, raw, out); err != nil {
		t.Fatal(err)
	}
	for b := range 20 {
		var amax float64
		for _, v := range src[32*b : 32*b+32] {
			amax = math.Max(amax, math.Abs(float64(v)))
		}
		for i := 32 * b; i < 32*b+32; i++ {
			// Half a quantization step (amax/8), plus the f16 rounding of d.
			if err := math.Abs(float64(out[i] - src[i])); err > amax/16*1.01+1e-6 {
				t.Fatalf("value %d: %v decoded as %v (block max %v)", i, src[i], out[i], amax)
			}
		}
	}
	if err := QuantizeQ4_0(make([]byte, 18), make([]float32, 31)); err == nil {
		t.Error("a partial block was quantized")
	}
}

// FuzzDequantize: any bytes in whole blocks decode without a panic, and
// anything else is refused.
func FuzzDequantize(f *testing.F) {
	f.Add(uint8(5), make([]byte, 144))
	f.Add(uint8(7), make([]byte, 211))
	f.Fuzz(func(t *testing.T, which uint8, raw []byte) {
		typ := dequantTypes[int(which)%len(dequantTypes)]
		bs, ts := int(typ.BlockSize()), int(typ.TypeSize())
		whole := len(raw) / ts * ts
		if err := Dequantize(typ, raw[:whole], make([]float32, whole/ts*bs)); err != nil {
			t.Fatalf("%s, %d whole blocks: %v", typ, whole/ts, err)
		}
		if whole != len(raw) {
			if err := Dequantize(typ, raw, make([]float32, whole/ts*bs)); err == nil {
				t.Fatalf("%s: %d bytes for %d blocks accepted", typ, len(raw), whole/ts)
			}
		}
	})
}
