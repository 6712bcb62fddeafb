package server

import (
	"bufio"
	"errors"
	"fmt"
	"github.com/go-chi/chi/v5"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvhost/kvhost/host/engine"
	"github.com/kvhost/kvhost/host/sampling"
)

func TestAPIKeys(t *testing.T) {
	env := newEnv(t, withOptions(func(o *Options) { o.APIKeys = []string{"sk-first-key", "sk-second-key"} }))
	for _, tc := range []struct {
		method, path, auth string
		want               int
	}{
		{"POST", "/v1/completions", "", 401},
		{"POST", "/v1/completions", "Bearer sk-wrong", 401},
		{"POST", "/v1/completions", "Bearer sk-first-key-and-more", 401},
		{"POST", "/v1/completions", "Basic sk-first-key", 401},
		{"POST", "/v1/completions", "Bearer sk-first-key", 200},
		{"POST", "/v1/completions", "bearer sk-second-key", 200},
		{"POST", "/v1/chat/completions", "", 401},
		{"POST", "/generate", "", 401},
		{"POST", "/generate", "Bearer sk-second-key", 200},
		{"GET", "/v1/models", "", 401},
		{"GET", "/v1/models", "Bearer sk-first-key", 200},
		{"GET", "/health", "", 200},
	} {
		body := map[string]string{"/v1/completions": `{"prompt":"a"}`, "/generate": `{"text":"a"}`,
			"/v1/chat/completions": `{"messages":[{"role":"user","content":"x"}]}`}[tc.path]
		req := newRequest(tc.method, tc.path, body)
		if tc.auth != "" {
			req.Header.Set("Authorization", tc.auth)
		}
		rec := serve(env.h, req)
		if rec.Code != tc.want {
			t.Errorf("%s %s %q: %d, want %d", tc.method, tc.path, tc.auth, rec.Code, tc.want)
		}
		if tc.want == 401 {
			e := decode[wireError](t, rec.Body.Bytes())
			if e.Error.Code == nil || *e.Error.Code != "invalid_api_key" || rec.Header().Get("WWW-Authenticate") == "" {
				t.Errorf("401 body %s", rec.Body)
			}
		}
	}
	if strings.Contains(env.logs.String(), "sk-") {
		t.Errorf("a key reached the log: %s", env.logs)
	}
	if err := (Options{APIKeys: []string{"k", ""}}).Validate(); err == nil {
		t.Error("an empty API key was accepted")
	}
}

func TestDrain(t *testing.T) {
	env := newEnv(t, withScript(scriptText("abcdef", "length")), withEngine(func(e *fakeEngine) { e.delay = 20 * time.Millisecond }))
	srv := httptest.NewServer(env.h)
	defer srv.Close()
	resp, err := srv.Client().Post(srv.URL+"/v1/completions", "application/json", strings.NewReader(`{"prompt":"p","stream":true}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	if _, err := br.ReadString('\n'); err != nil { // the stream is running
		t.Fatal(err)
	}
	if env.h.InFlight() != 1 || env.h.Draining() {
		t.Fatalf("in flight %d draining %v", env.h.InFlight(), env.h.Draining())
	}
	env.h.Drain("restarting for an upgrade")
	for _, tc := range []struct{ method, path string }{{"POST", "/v1/completions"}, {"GET", "/health"}} {
		path := tc.path
		rec := env.do(t, tc.method, path, `{"prompt":"p"}`)
		e := decode[wireError](t, rec.Body.Bytes())
		if rec.Code != 503 || e.Error.Code == nil || *e.Error.Code != "draining" || !strings.Contains(e.Error.Message, "restarting for an upgrade") {
			t.Errorf("%s while draining: %d %s", path, rec.Code, rec.Body)
		}
	}
	rest, _ := io.ReadAll(br)
	if !strings.Contains(string(rest), `"finish_reason":"length"`) || !strings.HasSuffix(string(rest), "data: [DONE]\n\n") {
		t.Errorf("the running stream did not finish: %q", rest)
	}
	deadline := time.Now().Add(5 * time.Second)
	for env.h.InFlight() != 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if env.h.InFlight() != 0 {
		t.Errorf("in flight %d after the stream ended", env.h.InFlight())
	}
}

func TestNewHTTPServer(t *testing.T) {
	hs := NewHTTPServer(http.NotFoundHandler(), ":0")
	if hs.ReadHeaderTimeout <= 0 || hs.ReadTimeout <= 0 || hs.IdleTimeout <= 0 || hs.WriteTimeout != 0 || hs.MaxHeaderBytes <= 0 || hs.Addr != ":0" {
		t.Errorf("server %+v", hs)
	}
}

// A stream that outlives ReadTimeout still completes: the handler lifts the
// read deadline once the body is read. Slow-loris headers are cut off.
func TestHTTPServerTimeouts(t *testing.T) {
	env := newEnv(t, withScript(scriptText("abcdefghij", "length")), withEngine(func(e *fakeEngine) { e.delay = 40 * time.Millisecond }))
	ts := httptest.NewUnstartedServer(nil)
	ts.Config = NewHTTPServer(env.h, "")
	ts.Config.ReadTimeout = 150 * time.Millisecond
	ts.Config.ReadHeaderTimeout = 100 * time.Millisecond
	ts.Start()
	defer ts.Close()

	for _, stream := range []bool{true, false} {
		resp, err := ts.Client().Post(ts.URL+"/v1/completions", "application/json", strings.NewReader(fmt.Sprintf(`{"prompt":"p","stream":%v}`, stream)))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !strings.Contains(string(body), `"finish_reason":"length"`) || !strings.Contains(string(body), "j") {
			t.Errorf("stream=%v: a 400 ms generation was cut short: %q", stream, body)
		}
	}

	conn, err := net.Dial("tcp", ts.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_, _ = conn.Write([]byte("POST /v1/completions HTTP/1.1\r\nHost: x\r\n")) // and never finish
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	start := time.Now()
	_, err = io.ReadAll(conn)
	if err != nil || time.Since(start) > 3*time.Second {
		t.Errorf("slow-loris connection not closed by the server: %v after %v", err, time.Since(start))
	}
}

func TestMounts(t *testing.T) {
	tag := func(name string) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintf(w, "%s %s %s", name, r.Method, r.URL.Path)
		})
	}
	bare := newEnv(t)
	full := newEnv(t, withOptions(func(o *Options) {
		o.Memory, o.Metrics, o.Admin, o.Web = tag("memory"), tag("metrics"), tag("admin"), tag("web")
		o.APIKeys = []string{"key"}
	}))
	for _, tc := range []struct {
		method, path string
		auth         bool
		bare, full   int
		body         string
	}{
		{"GET", "/v1/memory", true, 404, 200, "memory GET /v1/memory"},
		{"GET", "/v1/memory", false, 404, 401, ""},
		{"GET", "/metrics", false, 404, 401, ""},
		{"GET", "/metrics", true, 404, 200, "metrics GET /metrics"},
		{"POST", "/admin/plugins/x", false, 404, 200, "admin POST /admin/plugins/x"},
		{"GET", "/admin", false, 404, 200, "admin GET /admin"},
		{"GET", "/", false, 404, 200, "web GET /"},
		{"GET", "/ui/js/app.js", false, 404, 200, "web GET /ui/js/app.js"},
		{"GET", "/ui/api/config", false, 404, 401, ""},
		{"GET", "/ui/api/config", true, 404, 200, "web GET /ui/api/config"},
		{"GET", "/app/index.js", false, 404, 401, ""},
		{"GET", "/app/index.js", true, 404, 200, "web GET /app/index.js"},
		{"POST", "/", false, 404, 401, ""},
		{"POST", "/", true, 404, 405, ""},
		{"GET", "/v1/unknown", true, 404, 404, ""},
		{"GET", "/v1/unknown", false, 404, 401, ""},
		{"GET", "/health", false, 200, 200, `{"status":"ok"}` + "\n"},
	} {
		for _, env := range []*testEnv{bare, full} {
			req := newRequest(tc.method, tc.path, "")
			if tc.auth {
				req.Header.Set("Authorization", "Bearer key")
			}
			rec := serve(env.h, req)
			want := map[*testEnv]int{bare: tc.bare, full: tc.full}[env]
			if rec.Code != want || (want == 200 && env == full && rec.Body.String() != tc.body) {
				t.Errorf("%s %s (full=%v): %d %q, want %d %q", tc.method, tc.path, env == full, rec.Code, rec.Body, want, tc.body)
			}
		}
	}
}

// fakeSampler compiles like a registry holding "mirostat" (param tau > 0,
// temperature declared) as the default, recording every call.
type fakeSampler struct {
	mu    sync.Mutex
	calls []string
}

func (f *fakeSampler) Compile(name string, params map[string]any, req sampling.Request) (sampling.Compiled, error) {
	f.mu.Lock()
	f.calls = append(f.calls, fmt.Sprintf("%q %v t=%v fp=%v", name, params, req.Temperature, req.FrequencyPenalty))
	f.mu.Unlock()
	if name != "" && name != "mirostat" {
		return sampling.Compiled{}, &sampling.UnknownPolicyError{Policy: name, Available: []string{"mirostat"}}
	}
	if tau, ok := params["tau"]; ok {
		if v, ok := tau.(float64); !ok || v <= 0 {
			return sampling.Compiled{}, &sampling.ParamError{Policy: "mirostat", Param: "tau", Problem: fmt.Sprintf("%v is out of range (0, 10]", tau)}
		}
	}
	if req.TopP > 0 {
		return sampling.Compiled{}, &sampling.ParamError{Policy: "mirostat", Param: "top_p", FromRequest: true, Problem: fmt.Sprintf("%v is not honoured: the sampler takes temperature, tau", req.TopP)}
	}
	return sampling.Compiled{}, nil
}

func TestSamplerExtension(t *testing.T) {
	fs := &fakeSampler{}
	env := newEnv(t, withOptions(func(o *Options) { o.Sampler = fs }))
	for _, tc := range []struct {
		path, body string
		status     int
		want       string // the exact error body
	}{
		{"/v1/completions", `{"prompt":"a","sampler":"mirostat","sampler_params":{"tau":5}}`, 200, ""},
		{"/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}],"sampler":"mirostat"}`, 200, ""},
		{"/generate", `{"text":"a","sampler_params":{"tau":2.5}}`, 200, ""},
		{"/v1/completions", `{"prompt":"a","temperature":0.7,"frequency_penalty":0.5}`, 200, ""},
		// Greedy with no policy named samples on the host: nothing to compile.
		{"/v1/completions", `{"prompt":"a","temperature":0,"frequency_penalty":0.5}`, 200, ""},
		{"/v1/completions", `{"prompt":"a","sampler":"nope"}`, 400,
			`{"error":{"message":"invalid sampler: sampling: unknown sampler \"nope\" (loaded: mirostat)","type":"invalid_request_error","param":"sampler","code":null}}`},
		{"/generate", `{"text":"a","sampler":"mirostat","sampler_params":{"tau":-1}}`, 400,
			`{"error":{"message":"invalid sampler_params.tau: -1 is out of range (0, 10] (sampler \"mirostat\")","type":"invalid_request_error","param":"sampler_params.tau","code":null}}`},
		{"/v1/completions", `{"prompt":"a","top_p":0.5}`, 400,
			`{"error":{"message":"invalid top_p: 0.5 is not honoured: the sampler takes temperature, tau (sampler \"mirostat\")","type":"invalid_request_error","param":"top_p","code":null}}`},
		{"/generate", `{"text":"a","sampling_params":{"top_p":0.5}}`, 400,
			`{"error":{"message":"invalid sampling_params.top_p: 0.5 is not honoured: the sampler takes temperature, tau (sampler \"mirostat\")","type":"invalid_request_error","param":"sampling_params.top_p","code":null}}`},
		{"/v1/completions", `{"prompt":"a","sampler_params":[1]}`, 400,
			`{"error":{"message":"invalid sampler_params: expected an object, got array","type":"invalid_request_error","param":"sampler_params","code":null}}`},
	} {
		rec := env.do(t, http.MethodPost, tc.path, tc.body)
		if rec.Code != tc.status || tc.want != "" && strings.TrimSpace(rec.Body.String()) != tc.want {
			t.Errorf("%s %s: %d %s\nwant %d %s", tc.path, tc.body, rec.Code, rec.Body, tc.status, tc.want)
		}
	}
	want := []string{`"mirostat" map[tau:5] t=1 fp=0`, `"mirostat" map[] t=1 fp=0`, `"" map[tau:2.5] t=1 fp=0`, `"" map[] t=0.7 fp=0.5`,
		`"nope" map[] t=1 fp=0`, `"mirostat" map[tau:-1] t=1 fp=0`, `"" map[] t=1 fp=0`, `"" map[] t=1 fp=0`}
	if fmt.Sprint(fs.calls) != fmt.Sprint(want) {
		t.Errorf("Compile calls\n%q\nwant\n%q", fs.calls, want)
	}
	reqs := env.eng.requests()
	if len(reqs) != 5 {
		t.Fatalf("%d engine requests, want 5", len(reqs))
	}
	for i, r := range reqs {
		compiled := r.SamplerParams != nil
		if compiled != (i != 4) {
			t.Errorf("request %d: compiled %v (sampler %q); only the greedy request samples on the host", i, compiled, r.Sampler)
		}
	}
	if reqs[3].Sampling.FrequencyPenalty != 0.5 || reqs[4].Sampling.FrequencyPenalty != 0.5 || reqs[4].Sampling.Temperature != 0 {
		t.Errorf("penalties did not reach the engine: %+v / %+v", reqs[3].Sampling, reqs[4].Sampling)
	}
}

type recObserver struct {
	mu     sync.Mutex
	events []string
}

func (o *recObserver) add(s string)              { o.mu.Lock(); o.events = append(o.events, s); o.mu.Unlock() }
func (o *recObserver) RequestStart(route string) { o.add("start " + route) }
func (o *recObserver) FirstToken(route string, d time.Duration) {
	if d > 0 {
		o.add("first " + route)
	}
}
func (o *recObserver) NextToken(route string, d time.Duration) {
	if d > 0 {
		o.add("next")
	}
}
func (o *recObserver) Error(route, kind string) { o.add("error " + route + " " + kind) }
func (o *recObserver) RequestEnd(route string, status int, d time.Duration) {
	o.add(fmt.Sprintf("end %s %d", route, status))
}
func (o *recObserver) take() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	s := strings.Join(o.events, "|")
	o.events = nil
	return s
}

func TestObserver(t *testing.T) {
	obs := &recObserver{}
	env := newEnv(t, withOptions(func(o *Options) { o.Observer = obs; o.APIKeys = []string{"k"} }),
		withScript(scriptText("abc", "length")))
	post := func(path, body string) {
		req := newRequest(http.MethodPost, path, body)
		req.Header.Set("Authorization", "Bearer k")
		serve(env.h, req)
	}
	post("/v1/completions", `{"prompt":"p","stream":true}`)
	if got, want := obs.take(), "start /v1/completions|first /v1/completions|next|next|end /v1/completions 200"; got != want {
		t.Errorf("stream:\n got %s\nwant %s", got, want)
	}
	post("/generate", `{"text":"p","sampling_params":{"n":2}}`)
	if got := obs.take(); strings.Count(got, "first") != 1 || strings.Count(got, "next") != 4 {
		t.Errorf("n=2: %s", got)
	}
	post("/v1/chat/completions", `{"messages":[]}`)
	if got, want := obs.take(), "start /v1/chat/completions|error /v1/chat/completions invalid_request|end /v1/chat/completions 400"; got != want {
		t.Errorf("400:\n got %s\nwant %s", got, want)
	}
	serve(env.h, newRequest(http.MethodPost, "/v1/completions", `{"prompt":"p"}`))
	if got := obs.take(); !strings.Contains(got, "error /v1/completions unauthorized|end /v1/completions 401") {
		t.Errorf("401: %s", got)
	}
	for _, tc := range []struct {
		err  error
		kind string
	}{{engine.ErrQueueFull, "queue_full"}, {engine.ErrShuttingDown, "shutting_down"}, {errors.New("boom"), "internal"}} {
		env.eng.submitErr = tc.err
		post("/v1/completions", `{"prompt":"p"}`)
		if got := obs.take(); !strings.Contains(got, "error /v1/completions "+tc.kind) {
			t.Errorf("%v: %s", tc.err, got)
		}
	}
	env.eng.submitErr = nil
	env.eng.script = func(engine.Request) []engine.Event {
		return []engine.Event{{Token: 'a'}, {Err: engine.ErrShuttingDown}}
	}
	post("/v1/completions", `{"prompt":"p","stream":true}`)
	if got := obs.take(); !strings.Contains(got, "error /v1/completions shutting_down|end /v1/completions 200") {
		t.Errorf("stream error: %s", got)
	}
	env.h.Drain("")
	post("/v1/completions", `{"prompt":"p"}`)
	if got := obs.take(); !strings.Contains(got, "error /v1/completions draining|end /v1/completions 503") {
		t.Errorf("draining: %s", got)
	}
}

func TestMaxPromptTokens(t *testing.T) {
	env := newEnv(t, withOptions(func(o *Options) { o.MaxPromptTokens = 4 }))
	for _, tc := range []struct{ path, body, param string }{
		{"/v1/completions", `{"prompt":"abcd"}`, "prompt"},
		{"/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}]}`, "messages"},
		{"/generate", `{"input_ids":[1,2,3,4,5]}`, "input_ids"},
		{"/generate", `{"text":"abcd"}`, "text"},
	} {
		rec := env.do(t, http.MethodPost, tc.path, tc.body)
		e := decode[wireError](t, rec.Body.Bytes())
		if rec.Code != 400 || e.Error.Param == nil || *e.Error.Param != tc.param || !strings.Contains(e.Error.Message, "this server's limit is 4") {
			t.Errorf("%s: %d %s", tc.body, rec.Code, rec.Body)
		}
	}
	if rec := env.do(t, http.MethodPost, "/v1/completions", `{"prompt":"abc"}`); rec.Code != 200 {
		t.Errorf("a prompt at the limit: %d", rec.Code)
	}
}

// TestAdminChiRouterSeesFullPath: an admin handler that is itself a chi
// router with absolute routes (as host/sampling/admin is) is reached.
func TestAdminChiRouterSeesFullPath(t *testing.T) {
	sub := chi.NewRouter()
	sub.Get("/admin/samplers", func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("list")) })
	sub.Put("/admin/samplers/{name}", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("put " + chi.URLParam(r, "name"))) })
	h := newEnv(t, withOptions(func(o *Options) { o.Admin = sub })).h
	for _, tc := range []struct{ method, path, want string }{
		{http.MethodGet, "/admin/samplers", "list"},
		{http.MethodPut, "/admin/samplers/typical", "put typical"},
	} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(tc.method, tc.path, nil))
		if rec.Code != 200 || rec.Body.String() != tc.want {
			t.Fatalf("%s %s: %d %q", tc.method, tc.path, rec.Code, rec.Body.String())
		}
	}
}

// TestStalledStreamClientIsCutOff: a client that opens a stream and stops
// reading (a malformed SSE client) is cut off by the per-write deadline, and
// its generation is cancelled rather than held forever.
func TestStalledStreamClientIsCutOff(t *testing.T) {
	long := strings.Repeat("x", 200000) // ~200k SSE chunks: far more than socket buffers hold
	env := newEnv(t, withScript(scriptText(long, "length")), withEngine(func(e *fakeEngine) { e.ctxLen = 1 << 20 }),
		withOptions(func(o *Options) { o.StreamWriteTimeout = 200 * time.Millisecond }))
	srv := httptest.NewServer(env.h)
	defer srv.Close()
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// A small receive window: the server's writes block after fewer chunks.
	if err := conn.(*net.TCPConn).SetReadBuffer(4096); err != nil {
		t.Fatal(err)
	}
	body := `{"prompt":"hi","max_tokens":200000,"stream":true}`
	fmt.Fprintf(conn, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	// Never read. The engine request must be cancelled soon.
	select {
	case <-env.eng.interrupted:
	case <-time.After(60 * time.Second): // generous: chunks come slowly under -race on a loaded machine
		t.Fatal("a client that stopped reading kept its generation running")
	}
	for deadline := time.Now().Add(5 * time.Second); !strings.Contains(env.logString(), "/v1/completions"); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the cut-off request was not logged")
		}
	}
}

// TestAPIKeyDenyByDefault walks every route the server registers, with
// every mount set: without the key each answers 401 but the probes, the
// admin mount (its own key) and the dashboard's static shell. A route
// added later is covered without touching this test.
func TestAPIKeyDenyByDefault(t *testing.T) {
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) })
	env := newEnv(t, withOptions(func(o *Options) {
		o.Memory, o.Metrics, o.Admin, o.Web, o.Sampler = ok, ok, ok, ok, &fakeSampler{}
		o.APIKeys = []string{"key"}
	}))
	routes, isChi := env.h.h.(chi.Routes)
	if !isChi {
		t.Fatalf("the handler is a %T, not a chi router", env.h.h)
	}
	open := map[string]bool{"/health": true, "/ready": true, "/admin": true, "/admin/x": true, "/x": false, "/ui/x": true, "/ui/api/x": false}
	n := 0
	err := chi.Walk(routes, func(method, route string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		paths := []string{strings.ReplaceAll(route, "/*", "/x")}
		if route == "/*" {
			paths = append(paths, "/ui/x", "/ui/api/x", "/")
		}
		for _, path := range paths {
			n++
			want := http.StatusUnauthorized
			if open[path] || path == "/" {
				want = -1 // anything but 401
			}
			rec := serve(env.h, newRequest(method, path, `{}`))
			if (want == -1) == (rec.Code == http.StatusUnauthorized) {
				t.Errorf("%s %s (route %s) without the key: %d", method, path, route, rec.Code)
			}
		}
		return nil
	})
	if err != nil || n < 10 {
		t.Fatalf("walked %d routes: %v", n, err)
	}
	// A CORS preflight carries no credentials and is not refused for it.
	req := newRequest(http.MethodOptions, "/v1/completions", "")
	req.Header.Set("Origin", "https://example.com")
	req.Header.Set("Access-Control-Request-Method", "POST")
	if rec := serve(env.h, req); rec.Code == http.StatusUnauthorized {
		t.Errorf("preflight: %d", rec.Code)
	}
}

// TestPublicMetrics: with PublicMetrics a scraper without the key reads
// /metrics (as the inference extension's endpoint picker does), and only
// /metrics: the memory ledger, the inference routes and other methods on
// /metrics still need the key; without it /metrics needs the key too.
func TestPublicMetrics(t *testing.T) {
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) })
	for _, public := range []bool{false, true} {
		env := newEnv(t, withOptions(func(o *Options) {
			o.Memory, o.Metrics = ok, ok
			o.APIKeys = []string{"key"}
			o.PublicMetrics = public
		}))
		for _, tc := range []struct {
			method, path string
			open         bool
		}{
			{http.MethodGet, "/metrics", public},
			{http.MethodHead, "/metrics", public},
			{http.MethodPost, "/metrics", false},
			{http.MethodGet, "/v1/memory", false},
			{http.MethodPost, "/v1/completions", false},
		} {
			rec := serve(env.h, newRequest(tc.method, tc.path, `{}`))
			if (rec.Code == http.StatusUnauthorized) == tc.open {
				t.Errorf("PublicMetrics %v: %s %s without the key: %d", public, tc.method, tc.path, rec.Code)
			}
		}
	}
}
