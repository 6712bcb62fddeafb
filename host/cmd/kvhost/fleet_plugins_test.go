package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvhost/kvhost/host/plugin/allowlist"
	"github.com/kvhost/kvhost/host/sampling/samplertest"
)

// servesPlugin reports whether a replica's /metrics lists sampler name at
// the version whose bytes have sha256 sum.
func servesPlugin(url, name, sum string) bool {
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "kvhost_plugin_info{") && strings.Contains(line, `plugin="`+name+`"`) && strings.Contains(line, `sha256="`+sum+`"`) {
			return true
		}
	}
	return false
}

// TestFleetPluginRollout: a new version of a sampler reaches a fleet the
// way the chart delivers it, through each replica's plugins ConfigMap
// volume (laid out as the kubelet does: keys as symlinks into ..data,
// updated by one atomic swap) carrying the new .wasm and its sha256 pin in
// the allow-list of the same ConfigMap. The volumes are updated one replica
// after another while 64 clients stream through the router asking for
// that sampler: no request fails, every replica ends up serving the new
// version (requests started after a replica switched report it in
// system_fingerprint), and a later update whose bytes the allow-list does
// not pin is refused with the pinned version still serving.
func TestFleetPluginRollout(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping in -short mode: three kvhost processes under load")
	}
	base, err := fsReadFile(builtinFS(), "typical.wasm")
	if err != nil {
		t.Fatalf("the built-in samplers are not built (make plugins): %v", err)
	}
	variant := func(v string) []byte {
		b, err := samplertest.Variant(base, v)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	v1, v2, v3 := variant("1.0.1"), variant("1.0.2"), variant("1.0.3")
	// system_fingerprint is "<policy>@<version>" (the engine names the policy).
	fp1, fp2 := "typical@"+samplertest.Version(v1, "1.0.1"), "typical@"+samplertest.Version(v2, "1.0.2")
	pin := func(b []byte) []byte { return []byte(allowlist.Sum(b) + "  typical\n") }
	volumes := make([]*samplertest.ConfigMapDir, 3)
	for i := range volumes {
		volumes[i] = &samplertest.ConfigMapDir{Dir: filepath.Join(t.TempDir(), "plugins")}
		if err := os.MkdirAll(volumes[i].Dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := volumes[i].Write(map[string][]byte{"typical.wasm": v1, "allowlist": pin(v1)}); err != nil {
			t.Fatal(err)
		}
	}
	reps, _, front := startFleet(t, func(i int) []string {
		return []string{"--plugins", volumes[i].Dir, "--plugin-allowlist", filepath.Join(volumes[i].Dir, "allowlist")}
	})
	for _, r := range reps {
		if !servesPlugin(r.url, "typical", allowlist.Sum(v1)) {
			t.Fatalf("%s does not serve the ConfigMap's typical %s at start", r.name, fp1)
		}
	}

	var (
		mu      sync.Mutex
		results []*fleetRequest
		stop    = make(chan struct{})
		wg      sync.WaitGroup
	)
	for c := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				r := &fleetRequest{id: c*100000 + i, maxTokens: 12}
				streamVia(front.URL, map[string]any{"prompt": fleetPrompts[(c+i)%len(fleetPrompts)], "max_tokens": r.maxTokens,
					"temperature": 0.8, "seed": c*1000 + i, "sampler": "typical", "stream": true, "ignore_eos": true,
					"stream_options": map[string]any{"include_usage": true}}, r, nil)
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

	// Roll the ConfigMap out replica by replica, as the kubelet refreshes
	// each pod's volume on its own schedule.
	time.Sleep(time.Second)
	switched := map[string]time.Time{}
	for i, r := range reps {
		if err := volumes[i].Write(map[string][]byte{"typical.wasm": v2, "allowlist": pin(v2)}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, r.name+" to serve "+fp2, 30*time.Second, func() string {
			if servesPlugin(r.url, "typical", allowlist.Sum(v2)) {
				return "ok"
			}
			return ""
		})
		switched[r.name] = time.Now()
		time.Sleep(500 * time.Millisecond)
	}
	// Bytes the allow-list does not pin never load.
	if err := volumes[0].Write(map[string][]byte{"typical.wasm": v3, "allowlist": pin(v2)}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, reps[0].name+" to refuse the unpinned version", 30*time.Second, func() string {
		if strings.Contains(reps[0].log.String(), "not in the sha256 allow-list") {
			return "ok"
		}
		return ""
	})
	time.Sleep(500 * time.Millisecond)
	stopClients()
	if !servesPlugin(reps[0].url, "typical", allowlist.Sum(v2)) {
		t.Fatalf("%s stopped serving the pinned version after an unpinned update", reps[0].name)
	}

	failed, newOn := 0, map[string]int{}
	for _, r := range results {
		if r.err != nil {
			failed++
			if failed <= 5 {
				t.Errorf("request %d via %q: %v", r.id, r.endpoint, r.err)
			}
			continue
		}
		if r.fp != fp1 && r.fp != fp2 {
			t.Errorf("request %d via %s: system_fingerprint %q, want %s or %s", r.id, r.endpoint, r.fp, fp1, fp2)
		}
		if at, ok := switched[r.endpoint]; ok && r.started.After(at) {
			if r.fp != fp2 {
				t.Errorf("request %d started on %s %v after it switched reports %s", r.id, r.endpoint, r.started.Sub(at), r.fp)
			}
			newOn[r.endpoint]++
		}
	}
	if failed > 0 {
		t.Fatalf("%d of %d requests failed during the rollout", failed, len(results))
	}
	// Each replica, asked directly, samples with the new version.
	for _, r := range reps {
		resp, err := http.Post(r.url+"/v1/completions", "application/json",
			strings.NewReader(`{"prompt":"Once upon a time","max_tokens":4,"temperature":0.8,"seed":7,"sampler":"typical"}`))
		if err != nil {
			t.Fatal(err)
		}
		var out struct {
			SystemFingerprint string `json:"system_fingerprint"`
		}
		err = json.NewDecoder(resp.Body).Decode(&out)
		resp.Body.Close()
		if err != nil || out.SystemFingerprint != fp2 {
			t.Errorf("%s answers with %q (%v), want %s", r.name, out.SystemFingerprint, err, fp2)
		}
	}
	t.Logf("%d requests, 0 failed, during a rollout of %s → %s over 3 replicas; requests on the new version after each switch: %v",
		len(results), fp1, fp2, fmt.Sprint(newOn))
}
