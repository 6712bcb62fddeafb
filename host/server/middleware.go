package server

import (
	"fmt"
	"log/slog"
	"net/http"
	"runtime/debug"
	"time"
)

// statusRecorder remembers the status and size of a response. It exposes the
// wrapped writer through Unwrap so http.ResponseController can still flush
// SSE chunks through it.
type statusRecorder struct {
	http.ResponseWriter
	status int
	bytes  int64
	reason string // an error response's message (writeAPIError notes it)
}

func (w *statusRecorder) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusRecorder) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	n, err := w.ResponseWriter.Write(b)
	w.bytes += int64(n)
	return n, err
}

func (w *statusRecorder) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// noteReason records an error response's message on every statusRecorder
// in w's wrapper chain, for the access log line.
func noteReason(w http.ResponseWriter, reason string) {
	for w != nil {
		if rec, ok := w.(*statusRecorder); ok {
			rec.reason = reason
		}
		u, ok := w.(interface{ Unwrap() http.ResponseWriter })
		if !ok {
			return
		}
		w = u.Unwrap()
	}
}

// logRequests logs one line per request: method, path, status, duration,
// response size and the request id (the logger carries it); a 4xx is logged
// at warn and a 5xx at error, each with the reason the client was given. It
// logs no headers at all, so credentials (Authorization, cookies) never
// reach the log; nor query strings, which may carry keys.
func (s *server) logRequests(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rec := &statusRecorder{ResponseWriter: w}
		next.ServeHTTP(rec, r)
		status := rec.status
		if status == 0 {
			status = http.StatusOK
		}
		attrs := []any{
			"method", r.Method,
			"path", r.URL.Path,
			"status", status,
			"duration", time.Since(start),
			"bytes", rec.bytes,
		}
		level := slog.LevelInfo
		switch {
		case status >= 500:
			level = slog.LevelError
		case status >= 400:
			level = slog.LevelWarn
		}
		if rec.reason != "" {
			attrs = append(attrs, "reason", rec.reason)
		}
		s.logFor(r).Log(r.Context(), level, "http request", attrs...)
	})
}

// recoverPanics turns a handler panic into a logged 500 with the OpenAI
// error body, instead of a dropped connection. http.ErrAbortHandler keeps its
// meaning (abort silently).
func (s *server) recoverPanics(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			v := recover()
			if v == nil {
				return
			}
			if v == http.ErrAbortHandler {
				panic(v)
			}
			s.logFor(r).Error("handler panicked", "method", r.Method, "path", r.URL.Path,
				"panic", fmt.Sprint(v), "stack", string(debug.Stack()))
			writeAPIError(w, http.StatusInternalServerError, apiError{
				Message: "internal server error", Type: "server_error", Code: "internal_error",
			})
		}()
		next.ServeHTTP(w, r)
	})
}
