package cpu

import (
	"errors"
	"math"
	"testing"
)

// TestMXFP4HandWorked decodes blocks whose values are worked out by hand
// from the OCP MX specification.
func TestMXFP4HandWorked(t *testing.T) {
	// One GGML block, scale byte 127 (2^0): qs[j] = j | (15-j)<<4, so
	// element j is code j and element j+16 is code 15-j.
	blk := make([]byte, MXFP4BlockBytes)
	blk[0] = 127
	for j := range 16 {
		blk[1+j] = byte(j) | byte(15-j)<<4
	}
	want := []float32{
		0, 0.5, 1, 1.5, 2, 3, 4, 6, 0, -0.5, -1, -1.5, -2, -3, -4, -6,
		-6, -4, -3, -2, -1.5, -1, -0.5, 0, 6, 4, 3, 2, 1.5, 1, 0.5, 0,
	}
	out := make([]float32, 32)
	if err := DequantizeMXFP4(out, blk); err != nil {
		t.Fatal(err)
	}
	for i := range want {
		if out[i] != want[i] {
			t.Fatalf("scale 2^0: element %d = %v, want %v (all %v)", i, out[i], want[i], out)
		}
	}
	if !math.Signbit(float64(out[8])) || math.Signbit(float64(out[0])) {
		t.Errorf("code 8 is -0 and code 0 is +0; got %v and %v", out[8], out[0])
	}

	// Scales: 128 doubles; 0 is 2^-127 (0.5 → 2^-128, a float32
	// subnormal); 254 is 2^127 (6·2^127 overflows); 255 is NaN.
	for _, c := range []struct {
		e      byte
		code   byte
		want   float32
		isNaN  bool
		isPInf bool
	}{
		{128, 7, 12, false, false},
		{125, 3, 0.375, false, false},
		{0, 1, float32(math.Ldexp(1, -128)), false, false},
		{0, 7, float32(math.Ldexp(6, -127)), false, false},
		{254, 2, float32(math.Ldexp(1, 127)), false, false},
		{254, 7, 0, false, true},
		{255, 0, 0, true, false},
	} {
		b := make([]byte, MXFP4BlockBytes)
		b[0] = c.e
		b[1] = c.code
		if err := DequantizeMXFP4(out, b); err != nil {
			t.Fatal(err)
		}
		switch got := out[0]; {
		case c.isNaN:
			if got == got {
				t.Errorf("scale byte 255: %v, want NaN", got)
			}
		case c.isPInf:
			if !math.IsInf(float64(got), 1) {
				t.Errorf("6·2^127: %v, want +Inf", got)
			}
		case got != c.want:
			t.Errorf("scale byte %d, code %d: %v, want %v", c.e, c.code, got, c.want)
		}
	}

	// Hugging Face layout: byte 0x21 holds element 0 (code 1, 0.5) in its
	// low nibble and element 1 (code 2, 1.0) in its high nibble; with scale
	// byte 126 (2^-1): 0.25 and 0.5. Byte 0xF8: -0 and -6 → -0 and -3.
	hf := make([]byte, 16)
	hf[0], hf[15] = 0x21, 0xF8
	if err := DequantizeMXFP4HF(out, hf, []byte{126}); err != nil {
		t.Fatal(err)
	}
	if out[0] != 0.25 || out[1] != 0.5 || out[30] != 0 || !math.Signbit(float64(out[30])) || out[31] != -3 {
		t.Errorf("hf block: elements 0, 1, 30, 31 = %v %v %v %v, want 0.25 0.5 -0 -3", out[0], out[1], out[30], out[31])
	}
	for i := 2; i < 30; i++ {
		if out[i] != 0 {
			t.Errorf("hf block: element %d = %v, want 0", i, out[i])
		}
	}
}

// TestMXFP4RepackMatchesGGML checks the HF → GGML repack on random blocks
// against both decoders and against llama.cpp's own arithmetic (doubled
// codes times the halved scale, for scale bytes 2..254 where it has no
// special case).
func TestMXFP4RepackMatchesGGML(t *testing.T) {
	r := newRand(11)
	const groups = 40
	blocks := make([]byte, groups*16)
	scales := make([]byte, groups)
	for i := range blocks {
		blocks[i] = byte(r.UintN(256))
	}
	for i := range scales {
		scales[i] = byte(2 + r.UintN(200))
	}
	ggml := make([]byte, groups*MXFP4BlockBytes)
	if err := MXFP4FromHF(ggml, blocks, scales); err != nil {
		t.Fatal(err)
	}
	a := make([]float32, groups*32)
	b := make([]float32, groups*32)
	if err := DequantizeMXFP4HF(a, blocks, scales); err != nil {
		t.Fatal(err)
	}
	if err := DequantizeMXFP4(b, ggml); err != nil {
		t.Fatal(err)
	}
	kvalues := []float64{0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12}
	for i := range a {
		g, k := i/32, i%32
		// llama.cpp: GGML block qs[j] low nibble → element j, high → j+16.
		q := ggml[g*MXFP4BlockBytes+1+k%16]
		code := q & 0x0f
		if k >= 16 {
			code = q >> 4
		}
		ref := kvalues[code] * math.Ldexp(1, int(ggml[g*MXFP4BlockBytes])-128)
		if a[i] != b[i] || float64(b[i]) != ref {
			t.Fatalf("element %d: hf %v, ggml %v, llama.cpp's arithmetic %v", i, a[i], b[i], ref)
		}
	}
}

func TestMXFP4Errors(t *testing.T) {
	out := make([]float32, 32)
	for _, err := range []error{
		DequantizeMXFP4(make([]float32, 31), make([]byte, 17)),
		DequantizeMXFP4(out, make([]byte, 16)),
		DequantizeMXFP4HF(out, make([]byte, 15), make([]byte, 1)),
		DequantizeMXFP4HF(out, make([]byte, 16), make([]byte, 2)),
		MXFP4FromHF(make([]byte, 16), make([]byte, 16), make([]byte, 1)),
		MXFP4FromHF(make([]byte, 17), make([]byte, 17), make([]byte, 1)),
	} {
		if !errors.Is(err, ErrShape) {
			t.Errorf("err %v, want ErrShape", err)
		}
	}
}

func FuzzMXFP4(f *testing.F) {
	f.Add(make([]byte, 16), byte(127))
	f.Fuzz(func(t *testing.T, blk []byte, scale byte) {
		if len(blk) < 16 {
			return
		}
		blk = blk[:16]
		ggml := make([]byte, MXFP4BlockBytes)
		if err := MXFP4FromHF(ggml, blk, []byte{scale}); err != nil {
			t.Fatal(err)
		}
		a, b := make([]float32, 32), make([]float32, 32)
		if DequantizeMXFP4HF(a, blk, []byte{scale}) != nil || DequantizeMXFP4(b, ggml) != nil {
			t.Fatal("decode failed")
		}
		for i := range a {
			if math.Float32bits(a[i]) != math.Float32bits(b[i]) && (a[i] == a[i] || b[i] == b[i]) {
				t.Fatalf("element %d: hf %v, ggml %v", i, a[i], b[i])
			}
		}
	})
}
