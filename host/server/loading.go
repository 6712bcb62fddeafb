package server

import (
	"fmt"
	"net/http"
	"sync/atomic"
)

// Gate is the handler a listener serves from its first second, before the
// model is loaded: kvhost binds its port first (so a busy port fails at
// once, not after minutes of loading) and answers every request with 503
// "loading" — /health and /ready included, so probes and load balancers
// wait — until Open hands it the real handler. The phase ("downloading
// model", "loading model") is in the message.
type Gate struct {
	next  atomic.Pointer[http.Handler]
	phase atomic.Pointer[string]
}

// NewGate returns a gate in phase "starting".
func NewGate() *Gate {
	g := &Gate{}
	g.SetPhase("starting")
	return g
}

// SetPhase says what startup is doing now.
func (g *Gate) SetPhase(p string) { g.phase.Store(&p) }

// Open routes every later request to h.
func (g *Gate) Open(h http.Handler) { g.next.Store(&h) }

// ServeHTTP implements http.Handler.
func (g *Gate) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if h := g.next.Load(); h != nil {
		(*h).ServeHTTP(w, r)
		return
	}
	// The same id rule as the served routes (requestIDs), so a client or a
	// gateway that correlates by id can follow its 503s too.
	w.Header().Set(RequestIDHeader, incomingID(r))
	w.Header().Set("Retry-After", "5")
	writeAPIError(w, http.StatusServiceUnavailable, apiError{
		Message: fmt.Sprintf("the server is starting (%s); retry shortly", *g.phase.Load()),
		Type:    "service_unavailable", Code: "loading",
	})
}

// handleReady serves GET /ready, the readiness probe: 200 while the server
// admits requests, 503 while it drains or the backend's HealthChecker
// fails (and, through Gate, while the model loads). /health is the
// liveness probe.
func (s *server) handleReady(w http.ResponseWriter, r *http.Request) {
	s.handleHealth(w, r)
}
