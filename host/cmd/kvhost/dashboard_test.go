package main

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// TestDashboardOnRealServer drives the dashboard in headless Chromium
// against the real serve stack (stories260K, the built-in plugins): the page
// loads without console errors, the ledger's phase bar and allocator chart
// total /v1/memory's figures to the byte, and the plugins tab lists the
// registries' configurators and samplers. Screenshots land in
// $KVHOST_ARTIFACTS/real-server.
func TestDashboardOnRealServer(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping in -short mode: end-to-end in Chromium against the real server")
	}
	bin := os.Getenv("KVHOST_CHROMIUM")
	for _, n := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if bin != "" {
			break
		}
		if p, err := exec.LookPath(n); err == nil {
			bin = p
		}
	}
	if bin == "" {
		t.Skip("no chromium binary (install it with scripts/install-chromium.sh)")
	}
	ts, _, _ := fullServer(t, sharedModel(t), "k")
	actx, cancelA := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(bin), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun,
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true), chromedp.Flag("disable-quic", true), chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1400, 1000))
	defer cancelA()
	ctx, cancel := chromedp.NewContext(actx)
	defer cancel()
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	var mu sync.Mutex
	var errs []string
	go func() {
		for m, err := range chromedp.Console(ctx) {
			if err != nil {
				return
			}
			if m.Type == chromedp.ConsoleError || m.IsException() {
				mu.Lock()
				errs = append(errs, m.String())
				mu.Unlock()
			}
		}
	}()
	step := func(what string, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		c, done := context.WithTimeout(ctx, 30*time.Second)
		defer done()
		if err := chromedp.Do(c, actions...); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	waitJS := func(what, expr string) {
		t.Helper()
		c, done := context.WithTimeout(ctx, 30*time.Second)
		defer done()
		if _, err := chromedp.Run(c, chromedp.Poll[bool](expr, chromedp.WithPollingInterval(50*time.Millisecond))); err != nil {
			t.Fatalf("waiting for %s: %v", what, err)
		}
	}
	eval := func(expr string) int64 {
		t.Helper()
		c, done := context.WithTimeout(ctx, 10*time.Second)
		defer done()
		v, err := chromedp.Run(c, chromedp.Evaluate[int64](expr))
		if err != nil {
			t.Fatalf("evaluate %s: %v", expr, err)
		}
		return v
	}
	shot := func(name string) {
		c, done := context.WithTimeout(ctx, 20*time.Second)
		defer done()
		png, err := chromedp.Run(c, chromedp.FullScreenshot(100))
		dir := os.Getenv("KVHOST_ARTIFACTS")
		if err != nil || dir == "" {
			return
		}
		out := filepath.Join(dir, "real-server")
		if os.MkdirAll(out, 0o755) == nil {
			_ = os.WriteFile(filepath.Join(out, name+".png"), png, 0o644)
		}
	}

	step("load", chromedp.Navigate(ts.URL+"/"), chromedp.WaitVisible(chromedp.CSS(`body[data-ready="true"]`)))
	waitJS("ledger drawn", `document.getElementById('mem-phase-sum').dataset.start !== undefined`)
	resp, err := http.Get(ts.URL + "/v1/memory")
	if err != nil {
		t.Fatal(err)
	}
	var mem struct {
		StartFree int64 `json:"start_free_bytes"`
		Total     int64 `json:"total_bytes"`
		Free      int64 `json:"free_bytes"`
	}
	err = json.NewDecoder(resp.Body).Decode(&mem)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	if got := eval(`Chart.getChart(document.getElementById('mem-phases')).data.datasets.reduce((s, d) => s + d.data[0], 0)`); got != mem.StartFree {
		t.Fatalf("phase bar stacks to %d, /v1/memory start_free_bytes %d", got, mem.StartFree)
	}
	if got := eval(`Chart.getChart(document.getElementById('mem-alloc')).data.datasets.reduce((s, d) => s + d.data.reduce((a, b) => a + b, 0), 0)`); got != mem.Total-mem.Free {
		t.Fatalf("allocator chart holds %d, /v1/memory total−free %d", got, mem.Total-mem.Free)
	}
	shot("memory")
	step("plugins tab", chromedp.Click(chromedp.CSS(`#tabs button[data-tab="plugins"]`)), chromedp.WaitVisible(chromedp.CSS("#plugins")))
	waitJS("plugins listed", `document.getElementById('plugins').innerText.includes('mha') && document.getElementById('plugins').innerText.includes('typical')`)
	shot("plugins")
	mu.Lock()
	defer mu.Unlock()
	if len(errs) > 0 {
		t.Fatalf("console errors: %v", errs)
	}
}
