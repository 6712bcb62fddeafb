package cpu

import (
	"fmt"
	"math"
)

// MXFP4 is the OCP Microscaling format gpt-oss ships its expert weights in:
// blocks of 32 FP4 E2M1 values (sign, 2 exponent bits, 1 mantissa bit:
// ±{0, 0.5, 1, 1.5, 2, 3, 4, 6}) sharing one E8M0 scale byte (2^(e-127); e
// = 255 is NaN). The decoders here read both published layouts:
//
//   - GGML (GGUF tensor type MXFP4, number 39): block_mxfp4 is the scale
//     byte then 16 bytes qs, qs[j] holding element j in its low nibble and
//     element j+16 in its high nibble (the Q4_0 convention). 17 bytes per 32
//     values. ggml stores the E2M1 values doubled (kvalues_mxfp4 = {0, 1, 2,
//     3, 4, 6, 8, 12, ...}) and halves the scale (GGML_E8M0_TO_FP32_HALF);
//     the products are the same.
//   - Hugging Face (gpt-oss's *_blocks and *_scales safetensors, uint8):
//     blocks [..., G, 16] and scales [..., G], byte j of a block holding
//     element 2j in its low nibble and 2j+1 in its high nibble
//     (transformers' convert_moe_packed_tensors), one scale per 32 values.
//     llama.cpp's converter repacks this into the GGML layout
//     (GptOssModel.transform_nibble_layout), as MXFP4FromHF does.
//
// MXFP4 is also a weight dtype the kernels run natively (DType MXFP4, the
// GGML layout): MatMul dots its rows with Q8 activation blocks as llama.cpp
// does, the codes doubled to the integers kvaluesMXFP4 and the scale halved
// (e8m0Half), so each block is one integer dot product times one float.
//
// Every value is exact in float32 (E2M1 has 2 significant bits; scales reach
// 2^-127, products 2^-128, a float32 subnormal) except 6·2^127 and above,
// which overflow to ±Inf as they do in ggml.
const (
	MXFP4Block      = 32
	MXFP4BlockBytes = 17
)

// e2m1 holds the 16 FP4 E2M1 values by code.
var e2m1 = [16]float32{0, 0.5, 1, 1.5, 2, 3, 4, 6, float32(math.Copysign(0, -1)), -0.5, -1, -1.5, -2, -3, -4, -6}

// kvaluesMXFP4 are the E2M1 values doubled (ggml's kvalues_mxfp4): integers,
// so the dot kernels multiply them with int8 activations.
var kvaluesMXFP4 = [16]int8{0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12}

// e8m0Half[e] is half the scale byte e's value (e8m0(e)/2, exact; NaN for
// 255), what kvaluesMXFP4 multiply. The AVX2 kernel indexes it.
var e8m0Half = func() (t [256]float32) {
	for e := range t {
		t[e] = e8m0(byte(e)) / 2
	}
	return t
}()

// e8m0 decodes an E8M0 scale byte: 2^(e-127), NaN for 255.
func e8m0(e byte) float32 {
	switch e {
	case 255:
		return float32(math.NaN())
	case 0:
		return math.Float32frombits(0x00400000) // 2^-127, subnormal
	}
	return math.Float32frombits(uint32(e) << 23)
}

// DequantizeMXFP4 decodes len(out) values (a multiple of 32) from GGML MXFP4
// blocks, which must hold exactly their len(out)/32 blocks.
func DequantizeMXFP4(out []float32, blocks []byte) error {
	nb := len(out) / MXFP4Block
	if len(out)%MXFP4Block != 0 || len(blocks) != nb*MXFP4BlockBytes {
		return fmt.Errorf("cpu: mxfp4: %d values need whole blocks of %d and %d bytes, have %d: %w", len(out), MXFP4Block, nb*MXFP4BlockBytes, len(blocks), ErrShape)
	}
	dequantQuant(MXFP4, blocks, out)
	return nil
}

// dequantMXFP4 decodes one GGML MXFP4 block into y (32 values).
func dequantMXFP4(blk []byte, y []float32) {
	s := e8m0(blk[0])
	for j, q := range blk[1:MXFP4BlockBytes] {
		y[j] = e2m1[q&0x0f] * s
		y[j+16] = e2m1[q>>4] * s
	}
}

// quantMXFP4 encodes 32 values as one GGML MXFP4 block, as ggml's
// quantize_row_mxfp4_ref: the shared exponent e = floor(log2(amax)) − 2
// (stored +127, clamped to [1, 254]) puts the largest magnitude in [4, 8);
// each value takes the nearest E2M1 magnitude (6 at most; ties to the
// smaller code) and its sign.
func quantMXFP4(x []float32, blk []byte) {
	amax := 0.0
	for _, v := range x {
		amax = math.Max(amax, math.Abs(float64(v)))
	}
	e := 0
	if amax > 0 {
		e = min(max(int(math.Floor(math.Log2(amax)))-2+127, 1), 254)
	}
	blk[0] = byte(e)
	scale := math.Ldexp(1, e-127)
	for j := range 16 {
		blk[1+j] = e2m1Code(x[j], scale) | e2m1Code(x[j+16], scale)<<4
	}
}

// e2m1Code is the code of the E2M1 value nearest v/scale.
func e2m1Code(v float32, scale float64) byte {
	a := math.Abs(float64(v)) / scale
	best := 0
	for i, m := range e2m1[:8] {
		if math.Abs(a-float64(m)) < math.Abs(a-float64(e2m1[best])) {
			best = i
		}
	}
	if v < 0 {
		best |= 8
	}
	return byte(best)
}

// DequantizeMXFP4HF decodes len(out) values from Hugging Face's layout:
// blocks holds len(out)/2 bytes (16 per group of 32) and scales one byte per
// group.
func DequantizeMXFP4HF(out []float32, blocks, scales []byte) error {
	g := len(out) / MXFP4Block
	if len(out)%MXFP4Block != 0 || len(blocks) != g*16 || len(scales) != g {
		return fmt.Errorf("cpu: mxfp4 (hf layout): %d values need %d block bytes and %d scales, have %d and %d: %w", len(out), g*16, g, len(blocks), len(scales), ErrShape)
	}
	for i := range g {
		s := e8m0(scales[i])
		o := out[i*MXFP4Block : (i+1)*MXFP4Block]
		for j, q := range blocks[i*16 : (i+1)*16] {
			o[2*j] = e2m1[q&0x0f] * s
			o[2*j+1] = e2m1[q>>4] * s
		}
	}
	return nil
}

// MXFP4FromHF repacks Hugging Face blocks and scales into GGML MXFP4 blocks
// in dst (17 bytes per group): the scale first, then the nibbles moved from
// element pairs (2j, 2j+1) to halves (j, j+16). The values are unchanged.
func MXFP4FromHF(dst, blocks, scales []byte) error {
	g := len(scales)
	if len(blocks) != g*16 || len(dst) != g*MXFP4BlockBytes {
		return fmt.Errorf("cpu: mxfp4 repack: %d scales need %d block bytes and %d output bytes, have %d and %d: %w", g, g*16, g*MXFP4BlockBytes, len(blocks), len(dst), ErrShape)
	}
	for i := range g {
		src := blocks[i*16 : (i+1)*16]
		d := dst[i*MXFP4BlockBytes : (i+1)*MXFP4BlockBytes]
		d[0] = scales[i]
		nib := func(k int) byte { return src[k/2] >> (4 * (k & 1)) & 0x0f }
		for j := range 16 {
			d[1+j] = nib(j) | nib(j+16)<<4
		}
	}
	return nil
}
