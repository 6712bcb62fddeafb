package server

import (
	"context"
	"errors"
	"net/http"

	"github.com/kvhost/kvhost/host/engine"
	"github.com/kvhost/kvhost/host/kv/radix"
)

// PrefixCacheResetter empties the engine's prefix cache
// (engine.Engine.ResetPrefixCache).
type PrefixCacheResetter interface {
	ResetPrefixCache(ctx context.Context) error
}

var _ PrefixCacheResetter = (*engine.Engine)(nil)

// ResetRoutes are the paths ResetPrefixCacheHandler answers POST on:
// vLLM's name and SGLang's.
var ResetRoutes = []string{"/admin/reset_prefix_cache", "/admin/flush_cache"}

// ResetPrefixCacheHandler answers POST on ResetRoutes (mounted under
// /admin, behind the admin key, by the caller): it empties the prefix
// cache, returning every page it alone holds to the pools (KV-event
// subscribers hear AllBlocksCleared before the answer), and says 200
// {"status":"ok"}. While running requests hold cached prefixes it changes
// nothing and answers 409 (SGLang's flush also refuses while requests
// run); with the cache off (--disable-radix-cache, or a model with
// recurrent state) 400; while shutting down 503.
func ResetPrefixCacheHandler(r PrefixCacheResetter) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			writeAPIError(w, http.StatusMethodNotAllowed, apiError{Message: "method " + req.Method + " not allowed on " + req.URL.Path + ": POST resets the prefix cache", Type: "invalid_request_error", Code: "method_not_allowed"})
			return
		}
		err := r.ResetPrefixCache(req.Context())
		switch {
		case err == nil:
			writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
		case errors.Is(err, radix.ErrLocked):
			writeAPIError(w, http.StatusConflict, apiError{Message: "the prefix cache was not reset: running requests hold cached prefixes (" + err.Error() + "); retry when they finish", Type: "invalid_request_error", Code: "prefix_cache_in_use"})
		case errors.Is(err, engine.ErrNoPrefixCache):
			writeAPIError(w, http.StatusBadRequest, apiError{Message: err.Error() + " (--disable-radix-cache, or a model with recurrent state): nothing to reset", Type: "invalid_request_error", Code: "prefix_cache_off"})
		default:
			writeAPIError(w, http.StatusServiceUnavailable, apiError{Message: "the prefix cache was not reset: " + err.Error(), Type: "server_error", Code: "unavailable"})
		}
	})
}
