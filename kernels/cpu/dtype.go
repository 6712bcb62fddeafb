package cpu

import (
	"errors"
	"fmt"
)

// ErrShape is wrapped by every error this package returns for a size, length or
// layout that does not fit; callers branch on it with errors.Is.
var ErrShape = errors.New("cpu: invalid shape")

// DType is the element type of a weight matrix, numbered as this package
// chooses (not the GGML type ids; loaders map those). host/device.DType and
// the CUDA kernels' DT_* constants use the same numbers.
type DType uint8

const (
	F32    DType = iota // IEEE binary32
	F16                 // IEEE binary16
	BF16                // bfloat16 (top half of a binary32)
	Q8_0                // GGML Q8_0: blocks of an f16 scale and 32 int8
	Q4_0                // GGML Q4_0: f16 d, 32 4-bit q; w = d·(q−8)
	Q4_1                // GGML Q4_1: f16 d, f16 m, 32 4-bit q; w = d·q + m
	Q5_0                // GGML Q5_0: f16 d, 32 fifth bits, 32 4-bit q; w = d·(q−16)
	Q5_1                // GGML Q5_1: f16 d, f16 m, fifth bits, 4-bit q; w = d·q + m
	Q2_K                // GGML Q2_K: 256 2-bit q, 16 4-bit (scale, min) pairs, f16 d, dmin
	Q3_K                // GGML Q3_K: 256 3-bit q (2 low bits + a mask bit), 16 6-bit scales, f16 d
	Q4_K                // GGML Q4_K: f16 d, dmin, 8 6-bit (scale, min) pairs, 256 4-bit q
	Q5_K                // GGML Q5_K: Q4_K plus a fifth bit per value
	Q6_K                // GGML Q6_K: 256 6-bit q, 16 int8 scales, f16 d
	IQ4_NL              // GGML IQ4_NL: f16 d, 32 4-bit indices into a fixed non-linear table
	IQ4_XS              // GGML IQ4_XS: f16 d, 8 6-bit sub-block scales, 256 IQ4_NL indices
	MXFP4               // OCP MXFP4 (GGML block_mxfp4): E8M0 scale byte, 32 E2M1 codes (mxfp4.go)
	numDTypes
)

// Q8Block is the number of values in one Q8_0 block and Q8BlockBytes its size
// in bytes (f16 scale + 32 int8), as in GGML.
const (
	Q8Block      = 32
	Q8BlockBytes = 2 + Q8Block
)

// QKK is the number of values in a K-quant (and IQ4_XS) super-block.
const QKK = 256

// dtypeInfo is the layout of one dtype, as ggml-common.h defines it: block
// values per block and bytes per block (1 and the element size for plain
// types).
type dtypeInfo struct {
	name         string
	block, bytes int
}

var dtypes = [numDTypes]dtypeInfo{
	F32: {"f32", 1, 4}, F16: {"f16", 1, 2}, BF16: {"bf16", 1, 2},
	Q8_0: {"q8_0", 32, 34}, Q4_0: {"q4_0", 32, 18}, Q4_1: {"q4_1", 32, 20},
	Q5_0: {"q5_0", 32, 22}, Q5_1: {"q5_1", 32, 24},
	Q2_K: {"q2_k", QKK, 84}, Q3_K: {"q3_k", QKK, 110}, Q4_K: {"q4_k", QKK, 144},
	Q5_K: {"q5_k", QKK, 176}, Q6_K: {"q6_k", QKK, 210},
	IQ4_NL: {"iq4_nl", 32, 18}, IQ4_XS: {"iq4_xs", QKK, 136},
	MXFP4: {"mxfp4", MXFP4Block, MXFP4BlockBytes},
}

// DTypes lists every dtype in numbering order.
func DTypes() []DType {
	out := make([]DType, numDTypes)
	for i := range out {
		out[i] = DType(i)
	}
	return out
}

// Valid reports whether d is a known dtype.
func (d DType) Valid() bool { return d < numDTypes }

// String returns the lowercase GGML-style name ("f32", "q4_k", …).
func (d DType) String() string {
	if d.Valid() {
		return dtypes[d].name
	}
	return fmt.Sprintf("dtype(%d)", uint8(d))
}

// Quantized reports whether d is block-quantized (Q8_0, the 4/5/6-bit
// formats and MXFP4): rows are whole blocks and MatMul quantizes x to 8 bits for it.
func (d DType) Quantized() bool { return d.Valid() && dtypes[d].block > 1 }

// BlockSize is the number of values per block (1 for plain types, 0 for an
// unknown dtype).
func (d DType) BlockSize() int {
	if !d.Valid() {
		return 0
	}
	return dtypes[d].block
}

// BlockBytes is the size in bytes of one block (of one element for plain
// types; 0 for an unknown dtype).
func (d DType) BlockBytes() int {
	if !d.Valid() {
		return 0
	}
	return dtypes[d].bytes
}

// RowBytes returns the bytes of one row of cols elements. Quantized types
// need cols to be a multiple of their block size.
func (d DType) RowBytes(cols int) (int, error) {
	if cols < 0 {
		return 0, fmt.Errorf("cpu: row of %d columns: %w", cols, ErrShape)
	}
	if !d.Valid() {
		return 0, fmt.Errorf("cpu: unknown dtype %d: %w", uint8(d), ErrShape)
	}
	t := dtypes[d]
	if cols%t.block != 0 {
		return 0, fmt.Errorf("cpu: %s row of %d columns: columns must be a multiple of %d: %w", t.name, cols, t.block, ErrShape)
	}
	return cols / t.block * t.bytes, nil
}

// Matrix is a row-major weight matrix: Rows output features, each row Cols input
// elements stored in Type, exactly as GGUF/GGML stores a 2-D weight (ne0 = Cols).
// Data is read-only to this package and may be memory-mapped.
type Matrix struct {
	Type       DType
	Rows, Cols int
	Data       []byte
}

// Validate checks that Data holds exactly Rows*RowBytes(Cols) bytes.
func (m Matrix) Validate() error {
	if m.Rows < 0 {
		return fmt.Errorf("cpu: matrix with %d rows: %w", m.Rows, ErrShape)
	}
	rb, err := m.Type.RowBytes(m.Cols)
	if err != nil {
		return err
	}
	if want := m.Rows * rb; len(m.Data) != want {
		return fmt.Errorf("cpu: %s matrix %dx%d needs %d bytes, has %d: %w", m.Type, m.Rows, m.Cols, want, len(m.Data), ErrShape)
	}
	return nil
}

// rowBytes is RowBytes for a matrix already known to be valid.
func (m Matrix) rowBytes() int {
	rb, err := m.Type.RowBytes(m.Cols)
	if err != nil {
		panic(err)
	}
	return rb
}

// mustValid panics with the validation error; kernels treat a malformed matrix
// as a programming error, like an index out of range.
func (m Matrix) mustValid() {
	if err := m.Validate(); err != nil {
		panic(err)
	}
}
