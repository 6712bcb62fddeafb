package server

import (
	"context"
	"fmt"
	"net/http"
	"time"
)

// HealthChecker is an optional Backend capability: when implemented, GET
// /health and GET /ready answer 503 while Health returns an error
// (loading, draining).
type HealthChecker interface {
	Health(ctx context.Context) error
}

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

// handleHealth is GET /health, the liveness probe: 200 {"status":"ok"},
// or 503 naming why — the engine stalled with work pending (it will not
// recover by itself), or the server draining (so load balancers that poll
// /health stop routing here).
func (s *server) handleHealth(w http.ResponseWriter, r *http.Request) {
	if e, bad := s.unhealthy(r.Context()); bad {
		writeAPIError(w, http.StatusServiceUnavailable, e)
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

// handleReady is GET /ready, the readiness probe: 200 {"status":"ready"}
// when requests sent now would be served, else 503 with the reason
// (draining, engine stalled, backend not ready).
func (s *server) handleReady(w http.ResponseWriter, r *http.Request) {
	if e, bad := s.unhealthy(r.Context()); bad {
		writeAPIError(w, http.StatusServiceUnavailable, e)
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
}
