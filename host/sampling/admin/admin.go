// Package admin serves the sampler administration routes the server
// mounts under /admin/samplers:
//
//	PUT    /admin/samplers/{name}  body: the .wasm (at most MaxBytes) → 200 with the new Info
//	DELETE /admin/samplers/{name}  → 204 (409 for the default policy)
//	GET    /admin/samplers         → 200 with []sampling.Info
//
// Invariants: every route needs "Authorization: Bearer <key>", compared in
// constant time; with no key configured the routes are disabled (404
// "admin API disabled"), never open. Names are validated before use
// (sampler.ValidName: no '/', no "..", no path at all). An upload whose
// sha256 the allow-list does not permit (sampling.Options.AllowSHA256)
// answers 403 with the reason, naming the plugin and its sha256; any other
// refused upload 422 with the reason. Either leaves the serving version
// untouched.
package admin

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/go-chi/chi/v5"
	"github.com/kvhost/kvhost/host/plugin"
	"github.com/kvhost/kvhost/host/plugin/allowlist"
	"github.com/kvhost/kvhost/host/sampling"
	"github.com/kvhost/kvhost/sdk/sampler"
)

// DefaultMaxBytes bounds an uploaded module: the plugin runtime's module
// size limit, the same cap the plugins folder is read with (16 MiB: Go
// guests are ~2–4 MB, C ones ~20 KB).
const DefaultMaxBytes = plugin.DefaultMaxModuleBytes

// Registry is what the routes need from *sampling.Registry.
type Registry interface {
	Swap(ctx context.Context, name string, wasm []byte, source string) error
	Remove(name string) error
	List() []sampling.Info
}

var _ Registry = (*sampling.Registry)(nil)

// Handler returns the routes. key "" disables them; maxBytes 0 means
// DefaultMaxBytes. Mount it at the server root (its paths are absolute).
func Handler(reg Registry, key string, maxBytes int64) http.Handler {
	if maxBytes <= 0 {
		maxBytes = DefaultMaxBytes
	}
	r := chi.NewRouter()
	r.Use(RequireKey(key))
	r.Get("/admin/samplers", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, reg.List())
	})
	r.Put("/admin/samplers/{name}", func(w http.ResponseWriter, req *http.Request) {
		name := chi.URLParam(req, "name")
		if !sampler.ValidName(name) {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("invalid sampler name %q: lowercase letters, digits, '.', '_' and '-' only", name))
			return
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, req.Body, maxBytes))
		if err != nil {
			var mb *http.MaxBytesError
			if errors.As(err, &mb) {
				writeError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("module over %d bytes", maxBytes))
				return
			}
			writeError(w, http.StatusBadRequest, "reading body: "+err.Error())
			return
		}
		if err := reg.Swap(req.Context(), name, body, sampling.SourceUpload); err != nil {
			if errors.Is(err, allowlist.ErrNotAllowed) {
				writeError(w, http.StatusForbidden, err.Error())
				return
			}
			writeError(w, http.StatusUnprocessableEntity, err.Error())
			return
		}
		for _, info := range reg.List() {
			if info.Name == name {
				writeJSON(w, http.StatusOK, info)
				return
			}
		}
		writeError(w, http.StatusConflict, "sampler removed concurrently")
	})
	r.Delete("/admin/samplers/{name}", func(w http.ResponseWriter, req *http.Request) {
		name := chi.URLParam(req, "name")
		if !sampler.ValidName(name) {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("invalid sampler name %q", name))
			return
		}
		if err := reg.Remove(name); err != nil {
			if errors.Is(err, sampling.ErrUnknownPolicy) {
				writeError(w, http.StatusNotFound, err.Error())
				return
			}
			if errors.Is(err, sampling.ErrDefaultPolicy) {
				writeError(w, http.StatusConflict, err.Error())
				return
			}
			writeError(w, http.StatusInternalServerError, err.Error())
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	return r
}

// RequireKey requires the admin bearer key; without a configured key
// every request is refused as if the routes did not exist. The other admin
// routes (the prefix cache's reset) are guarded by it too.
func RequireKey(key string) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			if key == "" {
				writeError(w, http.StatusNotFound, "admin API disabled (start the server with --admin-key or --admin-key-file)")
				return
			}
			got, ok := strings.CutPrefix(req.Header.Get("Authorization"), "Bearer ")
			if !ok || subtle.ConstantTimeCompare([]byte(got), []byte(key)) != 1 {
				w.Header().Set("WWW-Authenticate", `Bearer realm="kvhost admin"`)
				writeError(w, http.StatusUnauthorized, "missing or wrong bearer key")
				return
			}
			next.ServeHTTP(w, req)
		})
	}
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, map[string]any{"error": map[string]any{"message": msg, "code": code}})
}
