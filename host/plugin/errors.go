package plugin

import (
	"context"
	"fmt"
	"strings"
	"time"
)

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

// DeadlineError reports a call stopped by its deadline; it wraps
// context.DeadlineExceeded. The instance was discarded.
type DeadlineError struct {
	Plugin  string
	Call    string
	Timeout time.Duration
}

func (e *DeadlineError) Error() string {
	return fmt.Sprintf("plugin: %s: %s did not return within its %v deadline and was stopped", e.Plugin, e.Call, e.Timeout)
}

func (e *DeadlineError) Unwrap() error { return context.DeadlineExceeded }

// ContractError reports a plugin that broke the configurator contract:
// declarations that do not add up, units beyond the available bytes or the
// caps, undeclared pools, impure results, malformed descriptors.
type ContractError struct {
	Plugin string
	Call   string
	Detail string
}

func (e *ContractError) Error() string {
	return fmt.Sprintf("plugin: %s: %s refused: %s", e.Plugin, e.Call, e.Detail)
}

// GuestError is an error the plugin itself reported (a negative status with
// its kvhost_last_error text), e.g. a model config it cannot handle. The
// instance stays usable.
type GuestError struct {
	Plugin string
	Call   string
	Status int32
	Msg    string
}

func (e *GuestError) Error() string {
	return fmt.Sprintf("plugin: %s: %s failed (status %d): %s", e.Plugin, e.Call, e.Status, e.Msg)
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
