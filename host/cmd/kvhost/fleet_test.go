package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kvhost/kvhost/internal/testmodels"
)

// Each replica is this test binary run as kvhost itself (TestMain in
// sandbox_test.go: KVHOST_TEST_AS_MAIN=1 makes it main()), a real process
// with kvhost's own signal handling.

// replica is one kvhost serve process on a loopback port.
type replica struct {
	name    string
	url     string
	cmd     *exec.Cmd
	log     *syncBuf
	exited  chan struct{} // closed when the process is gone; err is then set
	err     error
	stopped time.Time
}

var listeningURL = regexp.MustCompile(`msg="?listening[^\n]*url=(http://127\.0\.0\.1:\d+)`)

// startReplica runs `kvhost serve` (this binary, see TestMain) on a free
// loopback port with the small in-repo model and extra flags.
func startReplica(t *testing.T, name string, extra ...string) *replica {
	t.Helper()
	args := append([]string{"serve", "--model", testmodels.MustStories260K(t), "--addr", "127.0.0.1:0",
		"--device-memory", "256MiB", "--threads", "1", "--max-running-requests", "8", "--max-queue", "128",
		"--shutdown-timeout", "60s", "--log-level", "info"}, extra...)
	cmd := exec.Command(os.Args[0], args...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "KVHOST_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "KVHOST_TEST_AS_MAIN=1")
	r := &replica{name: name, cmd: cmd, log: &syncBuf{}, exited: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = r.log, r.log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { r.err = cmd.Wait(); r.stopped = time.Now(); close(r.exited) }()
	t.Cleanup(func() {
		select {
		case <-r.exited:
		default:
			_ = cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-r.exited:
			case <-time.After(20 * time.Second):
				_ = cmd.Process.Kill()
				<-r.exited
			}
		}
		if t.Failed() {
			t.Logf("%s log:\n%s", name, r.log.String())
		}
	})
	r.url = waitFor(t, name+" to listen", 60*time.Second, func() string {
		if m := listeningURL.FindStringSubmatch(r.log.String()); m != nil {
			return m[1]
		}
		return ""
	})
	waitFor(t, name+" to be ready", 300*time.Second, func() string {
		resp, err := http.Get(r.url + "/ready")
		if err != nil {
			return ""
		}
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			return "ok"
		}
		return ""
	})
	// The first scrape loads every configurator plugin for kvhost_plugin_info
	// (seconds under -race); take it here, not in the router's 50 ms loop.
	client := &http.Client{Timeout: 5 * time.Minute}
	resp, err := client.Get(r.url + "/metrics")
	if err != nil {
		t.Fatalf("%s: first scrape: %v", name, err)
	}
	resp.Body.Close()
	return r
}

// fleetRequest is one client request through the router and what came of it.
type fleetRequest struct {
	id        int
	maxTokens int
	endpoint  string // the replica that served it (X-Fleet-Endpoint)
	tokens    int    // usage.completion_tokens of the final chunk
	fp        string // system_fingerprint of the last chunk
	started   time.Time
	streaming time.Time // response headers arrived
	ended     time.Time
	err       error
}

// inflight tracks the streams open now, by replica.
type inflight struct {
	mu   sync.Mutex
	open map[int]*fleetRequest
}

func (f *inflight) add(r *fleetRequest) { f.mu.Lock(); f.open[r.id] = r; f.mu.Unlock() }
func (f *inflight) done(r *fleetRequest) {
	f.mu.Lock()
	delete(f.open, r.id)
	f.mu.Unlock()
}
func (f *inflight) on(endpoint string) []*fleetRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []*fleetRequest
	for _, r := range f.open {
		if r.endpoint == endpoint {
			out = append(out, r)
		}
	}
	return out
}

// streamVia posts a streaming completion to url and reads it to [DONE]; it
// is an error unless the stream completes with exactly maxTokens tokens
// (ignore_eos) and no error event.
func streamVia(url string, body map[string]any, r *fleetRequest, track *inflight) {
	r.started = time.Now()
	defer func() { r.ended = time.Now() }()
	b, _ := json.Marshal(body)
	resp, err := http.Post(url+"/v1/completions", "application/json", strings.NewReader(string(b)))
	if err != nil {
		r.err = err
		return
	}
	defer resp.Body.Close()
	r.endpoint, r.streaming = resp.Header.Get("X-Fleet-Endpoint"), time.Now()
	if resp.StatusCode != http.StatusOK {
		var e strings.Builder
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			e.WriteString(sc.Text())
		}
		r.err = fmt.Errorf("status %d: %s", resp.StatusCode, e.String())
		return
	}
	if track != nil {
		track.add(r)
		defer track.done(r)
	}
	sc := bufio.NewScanner(resp.Body)
	done := false
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		if data == "[DONE]" {
			done = true
			break
		}
		var chunk struct {
			SystemFingerprint string          `json:"system_fingerprint"`
			Error             json.RawMessage `json:"error"`
			Usage             *struct {
				CompletionTokens int `json:"completion_tokens"`
			} `json:"usage"`
		}
		if err := json.Unmarshal([]byte(data), &chunk); err != nil {
			r.err = fmt.Errorf("bad chunk %q: %w", data, err)
			return
		}
		if len(chunk.Error) > 0 {
			r.err = fmt.Errorf("error event: %s", chunk.Error)
			return
		}
		if chunk.SystemFingerprint != "" {
			r.fp = chunk.SystemFingerprint
		}
		if chunk.Usage != nil {
			r.tokens = chunk.Usage.CompletionTokens
		}
	}
	switch {
	case sc.Err() != nil:
		r.err = sc.Err()
	case !done:
		r.err = fmt.Errorf("stream ended without [DONE] after %d tokens", r.tokens)
	case r.tokens != r.maxTokens:
		r.err = fmt.Errorf("stream carried %d tokens, want %d", r.tokens, r.maxTokens)
	}
}

// fleet is three replicas behind a test router configured as the chart's
// endpoint picker.
func startFleet(t *testing.T, extra func(i int) []string) ([]*replica, *router, *httptest.Server) {
	t.Helper()
	root, err := testmodels.Root()
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := readPickerSettings(root)
	if err != nil {
		t.Fatal(err)
	}
	var reps []*replica
	var eps []*endpoint
	for i := range 3 {
		var args []string
		if extra != nil {
			args = extra(i)
		}
		r := startReplica(t, fmt.Sprintf("replica-%d", i), args...)
		reps = append(reps, r)
		eps = append(eps, &endpoint{name: r.name, url: r.url})
	}
	rt := newRouter(cfg, eps)
	t.Cleanup(rt.stop)
	front := httptest.NewServer(rt)
	t.Cleanup(front.Close)
	waitFor(t, "the router to see every replica", 300*time.Second, func() string {
		for _, ep := range eps {
			if !ep.ready.Load() || ep.load.Load() == nil {
				return ""
			}
		}
		return "ok"
	})
	return reps, rt, front
}

var fleetPrompts = []string{"Once upon a time", "The cat", "Lily and Tom", "One day", "The sun was", "A little bird",
	"Mom said", "In the park", "The big dog", "Sara had a"}

// TestFleetDrainUnderLoad: three kvhost processes behind a router that
// picks by the endpoint picker's metrics, 64 clients streaming through it;
// one replica — the one with the most streams open — gets SIGTERM mid-load.
// No request fails (a request the draining replica refuses before any byte
// goes to another replica, as a gateway retry would send it), every stream
// that replica had open completes in full, and it exits 0.
func TestFleetDrainUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping in -short mode: three kvhost processes under load")
	}
	reps, rt, front := startFleet(t, nil)
	track := &inflight{open: map[int]*fleetRequest{}}
	var (
		mu      sync.Mutex
		results []*fleetRequest
		stop    = make(chan struct{})
		wg      sync.WaitGroup
	)
	const clients = 64
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				r := &fleetRequest{id: c*100000 + i, maxTokens: 16 + 8*((c+i)%4)}
				streamVia(front.URL, map[string]any{"prompt": fleetPrompts[(c+i)%len(fleetPrompts)], "max_tokens": r.maxTokens,
					"temperature": 0, "stream": true, "ignore_eos": true, "stream_options": map[string]any{"include_usage": true}}, r, track)
				mu.Lock()
				results = append(results, r)
				mu.Unlock()
			}
		}()
	}
	stopClients := func() { close(stop); wg.Wait() }
	defer func() {
		select {
		case <-stop:
		default:
			stopClients()
		}
	}()

	// Mid-load: the replica with the most open streams (at least 2) drains.
	var victim *replica
	var open []*fleetRequest
	waitFor(t, "a replica with open streams", 60*time.Second, func() string {
		for _, r := range reps {
			if o := track.on(r.name); len(o) >= 2 && len(o) > len(open) {
				victim, open = r, o
			}
		}
		if victim == nil {
			return ""
		}
		return "ok"
	})
	sigterm := time.Now()
	if err := victim.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-victim.exited:
	case <-time.After(90 * time.Second):
		t.Fatalf("%s did not exit within 90 s of SIGTERM", victim.name)
	}
	if victim.err != nil {
		t.Fatalf("%s exited with %v after SIGTERM", victim.name, victim.err)
	}
	// The survivors keep serving: wait for 16 requests begun after the
	// exit to finish (seconds here; longer under -race on a loaded machine).
	after := time.Now()
	waitFor(t, "requests after the drain", 120*time.Second, func() string {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, r := range results {
			if r.started.After(after) {
				n++
			}
		}
		if n >= 16 {
			return "ok"
		}
		return ""
	})
	stopClients()

	failed, servedAfter := 0, map[string]int{}
	for _, r := range results {
		if r.err != nil {
			failed++
			if failed <= 5 {
				t.Errorf("request %d (via %q): %v", r.id, r.endpoint, r.err)
			}
		}
		if r.started.After(after) {
			servedAfter[r.endpoint]++
		}
	}
	if failed > 0 {
		t.Fatalf("%d of %d requests failed", failed, len(results))
	}
	for _, o := range open {
		if o.err != nil || o.ended.Before(sigterm) || o.tokens != o.maxTokens {
			t.Errorf("stream %d open on %s at SIGTERM: ended %v after it, %d/%d tokens, err %v", o.id, victim.name, o.ended.Sub(sigterm), o.tokens, o.maxTokens, o.err)
		}
	}
	if servedAfter[victim.name] > 0 {
		t.Errorf("%d requests started after %s exited were served by it", servedAfter[victim.name], victim.name)
	}
	served := 0
	for _, r := range reps {
		if r != victim {
			served += servedAfter[r.name]
		}
	}
	if served < 16 {
		t.Errorf("the survivors served %d requests begun after the drain (%v)", served, servedAfter)
	}
	if !strings.Contains(victim.log.String(), "shutting down: draining") || strings.Contains(victim.log.String(), "grace period over") {
		t.Errorf("%s did not drain cleanly:\n%s", victim.name, victim.log.String())
	}
	picked := map[string]int64{}
	for _, ep := range rt.eps {
		picked[ep.name] = ep.picked.Load()
	}
	t.Logf("%d requests by %d clients, 0 failed; %s drained %d open streams in %v and exited 0; %d requests retried on another replica; picks %v; after the exit %v",
		len(results), clients, victim.name, len(open), victim.stopped.Sub(sigterm).Round(time.Millisecond), rt.retries.Load(), picked, servedAfter)
}
