package gguf

import "fmt"

// FormatError reports a malformed, truncated or inconsistent GGUF file.
// Offset is the byte offset in the file of the offending field.
type FormatError struct {
	File    string
	Field   string
	Offset  int64
	Problem string
}

func (e *FormatError) Error() string {
	return fmt.Sprintf("gguf: %s: %s at offset %d: %s", e.File, e.Field, e.Offset, e.Problem)
}
