package main

import (
	"encoding/json"
	"io"
	"net/http"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestWarmStartRecallsTheConfigurator: serve's second start on the same
// plugin cache takes the KV configurator's declaration and pool sizes from
// what the configurator answered the first time (the log says
// recalled=true, the first start's recalled=false), and the ledger's
// budget, phases and KV pools are the same as the first start's: recalling
// changes where the answer comes from, not what it is.
func TestWarmStartRecallsTheConfigurator(t *testing.T) {
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	model := sharedModel(t)
	type ledger struct {
		Phases  []map[string]any `json:"phases"`
		KVPools []map[string]any `json:"kv_pools"`
		Budget  map[string]any   `json:"budget"`
	}
	var runs [2]ledger
	for i := range runs {
		p := startProcess(t, "--model", model, "--threads", "1")
		resp, err := http.Get(p.url + "/v1/memory")
		if err != nil {
			t.Fatal(err)
		}
		err = json.NewDecoder(resp.Body).Decode(&runs[i])
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		p.stop(t, 15*time.Second)
		want := []string{"recalled=false", "recalled=true"}[i]
		if !strings.Contains(p.log.String(), `msg="KV layout configured" plugin=mha version=`) || !strings.Contains(p.log.String(), want) {
			t.Fatalf("start %d: the log lacks %q:\n%s", i+1, want, p.log)
		}
	}
	if len(runs[0].KVPools) == 0 || runs[0].Budget == nil {
		t.Fatalf("no ledger: %+v", runs[0])
	}
	// Free memory measured at each phase is the process's own; the
	// budget and the pools are what the configurator's answers decide.
	if !reflect.DeepEqual(runs[0].Budget, runs[1].Budget) {
		t.Errorf("budget differs:\n%v\n%v", runs[0].Budget, runs[1].Budget)
	}
	for i := range runs {
		for _, pool := range runs[i].KVPools {
			delete(pool, "used_bytes")
			delete(pool, "used")
		}
	}
	if !reflect.DeepEqual(runs[0].KVPools, runs[1].KVPools) {
		t.Errorf("KV pools differ:\n%v\n%v", runs[0].KVPools, runs[1].KVPools)
	}
	if len(runs[0].Phases) != len(runs[1].Phases) {
		t.Errorf("phases differ: %d vs %d", len(runs[0].Phases), len(runs[1].Phases))
	}
}

// TestServeWarmsUpBeforeReady: by default serve runs one warm-up request
// (a prefill and a decode step) before /health answers 200, and leaves no
// trace of it but the engine's step count: no prefix-cache query, no
// request in the request metrics; --skip-server-warmup says ready with
// no step run.
func TestServeWarmsUpBeforeReady(t *testing.T) {
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	model := sharedModel(t)
	for _, tc := range []struct {
		args  []string
		steps string
	}{
		{nil, "2"},
		{[]string{"--skip-server-warmup"}, "0"},
	} {
		p := startProcess(t, append([]string{"--model", model, "--threads", "1"}, tc.args...)...)
		resp, err := http.Get(p.url + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		metrics := string(b)
		for _, want := range []string{`kvhost_engine_steps_total\{[^}]*\} ` + tc.steps + `\n`, `kvhost_prefix_cache_queries_total\{[^}]*\} 0\n`} {
			if !regexp.MustCompile(want).MatchString(metrics) {
				t.Errorf("%v: /metrics lacks %s:\n%s", tc.args, want, grepLines(metrics, "_total{"))
			}
		}
		for _, family := range []string{"kvhost_http_requests_total{", "kvhost_generation_tokens_total{", "kvhost_time_to_first_token_seconds_count{"} {
			if strings.Contains(metrics, family) {
				t.Errorf("%v: the warm-up counts as a client request:\n%s", tc.args, grepLines(metrics, family))
			}
		}
		p.stop(t, 15*time.Second)
		if warmed := strings.Contains(p.log.String(), "warm-up"); warmed != (tc.steps != "0") {
			t.Errorf("%v: the startup timeline mentions a warm-up: %v", tc.args, warmed)
		}
	}
}

// grepLines returns s's lines containing sub.
func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
