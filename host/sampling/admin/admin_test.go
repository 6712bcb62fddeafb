package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/kvhost/kvhost/host/plugin/allowlist"
	"github.com/kvhost/kvhost/host/plugin/wasmtest"
	"github.com/kvhost/kvhost/host/sampling"
	"github.com/kvhost/kvhost/host/sampling/samplertest"
)

func TestMain(m *testing.M) {
	if err := wasmtest.Ensure(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(m.Run())
}

func do(t *testing.T, h http.Handler, method, path, key string, body []byte) (int, string) {
	t.Helper()
	req := httptest.NewRequest(method, path, bytes.NewReader(body))
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec.Code, rec.Body.String()
}

func TestAdminRoutes(t *testing.T) {
	ctx := context.Background()
	builtins, err := wasmtest.BuiltinSamplers()
	if err != nil {
		t.Fatal(err)
	}
	reg, err := sampling.NewRegistry(ctx, sampling.Options{Builtins: builtins})
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close(ctx)
	base, _ := wasmtest.Builtin("standard")
	v2, _ := samplertest.Variant(base, "7.0.0")

	disabled := Handler(reg, "", 0)
	if code, body := do(t, disabled, "GET", "/admin/samplers", "anything", nil); code != 404 || !strings.Contains(body, "disabled") {
		t.Fatalf("no key: %d %s", code, body)
	}
	if code, _ := do(t, disabled, "PUT", "/admin/samplers/standard", "", v2); code != 404 {
		t.Fatalf("no key PUT: %d", code)
	}

	h := Handler(reg, "s3cret", 1<<20)
	tests := []struct {
		name, method, path, key string
		body                    []byte
		code                    int
		want                    string
	}{
		{"no bearer", "GET", "/admin/samplers", "", nil, 401, "bearer"},
		{"wrong key", "GET", "/admin/samplers", "s3cre", nil, 401, "bearer"},
		{"list", "GET", "/admin/samplers", "s3cret", nil, 200, `"name":"top-n-sigma"`},
		{"upload", "PUT", "/admin/samplers/standard", "s3cret", v2, 200, samplertest.Version(v2, "7.0.0")},
		{"broken", "PUT", "/admin/samplers/standard", "s3cret", samplertest.Broken(base)[0], 422, "refused at instrument"},
		{"bad kind", "PUT", "/admin/samplers/standard", "s3cret", samplertest.Broken(base)[1], 422, "kind"},
		{"traversal", "PUT", "/admin/samplers/..%2Fetc", "s3cret", v2, 400, "invalid sampler name"},
		{"dot name", "PUT", "/admin/samplers/.hidden", "s3cret", v2, 400, "invalid sampler name"},
		{"too big", "PUT", "/admin/samplers/standard", "s3cret", make([]byte, 2<<20), 413, "over"},
		{"delete", "DELETE", "/admin/samplers/typical", "s3cret", nil, 204, ""},
		{"delete again", "DELETE", "/admin/samplers/typical", "s3cret", nil, 404, "unknown sampler"},
		{"delete the default", "DELETE", "/admin/samplers/standard", "s3cret", nil, 409, "is the default policy"},
	}
	for _, tc := range tests {
		code, body := do(t, h, tc.method, tc.path, tc.key, tc.body)
		if code != tc.code || !strings.Contains(body, tc.want) {
			t.Errorf("%s: %d %s, want %d containing %q", tc.name, code, body, tc.code, tc.want)
		}
	}
	_, body := do(t, h, "GET", "/admin/samplers", "s3cret", nil)
	var list []sampling.Info
	if err := json.Unmarshal([]byte(body), &list); err != nil {
		t.Fatal(err)
	}
	for _, in := range list {
		if in.Name == "typical" {
			t.Fatal("typical still listed after DELETE")
		}
		if in.Name == "standard" && (in.Source != sampling.SourceUpload || in.Version != samplertest.Version(v2, "7.0.0")) {
			t.Fatalf("standard after refused uploads: %+v", in)
		}
	}
}

// TestAdminAllowList: with an allow-list, an unlisted upload is 403 naming
// the plugin and its sha256, a listed one is accepted, a listed but
// hostile one is still 422 (the list pins bytes, it does not vouch for
// them), and the serving version is untouched by refusals.
func TestAdminAllowList(t *testing.T) {
	ctx := context.Background()
	builtins, err := wasmtest.BuiltinSamplers()
	if err != nil {
		t.Fatal(err)
	}
	base, _ := wasmtest.Builtin("standard")
	listed, _ := samplertest.Variant(base, "8.0.0")
	unlisted, _ := samplertest.Variant(base, "9.0.0")
	importer, _ := wasmtest.HostileC("importer")
	reg, err := sampling.NewRegistry(ctx, sampling.Options{
		Builtins:    builtins,
		AllowSHA256: []string{allowlist.Sum(listed) + " standard", allowlist.Sum(importer)},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close(ctx)
	h := Handler(reg, "k", 0)
	tests := []struct {
		name, path string
		body       []byte
		code       int
		want       []string
	}{
		{"unlisted", "/admin/samplers/standard", unlisted, 403, []string{allowlist.Sum(unlisted), `\"standard\"`, "allow-list"}},
		{"pinned elsewhere", "/admin/samplers/greedy", listed, 403, []string{allowlist.Sum(listed), "pins these bytes to plugin"}},
		{"junk", "/admin/samplers/standard", []byte("not wasm"), 403, []string{allowlist.Sum([]byte("not wasm"))}},
		{"listed hostile", "/admin/samplers/importer", importer, 422, []string{"refused at imports", "env.peek"}},
		{"listed", "/admin/samplers/standard", listed, 200, []string{samplertest.Version(listed, "8.0.0")}},
		{"built-in bytes", "/admin/samplers/standard", base, 200, []string{`"source":"upload"`}},
	}
	for _, tc := range tests {
		code, body := do(t, h, "PUT", tc.path, "k", tc.body)
		if code != tc.code {
			t.Errorf("%s: %d %s, want %d", tc.name, code, body, tc.code)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(body, w) {
				t.Errorf("%s: body %s lacks %q", tc.name, body, w)
			}
		}
	}
}
