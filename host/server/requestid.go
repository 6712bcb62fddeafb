package server

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"net/http"
)

// RequestIDHeader carries a request's id: taken from the client when it
// sends a usable one (a proxy's or gateway's), generated otherwise, and
// echoed on the response either way.
const RequestIDHeader = "X-Request-Id"

// maxRequestIDLen bounds an accepted client id; longer ones are replaced.
const maxRequestIDLen = 128

type requestMetaKey struct{}

// requestMeta travels in every request's context: its id and the logger
// that stamps every line of the request with it.
type requestMeta struct {
	id  string
	log *slog.Logger
}

func metaOf(ctx context.Context) *requestMeta {
	m, _ := ctx.Value(requestMetaKey{}).(*requestMeta)
	return m
}

// RequestID is the id of the request ctx belongs to ("" outside one).
func RequestID(ctx context.Context) string {
	if m := metaOf(ctx); m != nil {
		return m.id
	}
	return ""
}

// logFor is the logger of r: the server's, with request_id.
func (s *server) logFor(r *http.Request) *slog.Logger {
	if m := metaOf(r.Context()); m != nil {
		return m.log
	}
	return s.log
}

// validRequestID accepts visible ASCII without quotes or backslashes, so an
// id can be logged and echoed as is.
func validRequestID(id string) bool {
	if id == "" || len(id) > maxRequestIDLen {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if c <= ' ' || c > '~' || c == '"' || c == '\\' {
			return false
		}
	}
	return true
}

func newRequestID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// incomingID is the client's id when usable, else a fresh one.
func incomingID(r *http.Request) string {
	if id := r.Header.Get(RequestIDHeader); validRequestID(id) {
		return id
	}
	return newRequestID()
}

// requestIDs gives every request an id and a logger carrying it, and sets
// the response header before anything is written.
func (s *server) requestIDs(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := incomingID(r)
		w.Header().Set(RequestIDHeader, id)
		m := &requestMeta{id: id, log: s.log.With("request_id", id)}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), requestMetaKey{}, m)))
	})
}
