package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvhost/kvhost/host/boot"
	"github.com/kvhost/kvhost/host/plugin/builtin"
	"github.com/kvhost/kvhost/host/sampling"
	"github.com/kvhost/kvhost/host/sampling/samplertest"
)

// fullServer is serve's handler (API, admin, metrics, dashboard) over a
// stack with the built-in sampling policies, requiring apiKeys if any.
func fullServer(t *testing.T, model string, adminKey string, apiKeys ...string) (*httptest.Server, *boot.Stack, *sampling.Registry) {
	t.Helper()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	sreg, err := sampling.NewRegistry(context.Background(), sampling.Options{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	f := serveFlags{maxRunning: 32, maxQueue: 256, chunkedPrefill: 256, pageSize: 16, graphMaxBS: -1, maxBody: 4 << 20}
	s, err := boot.Build(boot.Config{Model: model, Device: "cpu", DeviceMemory: 512 << 20, Threads: 2,
		MaxRunning: f.maxRunning, MaxQueue: f.maxQueue, ChunkedPrefill: f.chunkedPrefill, PageSize: f.pageSize,
		GraphMaxBS: f.graphMaxBS, Samplers: sreg}, log, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	h, _ := assemble(f, s, sreg, apiKeys, []string{adminKey}, log)
	ts := httptest.NewServer(h)
	t.Cleanup(func() {
		ts.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		s.Close(ctx)
		sreg.Close(ctx)
	})
	return ts, s, sreg
}

type streamResult struct {
	start       time.Time
	fingerprint string
	chunks      int
	err         error
}

// streamOnce runs one streaming completion and checks every chunk.
func streamOnce(url string, i int) streamResult {
	res := streamResult{start: time.Now()}
	body := fmt.Sprintf(`{"prompt":"Once upon a time %d","max_tokens":24,"temperature":0.8,"stream":true,"ignore_eos":true}`, i%7)
	resp, err := http.Post(url+"/v1/completions", "application/json", strings.NewReader(body))
	if err != nil {
		res.err = err
		return res
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		res.err = fmt.Errorf("status %d: %s", resp.StatusCode, b)
		return res
	}
	sc := bufio.NewScanner(resp.Body)
	done := false
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			continue
		}
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			res.err = fmt.Errorf("malformed SSE line %q", line)
			return res
		}
		if data == "[DONE]" {
			done = true
			continue
		}
		var chunk struct {
			Object            string          `json:"object"`
			SystemFingerprint string          `json:"system_fingerprint"`
			Error             json.RawMessage `json:"error"`
			Choices           []struct{ Text string }
		}
		if err := json.Unmarshal([]byte(data), &chunk); err != nil {
			res.err = fmt.Errorf("malformed chunk %q: %v", data, err)
			return res
		}
		if chunk.Error != nil {
			res.err = fmt.Errorf("error event: %s", chunk.Error)
			return res
		}
		if chunk.Object != "text_completion" || len(chunk.Choices) != 1 {
			res.err = fmt.Errorf("unexpected chunk %s", data)
			return res
		}
		res.chunks++
		if res.fingerprint == "" {
			res.fingerprint = chunk.SystemFingerprint
		}
	}
	if !done {
		res.err = fmt.Errorf("stream ended without [DONE] after %d chunks", res.chunks)
	}
	return res
}

// TestSamplerSwapUnderLoad is issue 4's load test: 32 concurrent streaming
// clients while the standard sampler is replaced 10 times and a broken
// version is uploaded twice; nothing fails, every response is well formed,
// and requests that start after a swap report the new version (or a later
// one) in system_fingerprint. KVHOST_LOAD_SECONDS shortens or lengthens it
// (default 30).
func TestSamplerSwapUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping in -short mode: sampler swaps under load (soak-style)")
	}
	model := sharedModel(t)
	seconds := 30
	if v := os.Getenv("KVHOST_LOAD_SECONDS"); v != "" {
		fmt.Sscan(v, &seconds)
	}
	ts, s, _ := fullServer(t, model, "k3y")
	base, err := fsReadFile(builtinFS(), "standard.wasm")
	if err != nil {
		t.Fatal(err)
	}
	duration := time.Duration(seconds) * time.Second
	// The clients stream until the churn has made all its swaps (at least
	// duration); the churn's own deadline is generous, since an upload's
	// compile on a loaded machine can take seconds (the swaps' timing is
	// not what this test checks).
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	churnCtx, churnCancel := context.WithTimeout(context.Background(), 6*duration)
	defer churnCancel()
	start := time.Now()

	type swap struct {
		at      time.Time
		version string
	}
	var mu sync.Mutex
	swaps := []swap{{time.Time{}, ""}}
	var results []streamResult
	var wg sync.WaitGroup
	for c := 0; c < 32; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				r := streamOnce(ts.URL, c*1000+i)
				mu.Lock()
				results = append(results, r)
				mu.Unlock()
			}
		}()
	}
	put := func(ctx context.Context, name string, wasm []byte) error {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPut, ts.URL+"/admin/samplers/"+name, bytes.NewReader(wasm))
		req.Header.Set("Authorization", "Bearer k3y")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if resp.StatusCode != 200 {
			b, _ := io.ReadAll(resp.Body)
			return fmt.Errorf("status %d: %s", resp.StatusCode, b)
		}
		return nil
	}
	rep, err := samplertest.Churn(churnCtx, samplertest.Plan{Name: "standard", Base: base, Swaps: 10, Broken: 2,
		Interval: duration / 12, Swap: put,
		OnSwap: func(v string) {
			mu.Lock()
			swaps = append(swaps, swap{time.Now(), "standard@" + v})
			mu.Unlock()
		}})
	if rest := duration - time.Since(start); err == nil && rest > 0 {
		time.Sleep(rest)
	}
	cancel()
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Versions) != 10 || len(rep.Refused) != 2 {
		t.Fatalf("churn: %d swaps, %d refused", len(rep.Versions), len(rep.Refused))
	}
	rank := map[string]int{}
	for i, sw := range swaps[1:] {
		rank[sw.version] = i + 1
	}
	failed, checked := 0, 0
	for _, r := range results {
		if r.err != nil {
			failed++
			t.Errorf("request failed: %v", r.err)
			continue
		}
		// The newest swap accepted before this request started.
		want := 0
		for i, sw := range swaps[1:] {
			if sw.at.Before(r.start) {
				want = i + 1
			}
		}
		got, ok := rank[r.fingerprint]
		if want > 0 {
			checked++
			if !ok || got < want {
				t.Errorf("request started after swap %d reports %q (rank %d)", want, r.fingerprint, got)
			}
		}
	}
	t.Logf("%d requests, %d failed, %d checked against the swap they followed; versions %v", len(results), failed, checked, rep.Versions)
	if len(results) < 64 || checked == 0 {
		t.Fatalf("too little load: %d requests, %d after a swap", len(results), checked)
	}
	st := s.Engine.Stats()
	deadline := time.Now().Add(5 * time.Second)
	for (st.Running > 0 || st.KVPagesFree+1 < st.KVPagesTotal) && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
		st = s.Engine.Stats()
	}
	if st.Running != 0 {
		t.Fatalf("engine not idle after the load: %+v", st)
	}
}

func builtinFS() fs.FS { return builtin.FS() }

func fsReadFile(f fs.FS, name string) ([]byte, error) { return fs.ReadFile(f, name) }
