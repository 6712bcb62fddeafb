package web

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/chromedp"
)

// findChromium returns the browser for the end-to-end tests: $KVHOST_CHROMIUM,
// else the first Chromium or Chrome on PATH.
func findChromium() string {
	if p := os.Getenv("KVHOST_CHROMIUM"); p != "" {
		return p
	}
	for _, n := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(n); err == nil {
			return p
		}
	}
	return ""
}

// artifacts is where screenshots go: $KVHOST_ARTIFACTS/web-e2e, else a
// temporary directory of the test.
func artifacts(t *testing.T) string {
	dir := t.TempDir()
	if d := os.Getenv("KVHOST_ARTIFACTS"); d != "" {
		dir = filepath.Join(d, "web-e2e")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

type console struct {
	mu   sync.Mutex
	msgs []chromedp.ConsoleMessage
}

func (c *console) add(m chromedp.ConsoleMessage) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.msgs = append(c.msgs, m)
}

// errors returns the error-level messages and exceptions not matched by
// allow.
func (c *console) errors(allow func(chromedp.ConsoleMessage) bool) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, m := range c.msgs {
		if (m.Type == chromedp.ConsoleError || m.IsException()) && (allow == nil || !allow(m)) {
			out = append(out, m.String()+" @ "+m.URL)
		}
	}
	return out
}

// The page under test, one browser for the whole flow.
type page struct {
	t    *testing.T
	ctx  context.Context
	dir  string
	host *fakeHost
	url  string
	log  *console
}

func (p *page) do(what string, steps ...chromedp.Action[chromedp.Void]) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, 20*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		p.shot("failed-" + strings.ReplaceAll(what, " ", "-"))
		p.t.Fatalf("%s: %v\nconsole: %v", what, err, p.log.errors(nil))
	}
}

func eval[T any](p *page, expr string) T {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, 10*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		p.t.Fatalf("evaluate %s: %v", expr, err)
	}
	return v
}

// waitJS waits until the expression is truthy.
func (p *page) waitJS(what, expr string) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, 20*time.Second)
	defer cancel()
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](expr, chromedp.WithPollingInterval(50*time.Millisecond))); err != nil {
		p.shot("failed-" + strings.ReplaceAll(what, " ", "-"))
		p.t.Fatalf("waiting for %s (%s): %v\nconsole: %v", what, expr, err, p.log.errors(nil))
	}
}

// waitAcrossNavigation is waitJS for an expression that becomes true on a
// page that is reloading: evaluation errors while the old document goes
// away count as false.
func (p *page) waitAcrossNavigation(what, expr string) {
	p.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(p.ctx, 2*time.Second)
		ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool](expr))
		cancel()
		if err == nil && ok {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	p.shot("failed-" + strings.ReplaceAll(what, " ", "-"))
	p.t.Fatalf("waiting for %s (%s)\nconsole: %v", what, expr, p.log.errors(nil))
}

func (p *page) shot(name string) {
	ctx, cancel := context.WithTimeout(p.ctx, 20*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		p.t.Logf("screenshot %s: %v", name, err)
		return
	}
	path := filepath.Join(p.dir, name+".png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		p.t.Fatal(err)
	}
	p.t.Logf("screenshot: %s", path)
}

func (p *page) tab(name string) {
	p.t.Helper()
	p.do("open tab "+name, chromedp.Click(chromedp.CSS(`#tabs button[data-tab="`+name+`"]`)),
		chromedp.WaitVisible(chromedp.CSS("#"+name)))
}

func openPage(t *testing.T, setup ...func(*fakeHost)) *page {
	bin := findChromium()
	if bin == "" {
		t.Skip("web e2e: no chromium binary found (install it with scripts/install-chromium.sh, or set KVHOST_CHROMIUM)")
	}
	host := newFakeHost(t)
	for _, f := range setup {
		f(host)
	}
	srv := httptest.NewServer(host.handler())
	t.Cleanup(srv.Close)
	t.Cleanup(func() {
		select {
		case <-host.release:
		default:
			close(host.release)
		}
	})
	actx, cancelA := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(bin), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun,
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true), chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-dev-shm-usage", true), chromedp.UserDataDir(profileDir(t)),
		chromedp.WindowSize(1400, 1000))
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); cancelA() })
	// Start the browser without a deadline (a timeout here would bound the
	// browser's whole life), then subscribe to the console before loading.
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start chromium %s: %v", bin, err)
	}
	log := &console{}
	msgs := chromedp.Console(ctx)
	go func() {
		for m, err := range msgs {
			if err != nil {
				return
			}
			log.add(m)
		}
	}()
	return &page{t: t, ctx: ctx, dir: artifacts(t), host: host, url: srv.URL, log: log}
}

func TestE2EDashboard(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping in -short mode: end-to-end in Chromium")
	}
	p := openPage(t)
	var fixture struct {
		StartFree  int64 `json:"start_free_bytes"`
		Total      int64 `json:"total_bytes"`
		Free       int64 `json:"free_bytes"`
		Allocators []struct {
			DeviceBytes int64 `json:"device_bytes"`
		} `json:"allocators"`
	}
	if err := json.Unmarshal(p.host.memory, &fixture); err != nil {
		t.Fatal(err)
	}

	t.Run("loads without console errors", func(t *testing.T) {
		p.t = t
		p.do("load", chromedp.Navigate(p.url+"/"), chromedp.WaitVisible(chromedp.CSS(`body[data-ready="true"]`)))
		p.waitJS("ledger drawn", `document.getElementById('mem-phase-sum').dataset.start !== undefined`)
		p.waitJS("KV live chart has points", `(Chart.getChart(document.getElementById('mem-kv-live'))?.data.labels.length ?? 0) >= 2`)
		// Each pool on its own: kind (with a window's size), tokens or slots.
		kvTable := eval[string](p, `document.getElementById('mem-kv-table').innerText`)
		for _, want := range []string{"window 4,096", "64 slots", "3 slots (4.7%)", "B/slot", "65,536 tokens"} {
			if !strings.Contains(kvTable, want) {
				t.Errorf("KV pool table lacks %q:\n%s", want, kvTable)
			}
		}
		// Three pools, and the cached share of each token pool (dashed).
		if n := eval[float64](p, `Chart.getChart(document.getElementById('mem-kv-live')).data.datasets.length`); n != 5 {
			t.Errorf("live KV chart has %v lines, want 5 (3 pools, 2 token pools' cached share)", n)
		}
		if errs := p.log.errors(nil); len(errs) > 0 {
			t.Fatalf("console errors on load: %v", errs)
		}
		if title := eval[string](p, `document.title`); title != "kvhost" {
			t.Fatalf("title %q", title)
		}
		p.shot("01-memory")
	})

	t.Run("prefix cache hit rate and cached share", func(t *testing.T) {
		p.t = t
		// The fake's work: 3,300 of 4,000 looked-up tokens hit; 512 of
		// 4,096 and 256 of 1,024 pages held by the cache alone.
		p.waitJS("prefix line", `document.getElementById('mem-prefix').dataset.hitRate === '82.5'`)
		if got := eval[string](p, `document.getElementById('mem-prefix').dataset.cachedShare`); got != "15.0" {
			t.Errorf("cached share %q, want 15.0 (768 of 5,120 pages)", got)
		}
		line := eval[string](p, `document.getElementById('mem-prefix').textContent`)
		for _, want := range []string{"hit rate 82.5%", "3,300 of 4,000 prompt tokens", "cached 12,288 tokens, 15.0%"} {
			if !strings.Contains(line, want) {
				t.Errorf("prefix line lacks %q: %s", want, line)
			}
		}
		// The dashed line of the full pool is its cached share, 12.5%.
		last := eval[float64](p, `(() => { const d = Chart.getChart(document.getElementById('mem-kv-live')).data.datasets.find((x) => x.label === 'full (full) cached'); return d.data[d.data.length - 1]; })()`)
		if last != 12.5 {
			t.Errorf("cached share of the full pool charted %v%%, want 12.5", last)
		}
		// /v1/memory's table: 200 of the full pool's 4,096 pages cached.
		cells := eval[[]string](p, `[...document.querySelectorAll('#mem-kv-table td.cached')].map((e) => e.textContent)`)
		if fmt.Sprint(cells) != "[3,200 tokens (4.9%) 0 tokens (0.0%) —]" {
			t.Errorf("KV table's prefix cache column %q", cells)
		}
	})

	t.Run("ledger chart totals match /v1/memory", func(t *testing.T) {
		p.t = t
		// The phase bar stacks every phase delta and the final free: its
		// total must be the start free of /v1/memory, to the byte.
		stacked := eval[int64](p, `Chart.getChart(document.getElementById('mem-phases')).data.datasets.reduce((s, d) => s + d.data[0], 0)`)
		if stacked != fixture.StartFree {
			t.Fatalf("phase bar totals %d, /v1/memory start_free_bytes %d", stacked, fixture.StartFree)
		}
		var held int64
		for _, a := range fixture.Allocators {
			held += a.DeviceBytes
		}
		if held != fixture.Total-fixture.Free {
			t.Fatalf("fixture: allocators %d != total-free %d", held, fixture.Total-fixture.Free)
		}
		chartHeld := eval[int64](p, `Chart.getChart(document.getElementById('mem-alloc')).data.datasets.reduce((s, d) => s + d.data.reduce((a, b) => a + b, 0), 0)`)
		tableHeld := eval[int64](p, `Number(document.querySelector('#mem-alloc-total td:last-child').dataset.bytes)`)
		if chartHeld != held || tableHeld != held {
			t.Fatalf("allocator chart %d, table %d; /v1/memory allocators hold %d", chartHeld, tableHeld, held)
		}
		if ok := eval[bool](p, `!!document.querySelector('#mem-alloc-sum .check-ok') && !!document.querySelector('#mem-phase-sum .check-ok')`); !ok {
			t.Fatal("the page does not show both balances as checked")
		}
	})

	t.Run("work tab polls", func(t *testing.T) {
		p.t = t
		p.tab("work")
		p.waitJS("two work samples", `(Chart.getChart(document.getElementById('work-rate'))?.data.labels.length ?? 0) >= 2 && Number(document.querySelector('#work-tiles [data-key="tokens/s in"] .v').textContent) > 0`)
		if got := eval[string](p, `document.querySelector('#work-tiles [data-key="running"] .v').textContent`); got != "3" {
			t.Fatalf("running tile %q", got)
		}
		if got := eval[string](p, `document.querySelector('#work-tiles [data-key="prefix cache hits"] .v').textContent`); got != "82.5%" {
			t.Fatalf("prefix cache tile %q, want 82.5%%", got)
		}
		if got := eval[string](p, `document.querySelector('#work-errors tbody td:last-child').textContent`); got != "queue_full" {
			t.Fatalf("recent error kind %q", got)
		}
		p.shot("02-work")
	})

	t.Run("sampler upload swaps the version shown", func(t *testing.T) {
		p.t = t
		p.tab("plugins")
		p.waitJS("samplers listed", `!!document.querySelector('#plugins-samplers tr[data-name="typical"]')`)
		version := `document.querySelector('#plugins-samplers tr[data-name="typical"] .version').textContent`
		if v := eval[string](p, version); v != "1.0.0" {
			t.Fatalf("version before %q", v)
		}
		dir := t.TempDir()
		good := filepath.Join(dir, "typical.wasm")
		bad := filepath.Join(dir, "notes.wasm")
		if err := os.WriteFile(good, []byte("\x00asm\x01\x00\x00\x00\x01\x04\x01\x60\x00\x00"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(bad, []byte("#!/bin/sh\necho not wasm\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		// The page refuses what the API would: no admin key, a bad name, a
		// file that is not wasm — without sending anything.
		refusals := []struct{ name, file, key, want string }{
			{"typical", good, "", "admin key"},
			{"Typical!", good, adminKey, "not a valid policy name"},
			{"typical", bad, adminKey, "not a WebAssembly module"},
		}
		for _, r := range refusals {
			p.do("fill upload form", setValue("#admin-key", r.key), setValue("#upload-name", r.name),
				chromedp.SetUploadFiles(chromedp.CSS("#upload-file"), []string{r.file}), chromedp.Click(chromedp.CSS("#upload-submit")))
			p.waitJS("refusal "+r.want, `document.getElementById('upload-status').textContent.includes(`+jsString(r.want)+`)`)
		}
		p.host.mu.Lock()
		puts := p.host.puts
		p.host.mu.Unlock()
		if puts != 0 {
			t.Fatalf("%d uploads reached the API despite failing validation", puts)
		}
		// A wrong key reaches the API and shows its 401 message.
		p.do("upload with wrong key", setValue("#admin-key", "wrong"), setValue("#upload-name", "typical"),
			chromedp.SetUploadFiles(chromedp.CSS("#upload-file"), []string{good}), chromedp.Click(chromedp.CSS("#upload-submit")))
		p.waitJS("401 shown", `document.getElementById('upload-status').textContent.includes('wrong admin key')`)
		// The real upload.
		p.do("upload", setValue("#admin-key", adminKey), setValue("#upload-name", "typical"),
			chromedp.SetUploadFiles(chromedp.CSS("#upload-file"), []string{good}), chromedp.Click(chromedp.CSS("#upload-submit")))
		p.waitJS("version swapped", version+` === '1.0.1'`)
		if st := eval[string](p, `document.getElementById('upload-status').textContent`); !strings.Contains(st, "swapped to version 1.0.1") {
			t.Fatalf("status %q", st)
		}
		p.shot("03-plugins")
	})

	t.Run("playground streams a completion", func(t *testing.T) {
		p.t = t
		p.tab("playground")
		p.waitJS("sampler form", `document.getElementById('play-sampler').value === 'typical' && !!document.querySelector('#play-params input[name="mass"]')`)
		p.do("fill prompt", setValue("#play-prompt", "Once upon a time"),
			setValue(`#play-params input[name="mass"]`, "0.5"), chromedp.Click(chromedp.CSS("#play-run")))
		// The fake holds the stream after streamHead tokens: the page must
		// show them before the rest exists.
		p.waitJS("partial stream", `document.querySelectorAll('#play-output .tok[data-lp]').length === `+itoa(streamHead))
		if done := eval[bool](p, `document.getElementById('play-output').dataset.done === 'true'`); done {
			t.Fatal("page finished before the stream did")
		}
		p.shot("04-playground-partial")
		close(p.host.release)
		p.waitJS("stream done", `document.getElementById('play-output').dataset.done === 'true'`)
		got := eval[string](p, `[...document.querySelectorAll('#play-output .tok')].map((e) => e.textContent).join('')`)
		if want := strings.Join(streamTokens, ""); got != want {
			t.Fatalf("output %q, want %q", got, want)
		}
		p.host.mu.Lock()
		var req map[string]any
		_ = json.Unmarshal(p.host.lastBody, &req)
		p.host.mu.Unlock()
		params, _ := req["sampler_params"].(map[string]any)
		if req["sampler"] != "typical" || params["mass"] != 0.5 || params["temperature"] != 0.8 || req["model"] != "stories260K" || req["logprobs"] != 3.0 {
			t.Fatalf("request body %v", req)
		}
		// Hover the fourth token: the tip shows its logprob.
		box := eval[[]float64](p, `(() => { const r = document.querySelectorAll('#play-output .tok[data-lp]')[3].getBoundingClientRect(); return [r.left + r.width / 2, r.top + r.height / 2]; })()`)
		p.do("hover token", chromedp.MouseEvent(input.DispatchMouseEventTypeMouseMoved, box[0], box[1]))
		p.waitJS("tooltip", `!document.getElementById('tok-tip').hidden && document.getElementById('tok-tip').textContent.includes('logprob -1.0000')`)
		p.shot("05-playground-hover")
	})

	t.Run("plan shows a predicted ledger", func(t *testing.T) {
		p.t = t
		p.tab("plan")
		p.do("plan", setValue("#plan-gpu", "H200"), chromedp.Click(chromedp.CSS("#plan-run")))
		p.waitJS("plan drawn", `document.getElementById('plan-phase-sum').dataset.start !== undefined`)
		if got := eval[int64](p, `Number(document.getElementById('plan-phase-sum').dataset.sum)`); got != fixture.StartFree {
			t.Fatalf("plan phase total %d, want %d", got, fixture.StartFree)
		}
		if s := eval[string](p, `document.getElementById('plan-summary').textContent`); !strings.Contains(s, "on H200") || !strings.Contains(s, "prefill activations") {
			t.Fatalf("summary %q", s)
		}
		p.shot("06-plan")
	})

	t.Run("no console errors beyond the refused upload", func(t *testing.T) {
		p.t = t
		// The 401 of the wrong-key upload is the one error the browser logs.
		errs := p.log.errors(func(m chromedp.ConsoleMessage) bool {
			return m.Source == "network" && strings.Contains(m.Text, "401") && strings.Contains(m.URL, "/admin/samplers/typical")
		})
		if len(errs) > 0 {
			t.Fatalf("console errors: %v", errs)
		}
	})
}

// TestE2EAPIKey: against a host that requires an API key on everything but
// the static shell, the page loads, asks for the key instead of failing
// panel by panel, and once it is typed sends it as a bearer header on
// every request (its own JSON routes included) and keeps it across a
// reload of the tab.
func TestE2EAPIKey(t *testing.T) {
	const key = "sk-dashboard"
	p := openPage(t, func(h *fakeHost) { h.apiKey = key })
	p.do("load", chromedp.Navigate(p.url+"/"), chromedp.WaitVisible(chromedp.CSS(`body[data-ready="true"]`)))
	p.waitJS("asks for the key", `document.body.dataset.needsKey === 'true' && !document.getElementById('banner').hidden`+
		` && document.getElementById('banner').textContent.includes('API key') && document.getElementById('api-key').classList.contains('wanted')`)
	if focused := eval[string](p, `document.activeElement.id`); focused != "api-key" {
		t.Fatalf("focus on %q, want the API key field", focused)
	}
	p.shot("10-key-asked")
	p.host.mu.Lock()
	refused, authorized := p.host.refused["/ui/api/config"], len(p.host.authorized)
	p.host.mu.Unlock()
	if refused != 1 || authorized != 0 {
		t.Fatalf("before the key: /ui/api/config refused %d times, %d paths authorized", refused, authorized)
	}
	// Typing the key (change) reloads the page with it.
	p.do("type the key", setValue("#api-key", key))
	p.waitAcrossNavigation("ledger drawn with the key", `document.body.dataset.ready === 'true' && !document.body.dataset.needsKey`+
		` && document.getElementById('mem-phase-sum').dataset.start !== undefined`)
	p.tab("work")
	p.waitJS("work polls", `(Chart.getChart(document.getElementById('work-rate'))?.data.labels.length ?? 0) >= 2`)
	p.tab("plugins")
	p.waitJS("plugins listed", `!!document.querySelector('#plugins-samplers tr[data-name="typical"]')`)
	p.shot("11-key-given")
	p.host.mu.Lock()
	for _, path := range []string{"/ui/api/config", "/ui/api/work", "/ui/api/plugins", "/v1/memory", "/v1/models"} {
		if p.host.authorized[path] == 0 {
			t.Errorf("%s never reached the host with the key (authorized %v)", path, p.host.authorized)
		}
	}
	refusedAfter := 0
	for _, n := range p.host.refused {
		refusedAfter += n
	}
	p.host.mu.Unlock()
	if refusedAfter != 1 {
		t.Errorf("requests without the key after it was typed: %d refused in all", refusedAfter-1)
	}
	// A reload of the tab keeps the key (sessionStorage).
	p.do("reload", chromedp.Reload(), chromedp.WaitVisible(chromedp.CSS(`body[data-ready="true"]`)))
	p.waitJS("ledger drawn after reload", `!document.body.dataset.needsKey && document.getElementById('mem-phase-sum').dataset.start !== undefined`)
	// The only console errors are the refused first load's.
	if errs := p.log.errors(func(m chromedp.ConsoleMessage) bool {
		return m.Source == "network" && strings.Contains(m.Text, "401") && strings.Contains(m.URL, "/ui/api/config")
	}); len(errs) > 0 {
		t.Fatalf("console errors: %v", errs)
	}
}

// setValue sets a form control's value as typing would leave it (the
// chromedp action refuses empty values on some controls).
func setValue(sel, v string) chromedp.Action[chromedp.Void] {
	return chromedp.Evaluate[chromedp.Void](`(() => { const e = document.querySelector(` + jsString(sel) + `); e.value = ` + jsString(v) +
		`; e.dispatchEvent(new Event('input', {bubbles: true})); e.dispatchEvent(new Event('change', {bubbles: true})); })()`)
}

func jsString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

func itoa(n int) string {
	b, _ := json.Marshal(n)
	return string(b)
}

// profileDir is a browser profile folder removed after the test. Chromium's
// helper processes can still be writing into it for a moment after the
// browser is cancelled (seen on a loaded machine: t.TempDir's cleanup failed
// with "directory not empty"), so removal is retried for a while.
func profileDir(t *testing.T) string {
	dir, err := os.MkdirTemp("", "kvhost-chromium-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		var err error
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
			if err = os.RemoveAll(dir); err == nil {
				return
			}
		}
		t.Logf("browser profile %s not removed: %v", dir, err)
	})
	return dir
}
