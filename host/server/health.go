package server

import (
	"context"
	"fmt"
	"net/http"
	"time"
)

// Liveness is an optional Backend capability: Stalled returns an error
// while the engine has work but has not completed a step for longer than
// threshold (Options.StallThreshold) — a forward or a plugin call that does
// not return. GET /health and GET /ready then answer 503 with code
// "engine_stalled" and the error's text.
type Liveness interface {
	Stalled(threshold time.Duration) error
}

// unhealthy is the first reason the server should not be sent traffic:
// draining, an engine stalled with work pending, or a backend that reports
// itself not ready.
func (s *server) unhealthy(ctx context.Context) (apiError, bool) {
	if reason := s.drained.Load(); reason != nil {
		return drainError(*reason), true
	}
	if lv, ok := s.b.(Liveness); ok {
		if err := lv.Stalled(s.opts.StallThreshold); err != nil {
			return apiError{Message: err.Error(), Type: "service_unavailable", Code: "engine_stalled"}, true
		}
	}
	if hc, ok := s.b.(HealthChecker); ok {
		if err := hc.Health(ctx); err != nil {
			return apiError{Message: fmt.Sprintf("not ready: %v", err), Type: "service_unavailable", Code: "not_ready"}, true
		}
	}
	return apiError{}, false
}

// handleHealth is GET /health, the liveness probe, and (through
// handleReady) GET /ready: 200 {"status":"ok"}, or 503 naming why — the
// engine stalled with work pending (it will not recover by itself), the
// server draining (so load balancers that poll /health stop routing here),
// or the backend's HealthChecker failing.
func (s *server) handleHealth(w http.ResponseWriter, r *http.Request) {
	if e, bad := s.unhealthy(r.Context()); bad {
		writeAPIError(w, http.StatusServiceUnavailable, e)
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}
