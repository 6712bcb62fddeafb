package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"go.yaml.in/yaml/v3"
)

// pickerSettings are the endpoint picker's metric names and scorer weights
// as the chart configures it (deploy/helm/kvhost/values.yaml,
// gateway.epp), so the test router reads what the real picker reads.
type pickerSettings struct {
	Metrics struct {
		QueuedRequests  string `yaml:"queuedRequests"`
		RunningRequests string `yaml:"runningRequests"`
		KVCacheUsage    string `yaml:"kvCacheUsage"`
	} `yaml:"metrics"`
	ScorerWeights struct {
		Queue              float64 `yaml:"queue"`
		KVCacheUtilization float64 `yaml:"kvCacheUtilization"`
	} `yaml:"scorerWeights"`
}

func readPickerSettings(root string) (pickerSettings, error) {
	var v struct {
		Gateway struct {
			EPP pickerSettings `yaml:"epp"`
		} `yaml:"gateway"`
	}
	b, err := os.ReadFile(filepath.Join(root, "deploy", "helm", "kvhost", "values.yaml"))
	if err != nil {
		return pickerSettings{}, err
	}
	if err := yaml.Unmarshal(b, &v); err != nil {
		return pickerSettings{}, err
	}
	p := v.Gateway.EPP
	if p.Metrics.QueuedRequests == "" || p.Metrics.KVCacheUsage == "" || p.ScorerWeights.Queue <= 0 {
		return p, fmt.Errorf("values.yaml gateway.epp: metric names or weights missing: %+v", p)
	}
	return p, nil
}

// endpoint is one replica as the router sees it: readiness (the kubelet's
// probe on /ready, which takes a pod out of the pool's endpoints) and the
// last scraped load.
type endpoint struct {
	name, url string
	ready     atomic.Bool
	failures  int // consecutive failed readiness probes (refresh goroutine only)
	load      atomic.Pointer[endpointLoad]
	picked    atomic.Int64
}

type endpointLoad struct{ queued, running, kv float64 }

// router is a small stand-in for gateway + endpoint picker: it scrapes each
// replica's /metrics every 50 ms (the picker's default refresh), keeps the
// ready ones, scores them as the picker's queue-scorer and
// kv-cache-utilization-scorer do (min-max normalised queue, 1 − KV use,
// weighted), picks the best (ties at random, as max-score-picker), and
// proxies the request there, streaming. A request refused before any
// response byte (connection refused, or 503 from a draining replica) is
// retried once per other replica, as a gateway's retry policy on
// connect-failure and 503 does; nothing that started streaming is retried.
type router struct {
	eps     []*endpoint
	cfg     pickerSettings
	client  *http.Client
	retries atomic.Int64
	stop    func()
}

func newRouter(cfg pickerSettings, eps []*endpoint) *router {
	ctx, cancel := context.WithCancel(context.Background())
	r := &router{eps: eps, cfg: cfg, client: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		for {
			r.refresh(ctx)
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	r.stop = func() { cancel(); wg.Wait() }
	return r
}

func (r *router) refresh(ctx context.Context) {
	var wg sync.WaitGroup
	for _, ep := range r.eps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// As a readiness probe with failureThreshold 2: one slow
			// answer on a loaded machine does not take a replica out.
			if r.ready(ctx, ep) {
				ep.failures = 0
				ep.ready.Store(true)
			} else if ep.failures++; ep.failures >= 2 {
				ep.ready.Store(false)
			}
			// A failed scrape keeps the last load (the picker, too, uses
			// metrics until they are stale).
			_ = r.scrape(ctx, ep)
		}()
	}
	wg.Wait()
}

func (r *router) get(ctx context.Context, ep *endpoint, path string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, ep.url+path, nil)
	resp, err := r.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %d", path, resp.StatusCode)
	}
	return b, err
}

func (r *router) ready(ctx context.Context, ep *endpoint) bool {
	_, err := r.get(ctx, ep, "/ready")
	return err == nil
}

func (r *router) scrape(ctx context.Context, ep *endpoint) error {
	b, err := r.get(ctx, ep, "/metrics")
	if err != nil {
		return err
	}
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(b))
	if err != nil {
		return err
	}
	gauge := func(name string) (float64, error) {
		f, ok := fams[name]
		if !ok || len(f.GetMetric()) == 0 || f.GetMetric()[0].GetGauge() == nil {
			return 0, fmt.Errorf("no gauge %s", name)
		}
		return f.GetMetric()[0].GetGauge().GetValue(), nil
	}
	var l endpointLoad
	if l.queued, err = gauge(r.cfg.Metrics.QueuedRequests); err != nil {
		return err
	}
	if l.running, err = gauge(r.cfg.Metrics.RunningRequests); err != nil {
		return err
	}
	if l.kv, err = gauge(r.cfg.Metrics.KVCacheUsage); err != nil {
		return err
	}
	ep.load.Store(&l)
	return nil
}

// pick scores the ready endpoints not in skip.
func (r *router) pick(skip map[*endpoint]bool) *endpoint {
	var cands []*endpoint
	minQ, maxQ := math.Inf(1), math.Inf(-1)
	for _, ep := range r.eps {
		if ep.ready.Load() && !skip[ep] && ep.load.Load() != nil {
			cands = append(cands, ep)
			q := ep.load.Load().queued
			minQ, maxQ = min(minQ, q), max(maxQ, q)
		}
	}
	var best []*endpoint
	bestScore := math.Inf(-1)
	for _, ep := range cands {
		l := ep.load.Load()
		queue := 1.0
		if maxQ > minQ {
			queue = (maxQ - l.queued) / (maxQ - minQ)
		}
		s := r.cfg.ScorerWeights.Queue*queue + r.cfg.ScorerWeights.KVCacheUtilization*(1-l.kv)
		switch {
		case s > bestScore:
			best, bestScore = []*endpoint{ep}, s
		case s == bestScore:
			best = append(best, ep)
		}
	}
	if len(best) == 0 {
		return nil
	}
	return best[rand.IntN(len(best))]
}

var errNoEndpoint = errors.New("router: no ready endpoint")

func (r *router) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(io.LimitReader(req.Body, 1<<20))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	skip := map[*endpoint]bool{}
	for attempt := 0; attempt < len(r.eps); attempt++ {
		ep := r.pick(skip)
		if ep == nil {
			break
		}
		up, _ := http.NewRequestWithContext(req.Context(), req.Method, ep.url+req.URL.Path, bytes.NewReader(body))
		up.Header.Set("Content-Type", req.Header.Get("Content-Type"))
		if a := req.Header.Get("Authorization"); a != "" {
			up.Header.Set("Authorization", a)
		}
		resp, err := r.client.Do(up)
		if err == nil && resp.StatusCode == http.StatusServiceUnavailable {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			err = fmt.Errorf("%s: 503", ep.name)
		}
		if err != nil {
			if req.Context().Err() != nil {
				return
			}
			skip[ep] = true
			r.retries.Add(1)
			continue
		}
		ep.picked.Add(1)
		for k, v := range resp.Header {
			w.Header()[k] = v
		}
		w.Header().Set("X-Fleet-Endpoint", ep.name)
		w.WriteHeader(resp.StatusCode)
		rc := http.NewResponseController(w)
		buf := make([]byte, 4096)
		for {
			n, err := resp.Body.Read(buf)
			if n > 0 {
				if _, werr := w.Write(buf[:n]); werr != nil {
					break
				}
				_ = rc.Flush()
			}
			if err != nil {
				break
			}
		}
		resp.Body.Close()
		return
	}
	http.Error(w, errNoEndpoint.Error(), http.StatusServiceUnavailable)
}
