package wasmrt

import (
	"errors"
	"fmt"
	"time"
)

// RefusedError says why Load refused a module.
type RefusedError struct {
	Plugin string
	Stage  string // decode, compile, imports, exports, instantiate, handshake, describe, init, self-test
	Err    error
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("wasmrt: %s refused at %s: %v", e.Plugin, e.Stage, e.Err)
}

func (e *RefusedError) Unwrap() error { return e.Err }

// Step failure kinds.
const (
	StepFuel     = "out of fuel"
	StepTrap     = "trap"
	StepStatus   = "error status"
	StepContract = "contract"
)

// ErrOutOfFuel matches (errors.Is) a step that ran out of fuel.
var ErrOutOfFuel = errors.New("wasmrt: out of fuel")

// StepError is a failed sampler step; the instance that failed is closed.
type StepError struct {
	Plugin  string
	Kind    string
	Detail  string
	Elapsed time.Duration
	Err     error
}

func (e *StepError) Error() string {
	s := fmt.Sprintf("wasmrt: %s: step failed (%s) after %v: %s", e.Plugin, e.Kind, e.Elapsed.Round(time.Microsecond), e.Detail)
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

func (e *StepError) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrOutOfFuel) hold for fuel failures.
func (e *StepError) Is(target error) bool { return target == ErrOutOfFuel && e.Kind == StepFuel }
