package main

import (
	"context"
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
	"time"
)

// probe measures one figure of one engine.
type probe func(ctx context.Context) (float64, error)

// row is one line of the comparison: kvhost's figure (and, for decode, its
// eager-mode figure beside the captured-graph one serve uses), llama.cpp's,
// and every sample of each.
type row struct {
	group, name string
	unit        string
	lowerBetter bool
	kv, ll, ex  probe // ex: kvhost's secondary figure (eager decode), may be nil
	kvS, llS    []float64
	exS         []float64
	errs        []string
}

func (r *row) title() string { return r.group + " " + r.name }

// measure runs both engines once, kvhost first in even rounds.
func (r *row) measure(ctx context.Context, round int, stdout io.Writer) {
	do := func(p probe, into *[]float64, who string) {
		if p == nil {
			return
		}
		v, err := p(ctx)
		if err != nil {
			r.errs = append(r.errs, fmt.Sprintf("%s: %v", who, err))
			return
		}
		*into = append(*into, v)
	}
	if round%2 == 0 {
		do(r.kv, &r.kvS, "kvhost")
		do(r.ll, &r.llS, "llama.cpp")
	} else {
		do(r.ll, &r.llS, "llama.cpp")
		do(r.kv, &r.kvS, "kvhost")
	}
	do(r.ex, &r.exS, "kvhost eager")
	last := func(v []float64) string {
		if len(v) == 0 {
			return "—"
		}
		return strconv.FormatFloat(v[len(v)-1], 'g', 4, 64)
	}
	fmt.Fprintf(stdout, "round %d  %-36s kvhost %s  llama.cpp %s %s\n", round+1, r.title(), last(r.kvS), last(r.llS), r.unit)
}

// rows lists the table (decode, batch decode, prefill, launch,
// memory) for every size and file type asked for.
func (o *options) rows() []*row {
	var rows []*row
	add := func(r *row) {
		if o.only == nil || o.only.MatchString(r.title()) {
			rows = append(rows, r)
		}
	}
	for _, batch := range []int{1, 16} {
		for _, size := range o.sizes {
			for _, t := range o.types {
				m := o.model(size, t)
				sub := fmt.Sprintf("^%s-%s$/^batch=%d$", size, t, batch)
				r := &row{group: fmt.Sprintf("decode b=%d", batch), name: size + " " + t, unit: "tok/s",
					kv: o.kvBench("^BenchmarkDecodeGraphs$/"+sub, "128x"),
					ex: o.kvBench("^BenchmarkDecode$/"+sub, "128x")}
				if batch == 1 {
					r.ll = o.llamaBench(m, "-p", "0", "-n", "128")
				} else {
					r.ll = o.llamaBatched(m, batch)
				}
				add(r)
			}
		}
	}
	for _, size := range o.sizes {
		for _, t := range o.types {
			for _, n := range []int{128, 512, 2048} {
				// pp512/pp2048 for the rows (medium f32, f16, Q4_K_M); pp128 for all.
				if n > 128 && !(size == "medium" && (t == "f32" || t == "f16" || t == "q4_k_m")) {
					continue
				}
				runs := "3x"
				if n == 2048 {
					runs = "1x"
				}
				add(&row{group: fmt.Sprintf("prefill pp%d", n), name: size + " " + t, unit: "tok/s",
					kv: o.kvBench(fmt.Sprintf("^BenchmarkPrefill$/^%s-%s$/^tokens=%d$", size, t, n), runs),
					ll: o.llamaBench(o.model(size, t), "-p", strconv.Itoa(n), "-n", "0")})
			}
		}
	}
	if has(o.sizes, "medium") && has(o.types, "f16") {
		m := o.model("medium", "f16")
		add(&row{group: "launch→/health warm", name: "medium f16", unit: "s", lowerBetter: true,
			kv: o.launch(o.warmCache(m)), ll: o.llamaLaunch(m)})
		add(&row{group: "launch→/health cold", name: "medium f16", unit: "s", lowerBetter: true,
			kv: o.launch(&startCache{o: o, model: m}), ll: o.llamaLaunch(m)})
	}
	for _, c := range [][2]string{{"small", "f16"}, {"medium", "f16"}, {"medium", "q4_k_m"}} {
		if has(o.sizes, c[0]) && has(o.types, c[1]) {
			m := o.model(c[0], c[1])
			add(&row{group: "RSS serving", name: c[0] + " " + c[1], unit: "MiB", lowerBetter: true,
				kv: o.serveRSS(o.warmCache(m)), ll: o.llamaRSS(m)})
			add(&row{group: "RSS serving, first start", name: c[0] + " " + c[1], unit: "MiB", lowerBetter: true,
				kv: o.serveRSS(&startCache{o: o, model: m}), ll: o.llamaRSS(m)})
		}
	}
	return rows
}

// warmCache is model's warm start cache (one folder for every model).
func (o *options) warmCache(model string) *startCache {
	return &startCache{o: o, model: model, warm: filepath.Join(o.work, "cache-warm")}
}

func has(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

var tokPerSec = regexp.MustCompile(`([0-9.]+(?:e[+-]?[0-9]+)?) tok/s`)

// kvBench runs one kvhost model benchmark and returns its tok/s.
func (o *options) kvBench(pattern, benchtime string) probe {
	return func(ctx context.Context) (float64, error) {
		out, err := o.cmd(ctx, filepath.Join(o.work, "model.test"), "-test.run", "^$", "-test.bench", pattern,
			"-test.benchtime", benchtime, "-test.cpu", strconv.Itoa(o.threads))
		if err != nil {
			return 0, err
		}
		// The framework runs N=1 first; the last line is the measured run.
		ms := tokPerSec.FindAllStringSubmatch(out, -1)
		if len(ms) == 0 {
			return 0, fmt.Errorf("no tok/s in the output of %s:\n%s", pattern, tail(out, 500))
		}
		return strconv.ParseFloat(ms[len(ms)-1][1], 64)
	}
}

var avgTS = regexp.MustCompile(`"avg_ts":\s*([0-9.eE+-]+)`)

// llamaBench runs llama-bench once (-r 1) and returns its tokens/s.
func (o *options) llamaBench(model string, args ...string) probe {
	return func(ctx context.Context) (float64, error) {
		a := append([]string{"-m", model, "-t", strconv.Itoa(o.threads), "-r", "1", "-o", "json"}, args...)
		out, err := o.cmd(ctx, o.llama("llama-bench"), a...)
		if err != nil {
			return 0, err
		}
		m := avgTS.FindStringSubmatch(out)
		if m == nil {
			return 0, fmt.Errorf("no avg_ts in llama-bench's output:\n%s", tail(out, 500))
		}
		return strconv.ParseFloat(m[1], 64)
	}
}

// llamaBatched runs llama-batched-bench with batch sequences of a 64-token
// prompt and 128 generated tokens each (as BenchmarkDecode's batch) and
// returns the generation tokens/s over all of them (S_TG).
func (o *options) llamaBatched(model string, batch int) probe {
	return func(ctx context.Context) (float64, error) {
		out, err := o.cmd(ctx, o.llama("llama-batched-bench"), "-m", model, "-c", strconv.Itoa(batch*(64+128)+64),
			"-npp", "64", "-ntg", "128", "-npl", strconv.Itoa(batch), "-t", strconv.Itoa(o.threads))
		if err != nil {
			return 0, err
		}
		for _, line := range strings.Split(out, "\n") {
			f := strings.Split(line, "|")
			if len(f) < 11 || strings.TrimSpace(f[3]) != strconv.Itoa(batch) {
				continue
			}
			return strconv.ParseFloat(strings.TrimSpace(f[8]), 64)
		}
		return 0, fmt.Errorf("no B=%d row in llama-batched-bench's output:\n%s", batch, tail(out, 500))
	}
}

// freePort asks the kernel for a free TCP port.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// serve starts kvhost serve on the model with its compile cache under
// cache, waits for /health 200 and returns the process, its address and
// the time from exec to the first 200.
func (o *options) serve(ctx context.Context, model, cache string) (*exec.Cmd, string, time.Duration, error) {
	port, err := freePort()
	if err != nil {
		return nil, "", 0, err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	c := exec.CommandContext(ctx, filepath.Join(o.work, "kvhost"), "serve", "--model", model, "--addr", addr, "--threads", strconv.Itoa(o.threads))
	c.Env = append(append(os.Environ(), o.kvEnv...), "XDG_CACHE_HOME="+cache)
	start := time.Now()
	if err := c.Start(); err != nil {
		return nil, "", 0, err
	}
	deadline := start.Add(5 * time.Minute)
	for time.Now().Before(deadline) {
		resp, err := http.Get("http://" + addr + "/health")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return c, addr, time.Since(start), nil
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	stop(c)
	return nil, "", 0, fmt.Errorf("kvhost serve did not answer /health within 5 minutes")
}

func stop(c *exec.Cmd) {
	_ = c.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = c.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		_ = c.Process.Kill()
		<-done
	}
}

// startCache is the plugin cache a measured start of model uses: warm, the
// same folder every time, primed by one unmeasured start of the model
// first (the configurator's answers recalled, as on every start but a
// machine's first); or, with warm empty, a fresh empty folder per start
// (a machine's first start: the configurator interpreted once).
type startCache struct {
	o      *options
	model  string
	warm   string
	primed bool
}

// dir returns the folder for the next start and what to call after it.
func (s *startCache) dir(ctx context.Context) (string, func(), error) {
	if s.warm == "" {
		d, err := os.MkdirTemp(s.o.work, "cache-cold-")
		if err != nil {
			return "", nil, err
		}
		return d, func() { os.RemoveAll(d) }, nil
	}
	if !s.primed {
		c, _, _, err := s.o.serve(ctx, s.model, s.warm)
		if err != nil {
			return "", nil, err
		}
		stop(c)
		s.primed = true
	}
	return s.warm, func() {}, nil
}

// launch times exec → /health 200 of sc's model on sc's cache.
func (o *options) launch(sc *startCache) probe {
	return func(ctx context.Context) (float64, error) {
		dir, done, err := sc.dir(ctx)
		if err != nil {
			return 0, err
		}
		defer done()
		c, _, d, err := o.serve(ctx, sc.model, dir)
		if err != nil {
			return 0, err
		}
		stop(c)
		return d.Seconds(), nil
	}
}

// llamaLaunch times llama-simple loading the model and generating one
// token: llama.cpp's tools hold no server, so this is its closest
// launch-to-first-answer figure.
func (o *options) llamaLaunch(model string) probe {
	return func(ctx context.Context) (float64, error) {
		start := time.Now()
		if _, err := o.cmd(ctx, o.llama("llama-simple"), "-m", model, "-n", "1", "Hello"); err != nil {
			return 0, err
		}
		return time.Since(start).Seconds(), nil
	}
}

// serveRSS is kvhost serve's peak resident set (VmHWM) over its start,
// /health and one 32-token completion: a peak, as llamaRSS's ru_maxrss is,
// so the two compare like for like (the current VmRSS right after the
// request could catch or miss a background load, such as the constraint
// plugin's), of sc's model on sc's cache.
func (o *options) serveRSS(sc *startCache) probe {
	return func(ctx context.Context) (float64, error) {
		dir, done, err := sc.dir(ctx)
		if err != nil {
			return 0, err
		}
		defer done()
		c, addr, _, err := o.serve(ctx, sc.model, dir)
		if err != nil {
			return 0, err
		}
		defer stop(c)
		resp, err := http.Post("http://"+addr+"/v1/completions", "application/json",
			strings.NewReader(`{"prompt":"Once upon a time","max_tokens":32}`))
		if err != nil {
			return 0, err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		st, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", c.Process.Pid))
		if err != nil {
			return 0, err
		}
		m := regexp.MustCompile(`VmHWM:\s+(\d+) kB`).FindSubmatch(st)
		if m == nil {
			return 0, fmt.Errorf("no VmHWM in /proc/%d/status", c.Process.Pid)
		}
		kb, err := strconv.ParseFloat(string(m[1]), 64)
		return kb / 1024, err
	}
}

// llamaRSS is the peak resident set (getrusage ru_maxrss) of
// llama-batched-bench holding a 2048-token context (llama-server's default
// for these models, whose trained context is 2048), prefilling 64 tokens and
// generating 32: the same work as serveRSS's request.
func (o *options) llamaRSS(model string) probe {
	return func(ctx context.Context) (float64, error) {
		c := exec.CommandContext(ctx, o.llama("llama-batched-bench"), "-m", model, "-c", "2048",
			"-npp", "64", "-ntg", "32", "-npl", "1", "-t", strconv.Itoa(o.threads))
		c.Dir = o.root
		if out, err := c.CombinedOutput(); err != nil {
			return 0, fmt.Errorf("llama-batched-bench: %w\n%s", err, tail(string(out), 500))
		}
		ru, ok := c.ProcessState.SysUsage().(*syscall.Rusage)
		if !ok {
			return 0, fmt.Errorf("no rusage for llama-batched-bench")
		}
		return float64(ru.Maxrss) / 1024, nil // Linux reports KiB
	}
}
