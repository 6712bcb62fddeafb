package budget

import (
	"errors"
	"fmt"
)

// ErrInvalidInput is wrapped by every Validate error, so callers can branch
// on bad configuration with errors.Is.
var ErrInvalidInput = errors.New("budget: invalid input")

// invalid builds a Validate error naming the struct field, its value and the
// allowed range.
func invalid(field string, value any, want string) error {
	return fmt.Errorf("%w: %s = %v, want %s", ErrInvalidInput, field, value, want)
}

// InsufficientMemoryError reports that a sizing phase ran out of memory
// (§3 "Error when rest ≤ 0"). NeedBytes is what the phase must keep or
// place, HaveBytes what was available; Knob is the setting to change,
// SuggestValue the value to set it to (Suggest is the same, printed the way
// SGLang prints it) and Minimum the exact threshold below which the phase
// still fails.
type InsufficientMemoryError struct {
	Phase        string
	NeedBytes    int64
	HaveBytes    int64
	Knob         string
	Suggest      string
	SuggestValue float64
	Minimum      float64
}

// Error says which phase ran out, by how much and what to change.
func (e *InsufficientMemoryError) Error() string {
	msg := fmt.Sprintf("budget: %s ran out of memory: needs %d bytes, has %d bytes (short by %d bytes, %.3f GiB)",
		e.Phase, e.NeedBytes, e.HaveBytes, e.NeedBytes-e.HaveBytes, float64(e.NeedBytes-e.HaveBytes)/GiB)
	if e.Knob == "" {
		return msg
	}
	if e.SuggestValue >= 1 && (e.Knob == "mem_fraction_static" || e.Knob == "--mem-fraction-static") {
		return msg + fmt.Sprintf("; no %s below 1 fits (minimum %.4f): free memory or load smaller weights", e.Knob, e.Minimum)
	}
	if e.Minimum == e.SuggestValue { // a count: the suggestion is the threshold
		return msg + fmt.Sprintf("; set %s to %s", e.Knob, e.Suggest)
	}
	return msg + fmt.Sprintf("; set %s to %s (minimum %.4f)", e.Knob, e.Suggest, e.Minimum)
}
