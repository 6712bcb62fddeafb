package sampling

import (
	"errors"
	"fmt"
	"time"

	"github.com/kvhost/kvhost/host/plugin"
)

// DefaultDisableAfter is how many consecutive failed steps disable a
// policy when Options.DisableAfter is 0.
const DefaultDisableAfter = 3

// ErrHostFallback matches (errors.Is) SampleBatch's answer when no plugin
// policy can serve the rows: the engine chooses their tokens with its
// host-native Sampler (the request's temperature, top-k, top-p, min-p)
// instead of failing them. *PolicyDisabledError and *StepFailedError
// match it.
var ErrHostFallback = errors.New("sampling: no plugin policy can serve the rows; use the host sampler")

// ErrPolicyDisabled matches (errors.Is) a *PolicyDisabledError.
var ErrPolicyDisabled = errors.New("sampling: sampler disabled")

// PolicyDisabledError is SampleBatch's answer for a policy that was
// disabled after repeated failures when the default policy cannot take
// over (it is the policy itself, is disabled too, or is not loaded). rows,
// seqs and out are untouched.
type PolicyDisabledError struct {
	Policy     string
	Version    string // of the disabled version
	Failures   int64  // consecutive failed steps that disabled it
	DisabledAt time.Time
	LastErr    error // the failure that disabled it
}

func (e *PolicyDisabledError) Error() string {
	return fmt.Sprintf("sampling: sampler %q (version %s) disabled at %s after %d consecutive failed steps (last: %v); no plugin policy can take over, use the host sampler",
		e.Policy, e.Version, e.DisabledAt.Format(time.RFC3339), e.Failures, e.LastErr)
}

func (e *PolicyDisabledError) Unwrap() error { return e.LastErr }

// Is makes errors.Is(err, ErrPolicyDisabled) and ErrHostFallback hold.
func (e *PolicyDisabledError) Is(target error) bool {
	return target == ErrPolicyDisabled || target == ErrHostFallback
}

// StepFailedError is SampleBatch's answer when a step of the policy failed
// (a trap, a spent fuel budget or deadline, a broken contract) and the
// default policy could not serve its rows either (it is the policy, is
// disabled or not loaded, or failed too). The rows' outputs are untouched;
// errors.Is(err, ErrHostFallback) holds.
type StepFailedError struct {
	Policy string
	Err    error // the policy's failure (the default's, if it failed too, is joined)
}

func (e *StepFailedError) Error() string {
	return fmt.Sprintf("sampling: sampler %q failed a step and no plugin policy could take over, use the host sampler: %v", e.Policy, e.Err)
}

func (e *StepFailedError) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrHostFallback) hold.
func (e *StepFailedError) Is(target error) bool { return target == ErrHostFallback }

// ErrDefaultPolicy matches (errors.Is) a *DefaultPolicyError.
var ErrDefaultPolicy = errors.New("sampling: the default sampler cannot be removed")

// DefaultPolicyError refuses to remove the default policy: every request
// that names none needs it (HTTP 409).
type DefaultPolicyError struct{ Policy string }

func (e *DefaultPolicyError) Error() string {
	return fmt.Sprintf("sampling: sampler %q is the default policy (--sampler-default): requests that name no sampler use it, so it cannot be removed; upload a new version instead", e.Policy)
}

// Is makes errors.Is(err, ErrDefaultPolicy) hold.
func (e *DefaultPolicyError) Is(target error) bool { return target == ErrDefaultPolicy }

// failed records a failed step of g. The DisableAfter-th consecutive guest
// fault disables g (once: the error is allocated here, so a disabled
// policy's steps allocate nothing) and logs it.
func (r *Registry) failed(g *generation, err error) {
	if r.opts.DisableAfter < 0 || !plugin.IsGuestFault(err) {
		return
	}
	p := g.Value
	n := p.consecutive.Add(1)
	if n < int64(r.opts.DisableAfter) || p.disabled.Load() != nil {
		return
	}
	d := &PolicyDisabledError{Policy: p.mod.Name(), Version: p.version, Failures: n, DisabledAt: time.Now(), LastErr: err}
	if p.disabled.CompareAndSwap(nil, d) {
		r.log.Warn("sampler disabled after repeated failures; its sequences fall back to the default policy until a new version is swapped in",
			"policy", d.Policy, "version", d.Version, "failures", n, "last_error", firstLine(err), "default", r.opts.Default)
	}
}

// succeeded ends a run of failures.
func succeeded(g *generation) {
	if g.Value.consecutive.Load() != 0 {
		g.Value.consecutive.Store(0)
	}
}

// fallback returns the generation (and its entry) of the default policy,
// to serve rows the policy cannot: when it is another policy, loaded and
// enabled; else nil.
func (r *Registry) fallback(policy string) (*entry, *generation) {
	if policy == r.opts.Default {
		return nil, nil
	}
	de := (*r.policies.Load())[r.opts.Default]
	if de == nil {
		return nil, nil
	}
	dg := de.acquire()
	if dg == nil {
		return nil, nil
	}
	if dg.Value.disabled.Load() != nil {
		dg.Release()
		return nil, nil
	}
	return de, dg
}

// firstLine is an error's first line (not wazero's stack trace).
func firstLine(err error) string {
	s := err.Error()
	for i := 0; i < len(s); i++ {
		if s[i] == '\n' {
			return s[:i]
		}
	}
	return s
}
