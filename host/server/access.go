package server

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/kvhost/kvhost/web"
)

// reqInfo travels in an inference request's context: the route (for the
// Observer) and when the request started (for time to first token).
type reqInfo struct {
	route string
	start time.Time
	kind  string // the last error kind observed (ErrKind*), "" if none
}

type reqInfoKey struct{}

func infoOf(ctx context.Context) *reqInfo {
	if ri, ok := ctx.Value(reqInfoKey{}).(*reqInfo); ok {
		return ri
	}
	return nil
}

// inference wraps an inference route's handler: observe it, check the API
// key, refuse it while draining, and count it as in flight. Call it while
// building the router only: it records route as checking its own key.
func (s *server) inference(route string, h http.HandlerFunc) http.HandlerFunc {
	s.selfChecked[route] = true
	return func(w http.ResponseWriter, r *http.Request) {
		ri := &reqInfo{route: route, start: time.Now()}
		r = r.WithContext(context.WithValue(r.Context(), reqInfoKey{}, ri))
		obs := s.opts.Observer
		rec := &statusRecorder{ResponseWriter: w}
		if obs != nil {
			obs.RequestStart(route)
			defer func() {
				status := rec.status
				if status == 0 {
					status = http.StatusOK
				}
				obs.RequestEnd(route, status, time.Since(ri.start))
				if d, ok := obs.(ErrorDetailObserver); ok && ri.kind != "" {
					d.ErrorDetail(route, ri.kind, status, rec.reason, RequestID(r.Context()))
				}
			}()
		}
		if !s.checkKey(rec, r) {
			return
		}
		if reason := s.drained.Load(); reason != nil {
			s.observeError(r, ErrKindDraining)
			rec.Header().Set("Connection", "close")
			writeAPIError(rec, http.StatusServiceUnavailable, drainError(*reason))
			return
		}
		s.inFlight.Add(1)
		defer s.inFlight.Add(-1)
		h(rec, r)
	}
}

func drainError(reason string) apiError {
	msg := "the server is draining and admits no new requests"
	if reason != "" {
		msg += ": " + reason
	}
	return apiError{Message: msg, Type: "service_unavailable", Code: "draining"}
}

// requireKey is checkKey for every request but the open ones (isOpen):
// deny by default, so a route added later needs the key unless it is
// listed there. Inference routes check the key themselves (s.inference),
// so the Observer sees their 401s.
func (s *server) requireKey(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if len(s.keys) == 0 || s.selfChecked[r.URL.Path] || isOpen(r) || s.publicMetrics(r) || s.checkKey(w, r) {
			next.ServeHTTP(w, r)
		}
	})
}

// publicMetrics reports a scrape of /metrics that Options.PublicMetrics
// lets through without the key.
func (s *server) publicMetrics(r *http.Request) bool {
	return s.opts.PublicMetrics && r.URL.Path == "/metrics" && (r.Method == http.MethodGet || r.Method == http.MethodHead)
}

// isOpen reports a request that needs no API key: the liveness and
// readiness probes, the admin routes (guarded by the admin key instead),
// a CORS preflight (which carries no credentials by design and changes
// nothing), and GET or HEAD of the dashboard's static shell (web.IsStatic:
// embedded files only, no data). Everything else — /v1/..., /generate,
// /metrics, the dashboard's JSON under /ui/api/, unknown paths — needs
// the key.
func isOpen(r *http.Request) bool {
	p := r.URL.Path
	switch {
	case p == "/health" || p == "/ready":
		return true
	case p == "/admin" || strings.HasPrefix(p, "/admin/"):
		return true
	case r.Method == http.MethodOptions && r.Header.Get("Origin") != "" && r.Header.Get("Access-Control-Request-Method") != "":
		return true
	case r.Method == http.MethodGet || r.Method == http.MethodHead:
		return web.IsStatic(p)
	}
	return false
}

// checkKey answers 401 and returns false unless API keys are off or the
// request carries one of them as a bearer token. The comparison hashes the
// presented key and compares the digests with every configured key in
// constant time, so neither the key's content nor its length nor which key
// matched shows in the timing. The key is never logged.
func (s *server) checkKey(w http.ResponseWriter, r *http.Request) bool {
	if len(s.keys) == 0 {
		return true
	}
	token, ok := bearer(r.Header.Get("Authorization"))
	if ok {
		sum := sha256.Sum256([]byte(token))
		match := 0
		for i := range s.keys {
			match |= subtle.ConstantTimeCompare(sum[:], s.keys[i][:])
		}
		if match == 1 {
			return true
		}
	}
	msg := "a valid API key is required: send it as \"Authorization: Bearer <key>\""
	if ok {
		msg = "incorrect API key provided"
	}
	s.observeError(r, ErrKindUnauthorized)
	w.Header().Set("WWW-Authenticate", `Bearer realm="kvhost"`)
	writeAPIError(w, http.StatusUnauthorized, apiError{Message: msg, Type: "invalid_request_error", Code: "invalid_api_key"})
	return false
}

// bearer extracts the token of an "Authorization: Bearer <token>" header
// (the scheme is case-insensitive).
func bearer(h string) (string, bool) {
	scheme, token, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	token = strings.TrimSpace(token)
	return token, token != ""
}

// observeError reports an error of an inference request to the Observer.
func (s *server) observeError(r *http.Request, kind string) {
	if s.opts.Observer == nil {
		return
	}
	if ri := infoOf(r.Context()); ri != nil {
		ri.kind = kind
		s.opts.Observer.Error(ri.route, kind)
	}
}

// errorKind classifies a mapped error response for the Observer.
func errorKind(status int, body apiError) string {
	switch status {
	case http.StatusBadRequest:
		return ErrKindInvalidRequest
	case http.StatusUnauthorized:
		return ErrKindUnauthorized
	case http.StatusRequestEntityTooLarge:
		return ErrKindTooLarge
	case http.StatusTooManyRequests:
		return ErrKindQueueFull
	case http.StatusServiceUnavailable:
		if body.Code == "draining" {
			return ErrKindDraining
		}
		return ErrKindShuttingDown
	}
	if status >= 500 {
		return ErrKindInternal
	}
	return fmt.Sprintf("status_%d", status)
}
