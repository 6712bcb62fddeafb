package plugin

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/kvhost/kvhost/sdk"
)

// The error family. Loading a version that is not accepted returns a
// *RefusedError naming the stage; its cause is one of the detail types
// (*fuel.LimitError, *fuel.DecodeError, *ImportError, *MissingExportError,
// *ABIError, *KindError, *ContractError, *TrapError, *FuelError,
// *DeadlineError, *GuestError) or wazero's own validation error. A failed
// call returns a detail type directly. IsGuestFault says which errors are
// the plugin's fault.

// RefusedError is a plugin version that was not accepted; nothing of it
// serves, and nothing of it stays in the compilation cache.
type RefusedError struct {
	Plugin string
	// Stage is where it was refused: limits, validate, instrument,
	// compile, imports, exports, instantiate, handshake, describe, init or
	// self-test.
	Stage string
	Err   error
}

func (e *RefusedError) Error() string {
	msg := strings.TrimPrefix(e.Err.Error(), "plugin: "+e.Plugin+": ")
	return fmt.Sprintf("plugin: %s: refused at %s: %s", e.Plugin, e.Stage, firstLine(msg))
}

func (e *RefusedError) Unwrap() error { return e.Err }

// refused wraps err (unless it is already a refusal).
func refused(plugin, stage string, err error) error {
	var re *RefusedError
	if errors.As(err, &re) {
		return err
	}
	return &RefusedError{Plugin: plugin, Stage: stage, Err: err}
}

// KindError is a plugin of another kind than the one asked for (a
// sampler in the configurator registry, or the reverse): not a fault of
// the plugin, which the other registry serves.
type KindError struct {
	Plugin      string
	Want, Found string
}

func (e *KindError) Error() string {
	return fmt.Sprintf("plugin: %s: is a %s, not a %s", e.Plugin, e.Found, e.Want)
}

// ErrOutOfFuel matches (errors.Is) a call stopped by its fuel budget.
var ErrOutOfFuel = errors.New("plugin: out of fuel")

// FuelError is a call that spent its fuel budget (a runaway loop, or bulk
// operations worth more than the budget); the instance was discarded.
type FuelError struct {
	Plugin  string
	Call    string
	Budget  int64
	Elapsed time.Duration
}

func (e *FuelError) Error() string {
	return fmt.Sprintf("plugin: %s: %s ran out of its fuel budget of %d after %v and was stopped",
		e.Plugin, e.Call, e.Budget, e.Elapsed.Round(time.Microsecond))
}

// Is makes errors.Is(err, ErrOutOfFuel) hold.
func (e *FuelError) Is(target error) bool { return target == ErrOutOfFuel }

// IsGuestFault reports whether err is the plugin's fault: a refusal, a
// trap, a spent budget or deadline, a broken contract or the guest's own
// error status — as opposed to a cancelled context, a caller's bad input or
// a plugin of another kind. Governance counts only these.
func IsGuestFault(err error) bool {
	var (
		re *RefusedError
		tr *TrapError
		fe *FuelError
		de *DeadlineError
		ce *ContractError
		ge *GuestError
		ke *KindError
	)
	if errors.As(err, &ke) {
		return false
	}
	return errors.As(err, &re) || errors.As(err, &tr) || errors.As(err, &fe) || errors.As(err, &de) ||
		errors.As(err, &ce) || errors.As(err, &ge)
}

// ABIError reports a plugin built for another ABI version.
type ABIError struct {
	Plugin      string
	Want, Found int
}

func (e *ABIError) Error() string {
	return fmt.Sprintf("plugin: %s: built against ABI %d, this host needs %d: rebuild with the current sdk",
		e.Plugin, e.Found, e.Want)
}

// MissingExportError reports an export the ABI requires that the plugin
// lacks or exports with the wrong signature.
type MissingExportError struct {
	Plugin string
	Export string
	// Want is the required signature; Found is what the plugin exports
	// ("" when it does not export the name at all).
	Want, Found string
}

func (e *MissingExportError) Error() string {
	if e.Found == "" {
		return fmt.Sprintf("plugin: %s: missing export %s %s", e.Plugin, e.Export, e.Want)
	}
	return fmt.Sprintf("plugin: %s: export %s has signature %s, want %s", e.Plugin, e.Export, e.Found, e.Want)
}

// TrapError reports a call that trapped: a Go panic, unreachable, an out of
// bounds access, memory exhaustion or a guest exit. The instance was
// discarded.
type TrapError struct {
	Plugin string
	Call   string
	// Reason is the guest's own first line of complaint (e.g. "panic: …" or
	// "fatal error: out of memory") when it wrote one to stderr.
	Reason string
	// Stderr is the start (up to 4 KiB) of what the guest wrote to
	// stderr/stdout during the call.
	Stderr string
	Err    error
}

func (e *TrapError) Error() string {
	msg := firstLine(e.Err.Error())
	if e.Reason != "" {
		return fmt.Sprintf("plugin: %s: %s trapped: %s (%s)", e.Plugin, e.Call, e.Reason, msg)
	}
	return fmt.Sprintf("plugin: %s: %s trapped: %s", e.Plugin, e.Call, msg)
}

func (e *TrapError) Unwrap() error { return e.Err }

// DeadlineError reports a call that overran its wall-clock deadline: the
// watchdog drained its fuel and it trapped, or it returned late. It wraps
// context.DeadlineExceeded. The instance was discarded.
type DeadlineError struct {
	Plugin  string
	Call    string
	Timeout time.Duration
	Elapsed time.Duration
}

func (e *DeadlineError) Error() string {
	return fmt.Sprintf("plugin: %s: %s did not return within its %v deadline and was stopped after %v",
		e.Plugin, e.Call, e.Timeout, e.Elapsed.Round(time.Microsecond))
}

func (e *DeadlineError) Unwrap() error { return context.DeadlineExceeded }

// ContractError reports a plugin that broke its kind's contract: a
// configurator's declarations that do not add up, units beyond the
// available bytes or the caps, undeclared pools, impure results; a
// sampler's answer outside its row's candidates or a moved I/O region; a
// malformed descriptor.
type ContractError struct {
	Plugin string
	Call   string
	Detail string
}

func (e *ContractError) Error() string {
	return fmt.Sprintf("plugin: %s: %s refused: %s", e.Plugin, e.Call, e.Detail)
}

// GuestError is an error the plugin itself reported (a negative status,
// with a configurator's kvhost_last_error text), e.g. a model config it
// cannot handle. A configurator's instance stays usable; a sampler step
// that fails this way is discarded like any other.
type GuestError struct {
	Plugin string
	Call   string
	Status int32
	Msg    string
}

func (e *GuestError) Error() string {
	if e.Status == sdk.StatusDeclined {
		return fmt.Sprintf("plugin: %s: %s declined the model: %s", e.Plugin, e.Call, e.Msg)
	}
	return fmt.Sprintf("plugin: %s: %s failed (status %d): %s", e.Plugin, e.Call, e.Status, e.Msg)
}

// Is makes a configure the plugin declined (sdk.StatusDeclined) match
// sdk.ErrDeclined.
func (e *GuestError) Is(target error) bool {
	return target == sdk.ErrDeclined && e.Status == sdk.StatusDeclined
}

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return strings.TrimSpace(s[:i])
	}
	return s
}

// guestReason picks the guest runtime's own diagnosis out of its stderr.
func guestReason(stderr string) string {
	for _, line := range strings.Split(stderr, "\n") {
		line = strings.TrimSpace(line)
		if strings.HasPrefix(line, "panic:") || strings.HasPrefix(line, "fatal error:") || strings.HasPrefix(line, "runtime:") {
			if len(line) > 200 {
				line = line[:200] + "…"
			}
			return line
		}
	}
	return ""
}
