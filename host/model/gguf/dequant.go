package gguf

import (
	"fmt"

	kcpu "github.com/kvhost/kvhost/kernels/cpu"
)

// The block-quantized formats the kernels run natively, as the kernels'
// dtypes; their layouts, decoders and quantizers live in kernels/cpu (one
// place for each format) and the helpers here only translate the GGML type.
var kernelTypes = map[TensorType]kcpu.DType{
	TypeF32: kcpu.F32, TypeF16: kcpu.F16, TypeBF16: kcpu.BF16,
	TypeQ8_0: kcpu.Q8_0, TypeQ4_0: kcpu.Q4_0, TypeQ4_1: kcpu.Q4_1, TypeQ5_0: kcpu.Q5_0, TypeQ5_1: kcpu.Q5_1,
	TypeQ2_K: kcpu.Q2_K, TypeQ3_K: kcpu.Q3_K, TypeQ4_K: kcpu.Q4_K, TypeQ5_K: kcpu.Q5_K, TypeQ6_K: kcpu.Q6_K,
	TypeIQ4_NL: kcpu.IQ4_NL, TypeIQ4_XS: kcpu.IQ4_XS, TypeMXFP4: kcpu.MXFP4,
}

// DType is the kernels' dtype for t; ok is false for the GGML types the
// kernels do not run (the other IQ formats, TQ*, integers, F64).
func (t TensorType) DType() (kcpu.DType, bool) {
	d, ok := kernelTypes[t]
	return d, ok
}

// Dequantizable reports whether Dequantize decodes t: the block-quantized
// types the kernels run.
func (t TensorType) Dequantizable() bool {
	d, ok := t.DType()
	return ok && d.Quantized()
}

// Dequantize decodes len(out) elements of type t from raw, which must hold
// exactly the blocks they occupy.
func Dequantize(t TensorType, raw []byte, out []float32) error {
	if !t.Dequantizable() {
		return fmt.Errorf("gguf: cannot dequantize %s", t)
	}
	d, _ := t.DType()
	if err := kcpu.DequantizeBlocks(d, raw, out); err != nil {
		return fmt.Errorf("gguf: %s: %w", t, err)
	}
	return nil
}

// Quantize encodes src (whole blocks) as t into dst the way llama.cpp's
// reference quantizers do (kernels/cpu.QuantizeBlocks); kvhost uses it to
// write generated models and test files.
func Quantize(t TensorType, dst []byte, src []float32) error {
	if !t.Dequantizable() {
		return fmt.Errorf("gguf: cannot quantize to %s", t)
	}
	d, _ := t.DType()
	if err := kcpu.QuantizeBlocks(d, dst, src); err != nil {
		return fmt.Errorf("gguf: %s: %w", t, err)
	}
	return nil
}
