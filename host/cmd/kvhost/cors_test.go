package main

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// serveForTest runs `kvhost serve` with args on a free port and returns its
// URL and its stderr once it is ready; the server stops with the test.
func serveForTest(t *testing.T, args ...string) (string, *syncBuf) {
	t.Helper()
	return serveModelForTest(t, sharedModel(t), args...)
}

// serveModelForTest is serveForTest with the model given.
func serveModelForTest(t *testing.T, model string, args ...string) (string, *syncBuf) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var errb syncBuf
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, append([]string{"serve", "--model", model, "--addr", "127.0.0.1:0", "--device-memory", "256MiB", "--threads", "2"}, args...), &syncBuf{}, &errb)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Error("serve did not stop")
		}
	})
	url := waitFor(t, "the listening line", 10*time.Second, func() string {
		for _, line := range strings.Split(errb.String(), "\n") {
			if strings.Contains(line, "listening") {
				var rec map[string]any
				if json.Unmarshal([]byte(line), &rec) == nil {
					if u, ok := rec["url"].(string); ok {
						return u
					}
				}
				if m := listenURL.FindStringSubmatch(line); m != nil {
					return m[1]
				}
			}
		}
		return ""
	})
	waitFor(t, "ready", 60*time.Second, func() string {
		select {
		case err := <-done:
			t.Fatalf("serve ended: %v\n%s", err, errb.String())
		default:
		}
		resp, err := http.Get(url + "/ready")
		if err != nil {
			return ""
		}
		resp.Body.Close()
		if resp.StatusCode == 200 {
			return "ok"
		}
		return ""
	})
	return url, &errb
}

// TestCORSFromAnotherOriginInChromium: a page on one origin calls the API on
// another with fetch (JSON body and a bearer key, so the browser sends a
// preflight). With --allowed-origins naming the page's origin the call
// succeeds and the page can read X-Request-Id; without it the browser
// blocks it. The server logs JSON with the request's id.
func TestCORSFromAnotherOriginInChromium(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping in -short mode: end-to-end in Chromium")
	}
	bin := ""
	for _, n := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(n); err == nil {
			bin = p
			break
		}
	}
	if bin == "" {
		t.Skip("no chromium binary (install it with scripts/install-chromium.sh)")
	}
	page := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		w.Write([]byte(`<!doctype html><title>other origin</title><body>client</body>`))
	}))
	defer page.Close()
	// The API is reached as localhost, the page as 127.0.0.1: two origins.
	on, onLog := serveForTest(t, "--allowed-origins", page.URL, "--api-key", "k", "--log-format", "json")
	off, _ := serveForTest(t, "--api-key", "k")
	on = strings.Replace(on, "127.0.0.1", "localhost", 1)
	off = strings.Replace(off, "127.0.0.1", "localhost", 1)

	actx, cancelA := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(bin), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun,
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-dev-shm-usage", true), chromedp.UserDataDir(t.TempDir()))
	defer cancelA()
	ctx, cancel := chromedp.NewContext(actx)
	defer cancel()
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	c, done := context.WithTimeout(ctx, 60*time.Second)
	defer done()
	if err := chromedp.Do(c, chromedp.Navigate(page.URL+"/")); err != nil {
		t.Fatal(err)
	}
	call := func(api string) string {
		t.Helper()
		js := `(() => { window.__r = undefined;
  fetch(` + jsonString(api+"/v1/completions") + `, {method: 'POST', headers: {'Content-Type': 'application/json', 'Authorization': 'Bearer k', 'X-Request-Id': 'cors-e2e-1'},
    body: JSON.stringify({prompt: 'Once upon a time', max_tokens: 4, temperature: 0})})
  .then(async (r) => { const j = await r.json(); window.__r = 'ok ' + r.status + ' ' + r.headers.get('X-Request-Id') + ' ' + JSON.stringify(j.choices[0].text); },
        (e) => { window.__r = 'blocked ' + e.name; });
  return true; })()`
		if _, err := chromedp.Run(c, chromedp.Evaluate[bool](js)); err != nil {
			t.Fatal(err)
		}
		if _, err := chromedp.Run(c, chromedp.Poll[bool](`window.__r !== undefined`, chromedp.WithPollingInterval(50*time.Millisecond))); err != nil {
			t.Fatal(err)
		}
		v, err := chromedp.Run(c, chromedp.Evaluate[string](`window.__r`))
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	if got := call(on); !strings.HasPrefix(got, "ok 200 cors-e2e-1 ") || len(got) < len("ok 200 cors-e2e-1 \"x\"") {
		t.Errorf("with --allowed-origins: %q, want a 200 the page can read, with its request id", got)
	}
	if got := call(off); got != "blocked TypeError" {
		t.Errorf("without --allowed-origins: %q, want the browser to block it", got)
	}
	// JSON logs, one object per line, the request's lines carrying its id.
	found := false
	sc := bufio.NewScanner(strings.NewReader(onLog.String()))
	for sc.Scan() {
		var rec map[string]any
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			t.Fatalf("a log line is not JSON: %q", sc.Text())
		}
		if rec["request_id"] == "cors-e2e-1" && rec["path"] == "/v1/completions" && rec["status"] == 200.0 {
			found = true
		}
	}
	if !found {
		t.Errorf("no JSON access log line with request_id cors-e2e-1:\n%s", onLog.String())
	}
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
