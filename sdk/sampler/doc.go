// Package sampler is the shared contract of kvhost's sampling-policy
// plugins (sampler ABI version 1, ../SAMPLER_ABI.md): the descriptor a
// plugin's kvhost_describe returns, the layout of the I/O region it
// allocates once in kvhost_sampler_init, the host pre-ops a policy may ask
// for with their parameters, and the counter-based random stream guests
// and host share. The C SDK is c/kvhost_sampler.h; the Go guest library is
// package guest.
//
// Invariants: a Descriptor that passes Validate has a unique, bounded
// parameter schema whose defaults lie in range, at most MaxCandidates
// candidates, and no parameter that shadows a host pre-op's parameter.
// Rand(seed, step, 0) is bit-identical to the C kvhost_rand and to
// host/sampling.Rand.
package sampler
