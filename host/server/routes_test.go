package server

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvhost/kvhost/host/engine"
	"github.com/kvhost/kvhost/host/model/chat"
)

func TestModelRetrieve(t *testing.T) {
	env := newEnv(t)
	rec := env.do(t, "GET", "/v1/models/fake-model", "")
	card := decode[map[string]any](t, rec.Body.Bytes())
	if rec.Code != 200 || card["id"] != "fake-model" || card["object"] != "model" || card["owned_by"] != "kvhost" || card["max_model_len"] != 512.0 || card["root"] != "fake-model" {
		t.Fatalf("%d %s", rec.Code, rec.Body)
	}
	list := decode[struct {
		Data []map[string]any `json:"data"`
	}](t, env.do(t, "GET", "/v1/models", "").Body.Bytes())
	if len(list.Data) != 1 || list.Data[0]["max_model_len"] != 512.0 || list.Data[0]["permission"] == nil {
		t.Fatalf("list %+v", list)
	}
	for _, id := range []string{"other", "org/other"} {
		rec := env.do(t, "GET", "/v1/models/"+id, "")
		e := decode[wireError](t, rec.Body.Bytes())
		if rec.Code != 404 || e.Error.Code == nil || *e.Error.Code != "model_not_found" || !strings.Contains(e.Error.Message, `serves "fake-model"`) {
			t.Errorf("%s: %d %s", id, rec.Code, rec.Body)
		}
	}
}

func TestTokenize(t *testing.T) {
	env := newEnv(t)
	type vresp struct {
		Count       int       `json:"count"`
		MaxModelLen int       `json:"max_model_len"`
		Tokens      []int32   `json:"tokens"`
		TokenStrs   *[]string `json:"token_strs"`
	}
	r := decode[vresp](t, env.do(t, "POST", "/tokenize", `{"prompt":"Hi"}`).Body.Bytes())
	if r.Count != 3 || r.MaxModelLen != 512 || len(r.Tokens) != 3 || r.Tokens[0] != tokBOS || r.Tokens[1] != 'H' || r.TokenStrs != nil {
		t.Errorf("prompt form: %+v", r)
	}
	r = decode[vresp](t, env.do(t, "POST", "/tokenize", `{"prompt":"Hi","add_special_tokens":false,"return_token_strs":true}`).Body.Bytes())
	if r.Count != 2 || r.TokenStrs == nil || strings.Join(*r.TokenStrs, "|") != "H|i" {
		t.Errorf("without specials, with strings: %+v", r)
	}
	// The chat form counts exactly what /v1/chat/completions submits.
	msgs := `"messages":[{"role":"user","content":"Hello there"}]`
	r = decode[vresp](t, env.do(t, "POST", "/tokenize", `{`+msgs+`}`).Body.Bytes())
	env.do(t, "POST", "/v1/chat/completions", `{`+msgs+`,"max_tokens":2}`)
	sent := env.eng.requests()[0].Prompt
	if r.Count != len(sent) || string(fakeDecode(r.Tokens)) != string(fakeDecode(sent)) {
		t.Errorf("chat form: %d tokens %q, chat submitted %d %q", r.Count, fakeDecode(r.Tokens), len(sent), fakeDecode(sent))
	}
	noGen := decode[vresp](t, env.do(t, "POST", "/tokenize", `{`+msgs+`,"add_generation_prompt":false}`).Body.Bytes())
	if noGen.Count >= r.Count {
		t.Errorf("add_generation_prompt false: %d tokens, not fewer than %d", noGen.Count, r.Count)
	}
	// llama.cpp's form: content, add_special false by default, with_pieces.
	lc := decode[map[string][]int32](t, env.do(t, "POST", "/tokenize", `{"content":"Hi"}`).Body.Bytes())
	if len(lc["tokens"]) != 2 || lc["tokens"][0] != 'H' {
		t.Errorf("content form: %+v", lc)
	}
	pc := decode[map[string][]piece](t, env.do(t, "POST", "/tokenize", `{"content":"<s>Hi","with_pieces":true}`).Body.Bytes())
	if len(pc["tokens"]) != 3 || pc["tokens"][0] != (piece{ID: tokBOS, Piece: "<s>"}) || pc["tokens"][2].Piece != "i" {
		t.Errorf("with_pieces: %+v", pc)
	}
	for _, body := range []string{`{}`, `{"prompt":"a","content":"b"}`, `{"messages":[]}`, `{"prompt":3}`} {
		rec := env.do(t, "POST", "/tokenize", body)
		if rec.Code != 400 {
			t.Errorf("%s: %d %s", body, rec.Code, rec.Body)
		}
	}
}

func fakeDecode(ids []int32) []byte {
	var b []byte
	for _, id := range ids {
		b = append(b, fakeTokenizer{}.TokenBytes(id)...)
	}
	return b
}

func TestDetokenize(t *testing.T) {
	env := newEnv(t)
	rec := env.do(t, "POST", "/detokenize", `{"tokens":[300,301,10,302]}`)
	got := decode[map[string]string](t, rec.Body.Bytes())
	if rec.Code != 200 || got["prompt"] != "Hello world\n😀" || got["content"] != got["prompt"] {
		t.Fatalf("%d %s", rec.Code, rec.Body)
	}
	for body, want := range map[string]string{
		`{}`:               "tokens is required",
		`{"tokens":[-1]}`:  "token 0 (id -1)",
		`{"tokens":"abc"}`: "tokens",
	} {
		rec := env.do(t, "POST", "/detokenize", body)
		if rec.Code != 400 || !strings.Contains(rec.Body.String(), want) {
			t.Errorf("%s: %d %s", body, rec.Code, rec.Body)
		}
	}
}

// embedBackend adds Embedder to the fake: token id k at position p has the
// hidden state (k, p, 1, -k) + 0.5.
type embedBackend struct {
	*fakeBackend
	mu    sync.Mutex
	calls int
}

func (b *embedBackend) EmbeddingSize() int { return 4 }
func (b *embedBackend) Embed(ctx context.Context, prompt []int32) ([]float32, error) {
	b.mu.Lock()
	b.calls++
	b.mu.Unlock()
	out := make([]float32, 0, 4*len(prompt))
	for p, k := range prompt {
		out = append(out, float32(k)+0.5, float32(p)+0.5, 1.5, -float32(k)+0.5)
	}
	return out, nil
}

// refEmbedding is the float64 reference of the pooling: mean or last row,
// then L2 normalization.
func refEmbedding(prompt []int32, mode string) []float64 {
	acc := make([]float64, 4)
	rows := 0
	for p, k := range prompt {
		if mode == PoolingLast && p != len(prompt)-1 {
			continue
		}
		row := []float64{float64(k) + 0.5, float64(p) + 0.5, 1.5, -float64(k) + 0.5}
		for j := range acc {
			acc[j] += row[j]
		}
		rows++
	}
	var n float64
	for j := range acc {
		acc[j] /= float64(rows)
		n += acc[j] * acc[j]
	}
	for j := range acc {
		acc[j] /= math.Sqrt(n)
	}
	return acc
}

func newEmbedEnv(t *testing.T, pooling string) (*testEnv, *embedBackend) {
	env := newEnv(t)
	tmpl, _ := chat.New(llama3Template, "<s>", "</s>")
	b := &embedBackend{fakeBackend: &fakeBackend{eng: env.eng, tmpl: tmpl}}
	env.h = New(b, Options{EmbeddingPooling: pooling, MaxPrompts: 3})
	return env, b
}

func TestEmbeddings(t *testing.T) {
	type resp struct {
		Object string `json:"object"`
		Model  string `json:"model"`
		Data   []struct {
			Object    string `json:"object"`
			Index     int    `json:"index"`
			Embedding any    `json:"embedding"`
		} `json:"data"`
		Usage map[string]int `json:"usage"`
	}
	for _, mode := range []string{PoolingMean, PoolingLast} {
		env, _ := newEmbedEnv(t, mode)
		rec := env.do(t, "POST", "/v1/embeddings", `{"input":["Hi","Hello!"],"model":"fake-model"}`)
		r := decode[resp](t, rec.Body.Bytes())
		if rec.Code != 200 || r.Object != "list" || r.Model != "fake-model" || len(r.Data) != 2 || r.Usage["prompt_tokens"] != 3+7 || r.Usage["total_tokens"] != 10 {
			t.Fatalf("%s: %d %s", mode, rec.Code, rec.Body)
		}
		for i, text := range []string{"Hi", "Hello!"} {
			ids, _ := fakeTokenizer{}.Encode(text, true)
			want := refEmbedding(ids, mode)
			got := r.Data[i].Embedding.([]any)
			if r.Data[i].Index != i || r.Data[i].Object != "embedding" || len(got) != 4 {
				t.Fatalf("%s: data[%d] = %+v", mode, i, r.Data[i])
			}
			for j := range want {
				if d := math.Abs(got[j].(float64) - want[j]); d > 1e-6 {
					t.Errorf("%s: input %d dim %d: %v, reference %v", mode, i, j, got[j], want[j])
				}
			}
		}
		// base64: the same float32 values, little-endian.
		rec = env.do(t, "POST", "/v1/embeddings", `{"input":[[256,72,105]],"encoding_format":"base64"}`)
		r = decode[resp](t, rec.Body.Bytes())
		raw, err := base64.StdEncoding.DecodeString(r.Data[0].Embedding.(string))
		if err != nil || len(raw) != 16 {
			t.Fatalf("%s: base64 %v (%d bytes)", mode, err, len(raw))
		}
		want := refEmbedding([]int32{256, 72, 105}, mode)
		for j := range want {
			if v := math.Float32frombits(binary.LittleEndian.Uint32(raw[4*j:])); math.Abs(float64(v)-want[j]) > 1e-6 {
				t.Errorf("%s: base64 dim %d = %v, want %v", mode, j, v, want[j])
			}
		}
	}
	env, b := newEmbedEnv(t, "")
	for body, want := range map[string]string{
		`{}`:                                     "input is required",
		`{"input":"a","encoding_format":"int8"}`: "encoding_format",
		`{"input":"a","dimensions":3}`:           "this model's embeddings have 4 dimensions",
		`{"input":["a","b","c","d"]}`:            "4 inputs given, at most 3",
		`{"input":[[1,2],[-3]]}`:                 "prompt",
	} {
		rec := env.do(t, "POST", "/v1/embeddings", body)
		if rec.Code != 400 || !strings.Contains(rec.Body.String(), want) {
			t.Errorf("%s: %d %s, want 400 with %q", body, rec.Code, rec.Body, want)
		}
	}
	if b.calls != 0 {
		t.Errorf("refused requests reached the backend %d times", b.calls)
	}
	// A backend without the capability says so.
	plain := newEnv(t)
	rec := plain.do(t, "POST", "/v1/embeddings", `{"input":"a"}`)
	if rec.Code != 400 || !strings.Contains(rec.Body.String(), "not served for embeddings") {
		t.Errorf("no embedder: %d %s", rec.Code, rec.Body)
	}
}

func TestRequestIDsInLogs(t *testing.T) {
	env := newEnv(t)
	rec := env.do(t, "POST", "/v1/completions", `{"prompt":"x","max_tokens":2}`)
	id := rec.Header().Get(RequestIDHeader)
	if len(id) != 32 || !strings.Contains(env.logString(), "request_id="+id) {
		t.Fatalf("generated id %q not in the log:\n%s", id, env.logString())
	}
	req := newRequest("POST", "/v1/completions", `{"prompt":"x","max_tokens":-1}`)
	req.Header.Set(RequestIDHeader, "client-abc.123")
	rec = serve(env.h, req)
	if rec.Header().Get(RequestIDHeader) != "client-abc.123" {
		t.Fatalf("client id not echoed: %q", rec.Header().Get(RequestIDHeader))
	}
	var line string
	for _, l := range strings.Split(env.logString(), "\n") {
		if strings.Contains(l, "request_id=client-abc.123") {
			line = l
		}
	}
	if !strings.Contains(line, "level=WARN") || !strings.Contains(line, "status=400") || !strings.Contains(line, `reason="invalid max_tokens`) {
		t.Errorf("a 400 is logged at warn with its reason and the client's id; got %q", line)
	}
	req = newRequest("GET", "/health", "")
	req.Header.Set(RequestIDHeader, "bad id with spaces")
	if got := serve(env.h, req).Header().Get(RequestIDHeader); got == "bad id with spaces" || len(got) != 32 {
		t.Errorf("an unusable client id was echoed: %q", got)
	}
}

// detailObserver records ErrorDetail calls.
type detailObserver struct {
	nopObserver
	mu      sync.Mutex
	details []string
}

type nopObserver struct{}

func (nopObserver) RequestStart(string)                   {}
func (nopObserver) FirstToken(string, time.Duration)      {}
func (nopObserver) NextToken(string, time.Duration)       {}
func (nopObserver) Error(string, string)                  {}
func (nopObserver) RequestEnd(string, int, time.Duration) {}
func (o *detailObserver) ErrorDetail(route, kind string, status int, msg, id string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.details = append(o.details, strings.Join([]string{route, kind, http.StatusText(status), msg, id}, "|"))
}

func TestErrorDetailObserved(t *testing.T) {
	obs := &detailObserver{}
	env := newEnv(t, withOptions(func(o *Options) { o.Observer = obs }))
	req := newRequest("POST", "/v1/completions", `{"prompt":"x","temperature":-2}`)
	req.Header.Set(RequestIDHeader, "r1")
	serve(env.h, req)
	serve(env.h, newRequest("POST", "/v1/completions", `{"prompt":"x","max_tokens":1}`))
	if len(obs.details) != 1 || !strings.HasPrefix(obs.details[0], "/v1/completions|invalid_request|Bad Request|invalid temperature") || !strings.HasSuffix(obs.details[0], "|r1") {
		t.Errorf("details %q", obs.details)
	}
}

func TestCORS(t *testing.T) {
	preflight := func(h http.Handler, origin string) *httptest.ResponseRecorder {
		req := httptest.NewRequest("OPTIONS", "/v1/completions", nil)
		req.Header.Set("Origin", origin)
		req.Header.Set("Access-Control-Request-Method", "POST")
		req.Header.Set("Access-Control-Request-Headers", "authorization, content-type")
		return serve(h, req)
	}
	off := newEnv(t)
	if rec := preflight(off.h, "http://app.example"); rec.Header().Get("Access-Control-Allow-Origin") != "" {
		t.Errorf("CORS is on by default: %v", rec.Header())
	}
	on := newEnv(t, withOptions(func(o *Options) { o.AllowedOrigins = []string{"http://app.example"} }))
	rec := preflight(on.h, "http://app.example")
	if rec.Code != http.StatusNoContent || rec.Header().Get("Access-Control-Allow-Origin") != "http://app.example" ||
		!strings.Contains(strings.ToLower(rec.Header().Get("Access-Control-Allow-Headers")), "authorization") {
		t.Errorf("allowed preflight: %d %v", rec.Code, rec.Header())
	}
	if rec := preflight(on.h, "http://evil.example"); rec.Header().Get("Access-Control-Allow-Origin") != "" {
		t.Errorf("another origin was allowed: %v", rec.Header())
	}
	req := newRequest("POST", "/v1/completions", `{"prompt":"x","max_tokens":1}`)
	req.Header.Set("Origin", "http://app.example")
	rec = serve(on.h, req)
	if rec.Code != 200 || rec.Header().Get("Access-Control-Allow-Origin") != "http://app.example" || !strings.Contains(rec.Header().Get("Access-Control-Expose-Headers"), RequestIDHeader) {
		t.Errorf("simple request: %d %v", rec.Code, rec.Header())
	}
	any := newEnv(t, withOptions(func(o *Options) { o.AllowedOrigins = []string{"*"} }))
	if rec := preflight(any.h, "http://whatever.example"); rec.Header().Get("Access-Control-Allow-Origin") != "*" {
		t.Errorf("*: %v", rec.Header())
	}
	for _, bad := range [][]string{{"app.example"}, {"http://a.example/path"}, {"ftp://a"}} {
		if err := (Options{AllowedOrigins: bad}).Validate(); err == nil || !strings.Contains(err.Error(), "allowed_origins[0]") {
			t.Errorf("%q: %v", bad, err)
		}
	}
}

func TestGateAnswersWhileLoading(t *testing.T) {
	g := NewGate()
	g.SetPhase("loading model")
	for _, path := range []string{"/health", "/ready", "/v1/models"} {
		rec := serve(g, httptest.NewRequest("GET", path, nil))
		e := decode[wireError](t, rec.Body.Bytes())
		if rec.Code != 503 || e.Error.Code == nil || *e.Error.Code != "loading" || !strings.Contains(e.Error.Message, "loading model") || rec.Header().Get("Retry-After") == "" {
			t.Errorf("%s while loading: %d %s", path, rec.Code, rec.Body)
		}
		if id := rec.Header().Get(RequestIDHeader); !validRequestID(id) {
			t.Errorf("%s while loading: request id %q", path, id)
		}
	}
	req := httptest.NewRequest("GET", "/health", nil)
	req.Header.Set(RequestIDHeader, "gw-42")
	if id := serve(g, req).Header().Get(RequestIDHeader); id != "gw-42" {
		t.Errorf("a client's request id while loading came back as %q", id)
	}
	env := newEnv(t)
	g.Open(env.h)
	for _, path := range []string{"/health", "/ready"} {
		if rec := serve(g, httptest.NewRequest("GET", path, nil)); rec.Code != 200 {
			t.Errorf("%s after Open: %d %s", path, rec.Code, rec.Body)
		}
	}
	env.h.Drain("bye")
	if rec := serve(g, httptest.NewRequest("GET", "/ready", nil)); rec.Code != 503 {
		t.Errorf("/ready while draining: %d", rec.Code)
	}
}

// phaseObserver records RequestPhases calls.
type phaseObserver struct {
	nopObserver
	mu    sync.Mutex
	calls []string
	queue []time.Duration
}

func (o *phaseObserver) RequestPhases(route string, queue, prefill, decode time.Duration, prompt, gen int, reasons []string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.calls = append(o.calls, strings.Join(append([]string{route, http.StatusText(200)}, reasons...), "|")+"|"+time.Duration(prompt).String()+"|"+time.Duration(gen).String())
	o.queue = append(o.queue, queue)
	if prefill < 0 || decode < 0 {
		o.calls = append(o.calls, "negative duration")
	}
}

func TestPhasesObserved(t *testing.T) {
	obs := &phaseObserver{}
	env := newEnv(t, withOptions(func(o *Options) { o.Observer = obs }), withScript(func(req engine.Request) []engine.Event {
		evs := events(byteIDs("abc"), "length", len(req.Prompt))
		evs[0].Queue = 42 * time.Millisecond
		return evs
	}))
	rec := env.do(t, "POST", "/v1/completions", `{"prompt":["x","yz"],"max_tokens":3,"n":2}`)
	if rec.Code != 200 {
		t.Fatalf("%d %s", rec.Code, rec.Body)
	}
	want := []string{"/v1/completions|OK|length|length|2ns|6ns", "/v1/completions|OK|length|length|3ns|6ns"}
	slices.Sort(obs.calls)
	if !slices.Equal(obs.calls, want) || obs.queue[0] != 42*time.Millisecond || obs.queue[1] != 42*time.Millisecond {
		t.Errorf("phases %q queue %v; want %q and 42ms each", obs.calls, obs.queue, want)
	}
}
