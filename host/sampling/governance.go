package sampling

import (
	"errors"
	"fmt"
	"time"

	"github.com/kvhost/kvhost/host/sampling/wasmrt"
)

// DefaultDisableAfter is how many consecutive failed steps disable a
// policy when Options.DisableAfter is 0.
const DefaultDisableAfter = 3

// ErrPolicyDisabled matches (errors.Is) a *PolicyDisabledError: no plugin
// policy can serve the rows, and the engine should choose their tokens
// with its host-native Sampler (the request's temperature, top-k, top-p,
// min-p) instead of failing them.
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

// Is makes errors.Is(err, ErrPolicyDisabled) hold.
func (e *PolicyDisabledError) Is(target error) bool { return target == ErrPolicyDisabled }

// guestFault reports whether err is the plugin's fault (a failed step or
// an instance that could not be made), as opposed to a cancelled context
// or bad input from the caller; only guest faults count towards
// disabling a policy.
func guestFault(err error) bool {
	var se *wasmrt.StepError
	var re *wasmrt.RefusedError
	return errors.As(err, &se) || errors.As(err, &re)
}

// failed records a failed step of g. The DisableAfter-th consecutive guest
// fault disables g (once: the error is allocated here, so a disabled
// policy's steps allocate nothing) and logs it.
func (r *Registry) failed(g *generation, err error) {
	if r.opts.DisableAfter < 0 || !guestFault(err) {
		return
	}
	n := g.consecutive.Add(1)
	if n < int64(r.opts.DisableAfter) || g.disabled.Load() != nil {
		return
	}
	d := &PolicyDisabledError{Policy: g.mod.Name(), Version: g.version, Failures: n, DisabledAt: time.Now(), LastErr: err}
	if g.disabled.CompareAndSwap(nil, d) {
		r.log.Warn("sampler disabled after repeated failures; its sequences fall back to the default policy until a new version is swapped in",
			"policy", d.Policy, "version", d.Version, "failures", n, "last_error", err.Error(), "default", r.opts.Default)
	}
}

// succeeded ends a run of failures.
func (g *generation) succeeded() {
	if g.consecutive.Load() != 0 {
		g.consecutive.Store(0)
	}
}

// fallback returns the generation (and its entry) that serves the rows of
// a disabled policy: the default, if it is another policy and enabled;
// else nil and the error to return. g's reference is released.
func (r *Registry) fallback(policy string, e *entry, g *generation, rows int) (*entry, *generation, error) {
	d := g.disabled.Load()
	g.release()
	e.fallbacks.Add(int64(rows))
	if policy != r.opts.Default {
		if de := (*r.policies.Load())[r.opts.Default]; de != nil {
			if dg := de.acquire(); dg != nil {
				if dg.disabled.Load() == nil {
					return de, dg, nil
				}
				dg.release()
			}
		}
	}
	return nil, nil, d
}
