package server

import (
	"fmt"
	"net/http"
	"net/url"

	"github.com/rs/cors"
)

// validOrigins checks Options.AllowedOrigins: "*" or scheme://host[:port]
// with nothing after it, as browsers send in the Origin header.
func validOrigins(origins []string) error {
	for i, o := range origins {
		if o == "*" {
			continue
		}
		u, err := url.Parse(o)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.User != nil {
			return fmt.Errorf("server: allowed_origins[%d] %q must be \"*\" or an origin like https://app.example.com (scheme, host, optional port)", i, o)
		}
	}
	return nil
}

// corsMiddleware answers preflight requests and adds the CORS headers
// browsers need to call the API from the allowed origins (rs/cors). It is
// installed only when Options.AllowedOrigins is not empty: by default a
// page on another origin cannot read kvhost's responses. Credentials
// (cookies) are never allowed; bearer keys travel in Authorization, which
// the preflight allows.
func corsMiddleware(origins []string) func(http.Handler) http.Handler {
	c := cors.New(cors.Options{
		AllowedOrigins: origins,
		AllowedMethods: []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodDelete, http.MethodOptions},
		AllowedHeaders: []string{"*"},
		ExposedHeaders: []string{RequestIDHeader},
		MaxAge:         600,
	})
	return c.Handler
}
