package server

import (
	"net/http"
	"time"
)

// Timeouts of the http.Server NewHTTPServer builds.
const (
	// readHeaderTimeout bounds the request line and headers: a slow-loris
	// client that trickles headers is dropped after it.
	readHeaderTimeout = 10 * time.Second
	// readTimeout bounds reading the whole request, body included.
	readTimeout = 60 * time.Second
	// idleTimeout closes keep-alive connections idle this long.
	idleTimeout = 120 * time.Second
	// maxHeaderBytes bounds the request headers.
	maxHeaderBytes = 64 << 10
)

// NewHTTPServer returns the http.Server to serve h on addr, with timeouts
// that stop slow or idle clients from holding connections:
// ReadHeaderTimeout (slow-loris headers), ReadTimeout (the body) and
// IdleTimeout (keep-alive), plus a bound on header size.
//
// It sets no WriteTimeout on purpose: net/http's WriteTimeout is one deadline
// for the whole response, measured from the end of the request headers, so
// it would cut every SSE stream (and every long non-streaming generation) at
// that age no matter how healthy the client. The handler instead extends the
// connection's write deadline before each write (Options.StreamWriteTimeout,
// via http.ResponseController), which drops only clients that stop reading.
// For the same reason the handler clears the read deadline once it has read
// a body: net/http keeps reading the connection in the background to notice
// a client that hangs up, and that read failing at ReadTimeout would cancel
// the request's context mid-generation.
func NewHTTPServer(h http.Handler, addr string) *http.Server {
	return &http.Server{
		Addr:              addr,
		Handler:           h,
		ReadHeaderTimeout: readHeaderTimeout,
		ReadTimeout:       readTimeout,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
	}
}
