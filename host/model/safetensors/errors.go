package safetensors

import "fmt"

// FormatError reports a malformed or inconsistent safetensors file. Offset
// is a byte offset in the file (for JSON problems, the decoder's position
// in the header).
type FormatError struct {
	File    string
	Field   string
	Offset  int64
	Problem string
}

func (e *FormatError) Error() string {
	return fmt.Sprintf("safetensors: %s: %s at offset %d: %s", e.File, e.Field, e.Offset, e.Problem)
}
