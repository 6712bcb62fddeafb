package cpu

import (
	"errors"
	"fmt"
)

// ErrShape is wrapped by every error this package returns for a size, length or
// layout that does not fit; callers branch on it with errors.Is.
var ErrShape = errors.New("cpu: invalid shape")

// DType is the element type of a weight matrix, numbered as this package
// chooses (not the GGML type ids; loaders map those).
type DType uint8

const (
	F32  DType = iota // IEEE binary32
	F16               // IEEE binary16
	BF16              // bfloat16 (top half of a binary32)
	Q8_0              // GGML Q8_0: blocks of an f16 scale and 32 int8
)

// Q8Block is the number of values in one Q8_0 block and Q8BlockBytes its size
// in bytes (f16 scale + 32 int8), as in GGML.
const (
	Q8Block      = 32
	Q8BlockBytes = 2 + Q8Block
)

// String returns the lowercase GGML-style name ("f32", "f16", "bf16", "q8_0").
func (d DType) String() string {
	switch d {
	case F32:
		return "f32"
	case F16:
		return "f16"
	case BF16:
		return "bf16"
	case Q8_0:
		return "q8_0"
	}
	return fmt.Sprintf("dtype(%d)", uint8(d))
}

// RowBytes returns the bytes of one row of cols elements. Q8_0 needs cols to be
// a multiple of 32.
func (d DType) RowBytes(cols int) (int, error) {
	if cols < 0 {
		return 0, fmt.Errorf("cpu: row of %d columns: %w", cols, ErrShape)
	}
	switch d {
	case F32:
		return 4 * cols, nil
	case F16, BF16:
		return 2 * cols, nil
	case Q8_0:
		if cols%Q8Block != 0 {
			return 0, fmt.Errorf("cpu: q8_0 row of %d columns: columns must be a multiple of %d: %w", cols, Q8Block, ErrShape)
		}
		return cols / Q8Block * Q8BlockBytes, nil
	}
	return 0, fmt.Errorf("cpu: unknown dtype %d: %w", uint8(d), ErrShape)
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
