package main

import (
	"encoding/json"
	"net/http"
	"reflect"
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
