package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kvhost/kvhost/host/plugin/wasmtest"
)

// TestMain lets the test binary be the kvhost command: with
// KVHOST_TEST_AS_MAIN=1 it runs main (flags, signals, exit status), so the
// acceptance tests start a real server process and signal it.
func TestMain(m *testing.M) {
	if os.Getenv("KVHOST_TEST_AS_MAIN") == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// process is a kvhost serve started as its own process.
type process struct {
	cmd  *exec.Cmd
	url  string
	log  *syncBuf // written by the process's output copier
	done chan error
}

// startProcess runs "kvhost serve" with args and waits for /health.
func startProcess(t *testing.T, args ...string) *process {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	p := &process{url: "http://" + addr, log: &syncBuf{}, done: make(chan error, 1)}
	p.cmd = exec.Command(os.Args[0], append([]string{"serve", "--addr", addr}, args...)...)
	p.cmd.Env = append(os.Environ(), "KVHOST_TEST_AS_MAIN=1")
	p.cmd.Stdout, p.cmd.Stderr = p.log, p.log
	start := time.Now()
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.done <- p.cmd.Wait() }()
	t.Cleanup(func() {
		if p.cmd.ProcessState == nil {
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	})
	for {
		// The port answers 503 "loading" until the model is up.
		if resp, err := http.Get(p.url + "/health"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				break
			}
		}
		select {
		case err := <-p.done:
			t.Fatalf("server exited during start-up: %v\n%s", err, p.log)
		case <-time.After(50 * time.Millisecond):
		}
		if time.Since(start) > 5*time.Minute {
			t.Fatalf("server not up after 5 minutes:\n%s", p.log)
		}
	}
	t.Logf("server up in %v", time.Since(start).Round(time.Millisecond))
	return p
}

// rss is the process's resident memory in bytes.
func (p *process) rss(t *testing.T) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`VmRSS:\s+(\d+) kB`).FindSubmatch(b)
	if m == nil {
		t.Fatal("no VmRSS")
	}
	kb, _ := strconv.ParseInt(string(m[1]), 10, 64)
	return kb << 10
}

// stop sends SIGTERM and requires exit status 0 within limit.
func (p *process) stop(t *testing.T, limit time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-p.done:
		if err != nil {
			t.Fatalf("exit after SIGTERM: %v\n%s", err, p.log)
		}
	case <-time.After(limit):
		t.Fatalf("no exit %v after SIGTERM", limit)
	}
	return time.Since(start)
}

// timed runs an HTTP request and returns its status, body and duration.
func timed(t *testing.T, method, url, key string, body []byte) (int, string, time.Duration) {
	t.Helper()
	req, _ := http.NewRequest(method, url, bytes.NewReader(body))
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	if body != nil && method == http.MethodPost {
		req.Header.Set("Content-Type", "application/json")
	}
	start := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), time.Since(start)
}

// attackWhileLive sends the attacking request and, while it runs, checks
// the server stays live: /health within 1 s and a greedy request within
// 2 s. The attacking request itself must complete (its policy's steps fall
// back), never fail.
func attackWhileLive(t *testing.T, p *process, policy string) time.Duration {
	t.Helper()
	body := fmt.Sprintf(`{"prompt":"Once upon a time","max_tokens":8,"temperature":0.7,"sampler":%q,"sampler_params":{"attack":1}}`, policy)
	type result struct {
		code int
		body string
		d    time.Duration
	}
	res := make(chan result, 1)
	go func() {
		code, b, d := timed(t, http.MethodPost, p.url+"/v1/completions", "", []byte(body))
		res <- result{code, b, d}
	}()
	if code, b, d := timed(t, http.MethodGet, p.url+"/health", "", nil); code != 200 || d > time.Second {
		t.Errorf("%s: /health %d after %v: %s", policy, code, d, b)
	}
	greedy := []byte(`{"prompt":"The cat","max_tokens":4,"temperature":0}`)
	if code, b, d := timed(t, http.MethodPost, p.url+"/v1/completions", "", greedy); code != 200 || d > 2*time.Second {
		t.Errorf("%s: greedy request %d after %v: %s", policy, code, d, b)
	}
	r := <-res
	if r.code != 200 || !strings.Contains(r.body, `"finish_reason"`) {
		t.Errorf("%s: the attacking request got %d: %s", policy, r.code, r.body)
	}
	return r.d
}

// TestSandboxEscapesContained is issue 12's acceptance: every escape as a
// hostile module — the fuel refill (invalid: global.set 0 with no
// globals), bulk memory and table stall loops, the table growth bomb, 3
// million empty functions, the always-looping module — loaded from
// --plugins (samplers and configurators) and uploaded (samplers), against
// a real server process. Throughout, /health answers within 1 s, another
// greedy request completes within 2 s, attacking requests complete on the
// default policy, the folder's junk (a link to /dev/zero, a directory
// named x.wasm) is skipped, configurators are recognised as such, memory
// stays within its bound, and SIGTERM exits 0 within the shutdown timeout.
func TestSandboxEscapesContained(t *testing.T) {
	model := sharedModel(t)
	dir := t.TempDir()
	write := func(name string, b []byte) {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, a := range wasmtest.Attacks {
		write("s-"+string(a)+".wasm", wasmtest.Sampler("s-"+string(a), a, false))
		write("c-"+string(a)+".wasm", wasmtest.Configurator("c-"+string(a), a))
	}
	write("s-always.wasm", wasmtest.Sampler("s-always", wasmtest.Spin, true))
	empty := wasmtest.EmptyFunctions(3_000_000)
	write("empty3m.wasm", empty)
	if err := os.Symlink("/dev/zero", filepath.Join(dir, "zero.wasm")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "x.wasm"), 0o755); err != nil {
		t.Fatal(err)
	}
	p := startProcess(t, "--model", model, "--device-memory", "256MiB", "--plugins", dir,
		"--admin-key", "k", "--shutdown-timeout", "5s", "--sampler-disable-after", "-1")
	baseline := p.rss(t)

	// The folder, as read at start-up.
	log := p.log.String()
	for _, want := range []string{"zero.wasm: not a regular file", "x.wasm: not a regular file",
		`msg="configurator plugin refused; the others are tried" plugin=c-fuel-refill`, `plugin=empty3m`, `KV layout configured" plugin=mha`,
		`msg="sampler file refused" file=` + filepath.Join(dir, "s-always.wasm")} {
		if !strings.Contains(log, want) {
			t.Errorf("start-up log lacks %q", want)
		}
	}
	if m := regexp.MustCompile(`level=ERROR.*c-[a-z-]+\.wasm`).FindString(log); m != "" {
		t.Errorf("a configurator logged as a refused sampler: %s", m)
	}

	// Each attack from the folder, then uploaded.
	for _, a := range wasmtest.Attacks {
		if a.Valid() {
			d := attackWhileLive(t, p, "s-"+string(a))
			t.Logf("%-12s from --plugins: attacking request completed (default policy) in %v", a, d.Round(time.Millisecond))
		}
		name := "u-" + string(a)
		code, body, d := timed(t, http.MethodPut, p.url+"/admin/samplers/"+name, "k", wasmtest.Sampler(name, a, false))
		switch {
		case !a.Valid():
			if code != 422 || !strings.Contains(body, "global 0 out of range") {
				t.Errorf("%s upload: %d %s", a, code, body)
			}
			t.Logf("%-12s upload refused in %v", a, d.Round(time.Millisecond))
			continue
		case code != 200:
			t.Fatalf("%s upload: %d %s", a, code, body)
		}
		d = attackWhileLive(t, p, name)
		t.Logf("%-12s uploaded:     attacking request completed (default policy) in %v", a, d.Round(time.Millisecond))
	}
	for _, tc := range []struct {
		name string
		wasm []byte
		want string
	}{
		{"empty3m", empty, "functions: 3000000 is over the limit of 65536"},
		{"always", wasmtest.Sampler("always", wasmtest.Spin, true), "refused at self-test"},
	} {
		code, body, d := timed(t, http.MethodPut, p.url+"/admin/samplers/"+tc.name, "k", tc.wasm)
		if code != 422 || !strings.Contains(body, tc.want) {
			t.Errorf("%s upload: %d %s", tc.name, code, body)
		}
		t.Logf("%-12s upload refused in %v", tc.name, d.Round(time.Millisecond))
		if code, _, d := timed(t, http.MethodGet, p.url+"/health", "", nil); code != 200 || d > time.Second {
			t.Errorf("/health after the %s upload: %d in %v", tc.name, code, d)
		}
	}
	// Containment times, as the server logged them: the longest step of
	// each attacking policy before its fuel ended it.
	longest := map[string]time.Duration{}
	var order []string
	for _, m := range regexp.MustCompile(`policy=(\S+) .*ran out of its fuel budget of \d+ after (\S+)`).FindAllStringSubmatch(p.log.String(), -1) {
		d, err := time.ParseDuration(m[2])
		if err != nil {
			continue
		}
		if _, ok := longest[m[1]]; !ok {
			order = append(order, m[1])
		}
		longest[m[1]] = max(longest[m[1]], d)
	}
	for _, name := range order {
		t.Logf("%-16s longest step before its fuel ran out: %v", name, longest[name])
	}

	// Memory: every instance is capped (samplers at 64 MiB of linear
	// memory, tables at 65,536 entries = 512 KiB); the four bulk-memory
	// attackers declare 16 MiB each and their pools may keep up to
	// MaxIdle (4) instances: 256 MiB, plus the Go heap's slack before the
	// collector returns freed instances' memory. The bound: 384 MiB over
	// the baseline (the table growth bomb alone grew RSS by 2.5 GB, and a
	// loop of it ended the process, before the cap).
	after := p.rss(t)
	t.Logf("RSS %d MiB before the attacks, %d MiB after", baseline>>20, after>>20)
	if after > baseline+384<<20 {
		t.Errorf("RSS grew from %d MiB to %d MiB, over the 384 MiB margin", baseline>>20, after>>20)
	}
	d := p.stop(t, 15*time.Second)
	t.Logf("SIGTERM: exited 0 in %v", d.Round(time.Millisecond))
	sc := bufio.NewScanner(strings.NewReader(p.log.String()))
	for sc.Scan() {
		if strings.Contains(sc.Text(), "panic") {
			t.Errorf("log: %s", sc.Text())
		}
	}
}
