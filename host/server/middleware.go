package server

import (
	"fmt"
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

// logRequests logs one line per request: method, path, status, duration and
// response size. It logs no headers at all, so credentials (Authorization,
// cookies) never reach the log; nor query strings, which may carry keys.
func (s *server) logRequests(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rec := &statusRecorder{ResponseWriter: w}
		next.ServeHTTP(rec, r)
		status := rec.status
		if status == 0 {
			status = http.StatusOK
		}
		s.log.Info("http request",
			"method", r.Method,
			"path", r.URL.Path,
			"status", status,
			"duration", time.Since(start),
			"bytes", rec.bytes,
		)
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
			s.log.Error("handler panicked", "method", r.Method, "path", r.URL.Path,
				"panic", fmt.Sprint(v), "stack", string(debug.Stack()))
			writeAPIError(w, http.StatusInternalServerError, apiError{
				Message: "internal server error", Type: "server_error", Code: "internal_error",
			})
		}()
		next.ServeHTTP(w, r)
	})
}
