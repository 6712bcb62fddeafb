package gguf

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	kcpu "github.com/kvhost/kvhost/kernels/cpu"
)

var dequantTypes = []TensorType{TypeQ4_0, TypeQ4_1, TypeQ5_0, TypeQ5_1, TypeQ8_0, TypeQ2_K, TypeQ3_K, TypeQ4_K, TypeQ5_K, TypeQ6_K, TypeIQ4_NL, TypeIQ4_XS}

// TestDequantizeDelegates: every quantized type maps to the kernels' dtype of
// the same layout, and Dequantize gives what the kernels' decoder gives
// (checked element by element against a reference in kernels/cpu).
func TestDequantizeDelegates(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for _, typ := range dequantTypes {
		d, ok := typ.DType()
		if !ok || !d.Quantized() || uint64(d.BlockSize()) != typ.BlockSize() || uint64(d.BlockBytes()) != typ.TypeSize() {
			t.Fatalf("%s maps to %v (block %d, %d bytes)", typ, d, d.BlockSize(), d.BlockBytes())
		}
		raw := make([]byte, 3*typ.TypeSize())
		for i := range raw {
			raw[i] = byte(r.Uint32())
		}
		got := make([]float32, 3*typ.BlockSize())
		want := make([]float32, len(got))
		if err := Dequantize(typ, raw, got); err != nil {
			t.Fatal(err)
		}
		if err := kcpu.DequantizeBlocks(d, raw, want); err != nil {
			t.Fatal(err)
		}
		for i := range got {
			if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
				t.Fatalf("%s value %d: %v, kernels decode %v", typ, i, got[i], want[i])
			}
		}
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
	if TypeF32.Dequantizable() || TypeIQ2_XXS.Dequantizable() {
		t.Error("F32 or IQ2_XXS claims to be dequantizable")
	}
}

func TestQuantizeRoundTrip(t *testing.T) {
	src := make([]float32, 64)
	for i := range src {
		src[i] = float32(i%7) - 3
	}
	raw := make([]byte, 2*18)
	if err := Quantize(TypeQ4_0, raw, src); err != nil {
		t.Fatal(err)
	}
	out := make([]float32, 64)
	if err := Dequantize(TypeQ4_0, raw, out); err != nil {
		t.Fatal(err)
	}
	for i := range src {
		// d = -3/-8 per block: the levels are multiples of 3/8 from -3 to
		// 2.625, so -3..2 are within half a step and 3 is a step away.
		if math.Abs(float64(out[i]-src[i])) > 3.0/8+1e-3 {
			t.Fatalf("value %d: %v decoded as %v", i, src[i], out[i])
		}
	}
	if err := Quantize(TypeQ4_0, make([]byte, 18), make([]float32, 31)); err == nil {
		t.Error("a partial block was quantized")
	}
	if err := Quantize(TypeIQ2_XXS, make([]byte, 66), make([]float32, 256)); err == nil {
		t.Error("IQ2_XXS quantized")
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
