package web

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path"
	"regexp"
	"strings"
	"testing"

	"github.com/kvhost/kvhost/host/ledger"
)

func get(t *testing.T, h http.Handler, method, url string, hdr map[string]string) *http.Response {
	t.Helper()
	req := httptest.NewRequest(method, url, nil)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec.Result()
}

func body(t *testing.T, r *http.Response) string {
	t.Helper()
	b, err := io.ReadAll(r.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestAssetsServedWithTypes(t *testing.T) {
	h := Handler(Options{})
	tests := []struct {
		url, ctype, contains string
	}{
		{"/", "text/html; charset=utf-8", `<script type="module" src="/ui/js/app.js">`},
		{"/index.html", "text/html; charset=utf-8", "<title>kvhost</title>"},
		{"/ui/style.css", "text/css; charset=utf-8", ".card"},
		{"/ui/js/app.js", "text/javascript; charset=utf-8", "startMemory"},
		{"/ui/js/ledger.js", "text/javascript; charset=utf-8", "renderLedger"},
		{"/ui/vendor/chart.umd.min.js", "text/javascript; charset=utf-8", "Chart.js v4"},
		{"/ui/favicon.svg", "image/svg+xml", "<svg"},
	}
	for _, tc := range tests {
		t.Run(tc.url, func(t *testing.T) {
			r := get(t, h, "GET", tc.url, nil)
			if r.StatusCode != 200 {
				t.Fatalf("status %d", r.StatusCode)
			}
			if got := r.Header.Get("Content-Type"); got != tc.ctype {
				t.Fatalf("content type %q, want %q", got, tc.ctype)
			}
			if r.Header.Get("X-Content-Type-Options") != "nosniff" || r.Header.Get("Content-Security-Policy") == "" {
				t.Fatal("security headers missing")
			}
			if b := body(t, r); !strings.Contains(b, tc.contains) {
				t.Fatalf("body lacks %q", tc.contains)
			}
			// Revalidation with the ETag answers 304 with no body.
			r2 := get(t, h, "GET", tc.url, map[string]string{"If-None-Match": r.Header.Get("ETag")})
			if r2.StatusCode != http.StatusNotModified || body(t, r2) != "" {
				t.Fatalf("conditional GET: %d", r2.StatusCode)
			}
		})
	}
}

func TestAssetErrors(t *testing.T) {
	h := Handler(Options{})
	tests := []struct {
		method, url string
		status      int
	}{
		{"GET", "/nope", 404},
		{"GET", "/style.css", 404},        // files live under /ui/ only
		{"GET", "/ui/index.html", 404},    // the page is at /
		{"GET", "/ui/../index.html", 307}, // cleaned to /index.html, never outside static/
		{"GET", "/ui/vendor/chart.js.LICENSE.md", 200},
		{"POST", "/", 405},
		{"DELETE", "/ui/js/app.js", 405},
		{"HEAD", "/", 200},
	}
	for _, tc := range tests {
		t.Run(tc.method+tc.url, func(t *testing.T) {
			if r := get(t, h, tc.method, tc.url, nil); r.StatusCode != tc.status {
				t.Fatalf("status %d, want %d", r.StatusCode, tc.status)
			}
		})
	}
}

// TestModuleGraphIsEmbedded follows every import of every module and every
// src/href of index.html: a missing file would only show in a browser.
func TestModuleGraphIsEmbedded(t *testing.T) {
	h := Handler(Options{})
	imp := regexp.MustCompile(`(?m)^import .* from '(\./[^']+)';`)
	js, err := fs.Glob(Static(), "js/*.js")
	if err != nil || len(js) < 5 {
		t.Fatalf("modules: %v %v", js, err)
	}
	for _, f := range js {
		b, _ := fs.ReadFile(Static(), f)
		for _, m := range imp.FindAllStringSubmatch(string(b), -1) {
			url := "/ui/" + path.Join(path.Dir(f), m[1])
			if r := get(t, h, "GET", url, nil); r.StatusCode != 200 {
				t.Errorf("%s imports %s: %d", f, url, r.StatusCode)
			}
		}
	}
	idx, _ := fs.ReadFile(Static(), "index.html")
	ref := regexp.MustCompile(`(?:src|href)="(/[^"]+)"`)
	for _, m := range ref.FindAllStringSubmatch(string(idx), -1) {
		if r := get(t, h, "GET", m[1], nil); r.StatusCode != 200 {
			t.Errorf("index.html references %s: %d", m[1], r.StatusCode)
		}
	}
}

func decodeJSON(t *testing.T, r *http.Response, v any) {
	t.Helper()
	if ct := r.Header.Get("Content-Type"); ct != "application/json" {
		t.Fatalf("content type %q", ct)
	}
	if err := json.NewDecoder(r.Body).Decode(v); err != nil {
		t.Fatal(err)
	}
}

func errMessage(t *testing.T, r *http.Response) string {
	t.Helper()
	var e errorBody
	decodeJSON(t, r, &e)
	if e.Error.Message == "" || e.Error.Type == "" {
		t.Fatalf("error body without message/type: %+v", e)
	}
	return e.Error.Message
}

func TestAPIWithoutHooks(t *testing.T) {
	h := Handler(Options{})
	var cfg Config
	decodeJSON(t, get(t, h, "GET", "/ui/api/config", nil), &cfg)
	if cfg.Work || cfg.Plugins || cfg.Plan || cfg.PlanModels == nil || cfg.PlanGPUs == nil {
		t.Fatalf("config %+v", cfg)
	}
	for _, u := range []string{"/ui/api/work", "/ui/api/plugins", "/ui/api/plan?model=a&gpu=b", "/ui/api/unknown"} {
		r := get(t, h, "GET", u, nil)
		if r.StatusCode != 404 {
			t.Fatalf("%s: %d", u, r.StatusCode)
		}
		errMessage(t, r)
	}
	if r := get(t, h, "POST", "/ui/api/unknown", nil); r.StatusCode != 405 {
		t.Fatalf("POST: %d", r.StatusCode)
	}
}

func TestAPIHooks(t *testing.T) {
	var gotModel, gotGPU string
	h := Handler(Options{
		Work: func(ctx context.Context) (any, error) { return map[string]int{"running": 3}, nil },
		Plugins: func(ctx context.Context) ([]Plugin, error) {
			return []Plugin{{Kind: "sampler", Name: "typical", Version: "1.0.0", ABI: 1, Source: "builtin", SHA256: "ab", Calls: 7,
				Params: []Param{{Name: "tau", Type: "float", Min: 0, Max: 10, Default: 5}}}}, nil
		},
		Plan: func(ctx context.Context, m, g string) (any, error) {
			gotModel, gotGPU = m, g
			switch m {
			case "broken":
				return nil, errors.New("plan: config invalid")
			case "unknown-arch":
				return nil, fmt.Errorf("%w: no configurator for arch", ErrBadPlanRequest)
			}
			return map[string]any{"ledger": map[string]any{"phases": []any{}}}, nil
		},
		PlanModels: []string{"llama-3-8b", "broken", "unknown-arch"},
		PlanGPUs:   []string{"H100-80GB"},
	})
	var cfg Config
	decodeJSON(t, get(t, h, "GET", "/ui/api/config", nil), &cfg)
	if !cfg.Work || !cfg.Plugins || !cfg.Plan || len(cfg.PlanModels) != 3 || cfg.PlanGPUs[0] != "H100-80GB" {
		t.Fatalf("config %+v", cfg)
	}
	var w map[string]int
	decodeJSON(t, get(t, h, "GET", "/ui/api/work", nil), &w)
	if w["running"] != 3 {
		t.Fatalf("work %v", w)
	}
	var pl struct{ Plugins []Plugin }
	decodeJSON(t, get(t, h, "GET", "/ui/api/plugins", nil), &pl)
	if len(pl.Plugins) != 1 || pl.Plugins[0].Params[0].Name != "tau" || pl.Plugins[0].Calls != 7 {
		t.Fatalf("plugins %+v", pl)
	}
	tests := []struct {
		query  string
		status int
		msg    string
	}{
		{"model=llama-3-8b&gpu=H100-80GB", 200, ""},
		{"model=llama-3-8b", 400, "gpu is required"},
		{"model=../../etc/passwd&gpu=H100-80GB", 400, "is not one of"},
		{"model=llama-3-8b&gpu=B200", 400, "is not one of"},
		{"model=broken&gpu=H100-80GB", 500, "config invalid"},
		{"model=unknown-arch&gpu=H100-80GB", 400, "no configurator"},
	}
	for _, tc := range tests {
		t.Run(tc.query, func(t *testing.T) {
			r := get(t, h, "GET", "/ui/api/plan?"+tc.query, nil)
			if r.StatusCode != tc.status {
				t.Fatalf("status %d, want %d", r.StatusCode, tc.status)
			}
			if tc.status != 200 {
				if m := errMessage(t, r); !strings.Contains(m, tc.msg) {
					t.Fatalf("message %q lacks %q", m, tc.msg)
				}
				return
			}
			var v map[string]any
			decodeJSON(t, r, &v)
			if _, ok := v["ledger"]; !ok || gotModel != "llama-3-8b" || gotGPU != "H100-80GB" {
				t.Fatalf("plan %v (%s, %s)", v, gotModel, gotGPU)
			}
		})
	}
}

func TestHookErrorsAreJSON(t *testing.T) {
	h := Handler(Options{
		Work:    func(ctx context.Context) (any, error) { return nil, errors.New("engine: closed") },
		Plugins: func(ctx context.Context) ([]Plugin, error) { return nil, nil },
	})
	r := get(t, h, "GET", "/ui/api/work", nil)
	if r.StatusCode != 500 || !strings.Contains(errMessage(t, r), "engine: closed") {
		t.Fatalf("work error: %d", r.StatusCode)
	}
	// A nil list is an empty array, never null.
	r = get(t, h, "GET", "/ui/api/plugins", nil)
	if b := body(t, r); !strings.Contains(b, `"plugins":[]`) {
		t.Fatalf("plugins body %s", b)
	}
}

// TestFixtureIsALedgerSnapshot keeps the e2e fixture in ledger.Snapshot's
// shape and true to its invariants, so the page is tested against what
// GET /v1/memory really serves.
func TestFixtureIsALedgerSnapshot(t *testing.T) {
	b, err := os.ReadFile("testdata/memory.json")
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var s ledger.Snapshot
	if err := dec.Decode(&s); err != nil {
		t.Fatalf("fixture is not a ledger.Snapshot: %v", err)
	}
	if err := ledger.Check(s); err != nil {
		t.Fatalf("fixture breaks the ledger invariants: %v", err)
	}
	if len(s.Phases) < 3 || len(s.Allocators) < 3 || len(s.KVPools) < 2 || s.Runtime == nil {
		t.Fatal("fixture too thin to exercise the page")
	}
}
