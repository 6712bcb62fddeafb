package server

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/kvhost/kvhost/host/engine"
	"github.com/kvhost/kvhost/host/kv/radix"
)

type resetFunc func(context.Context) error

func (f resetFunc) ResetPrefixCache(ctx context.Context) error { return f(ctx) }

// TestResetPrefixCacheHandler: each answer of the engine maps to one
// status and error code; only POST resets.
func TestResetPrefixCacheHandler(t *testing.T) {
	for _, tc := range []struct {
		method string
		err    error
		status int
		code   string
	}{
		{http.MethodPost, nil, 200, ""},
		{http.MethodPost, fmt.Errorf("engine: %w", fmt.Errorf("%w: 2 holds", radix.ErrLocked)), 409, "prefix_cache_in_use"},
		{http.MethodPost, engine.ErrNoPrefixCache, 400, "prefix_cache_off"},
		{http.MethodPost, engine.ErrShuttingDown, 503, "unavailable"},
		{http.MethodGet, nil, 405, "method_not_allowed"},
	} {
		calls := 0
		h := ResetPrefixCacheHandler(resetFunc(func(context.Context) error { calls++; return tc.err }))
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(tc.method, ResetRoutes[0], nil))
		if rec.Code != tc.status || !strings.Contains(rec.Body.String(), tc.code) {
			t.Errorf("%s with %v: %d %s, want %d %q", tc.method, tc.err, rec.Code, rec.Body, tc.status, tc.code)
		}
		if want := map[bool]int{true: 1, false: 0}[tc.method == http.MethodPost]; calls != want {
			t.Errorf("%s: the engine was asked %d times, want %d", tc.method, calls, want)
		}
		if tc.err == nil && tc.status == 200 && !strings.Contains(rec.Body.String(), `"status":"ok"`) {
			t.Errorf("body %s", rec.Body)
		}
	}
}
