package layout

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/kvhost/kvhost/sdk"
)

// TestOptionalWindowClaims: of the mha and swa plugins, which both claim
// MistralForCausalLM, exactly one serves each config and the other
// declines it (sdk.ErrDeclined): the published Mistral-7B-v0.1
// (sliding_window 4096, 32 768 positions) slides, v0.2 (null) does not, and
// neither does a window that covers the served context (a 4096-token
// context) or sliding_window 0. A negative window is an error from both,
// never a decline.
func TestOptionalWindowClaims(t *testing.T) {
	v01 := readConfig(t, "mistral-7b-v0.1")
	with := func(edit func(map[string]any)) json.RawMessage {
		var m map[string]any
		if err := json.Unmarshal(v01, &m); err != nil {
			t.Fatal(err)
		}
		edit(m)
		b, _ := json.Marshal(m)
		return b
	}
	for _, tt := range []struct {
		name   string
		model  json.RawMessage
		ctx    int64
		serves string // "mha", "swa" or "" (an error from both)
		window int64  // the swa pool's window
	}{
		{"v0.1 at 32k", v01, 32768, "swa", 4096},
		{"v0.1 at 4097", v01, 4097, "swa", 4096},
		{"v0.1 at 4096", v01, 4096, "mha", 0},
		{"v0.2", readConfig(t, "mistral-7b-instruct-v0.2"), 32768, "mha", 0},
		{"window 0", with(func(m map[string]any) { m["sliding_window"] = 0 }), 32768, "mha", 0},
		{"window 512", with(func(m map[string]any) { m["sliding_window"] = 512 }), 32768, "swa", 512},
		{"window -1", with(func(m map[string]any) { m["sliding_window"] = -1 }), 32768, "", 0},
	} {
		in := sdk.ConfigureInput{Model: tt.model, Host: sdk.HostFacts{ContextLength: tt.ctx}.WithDefaults()}
		for _, kind := range []string{"mha", "swa"} {
			p, err := configurators[kind](in)
			switch {
			case tt.serves == "":
				if err == nil || errors.Is(err, sdk.ErrDeclined) || !strings.Contains(err.Error(), "sliding_window = -1") {
					t.Errorf("%s: %s: %v, want an error naming sliding_window", tt.name, kind, err)
				}
			case kind == tt.serves:
				if err != nil {
					t.Fatalf("%s: %s: %v", tt.name, kind, err)
				}
				var w int64
				for _, q := range p.Pools() {
					w = max(w, q.Window)
				}
				if w != tt.window || len(p.Pools()) != 1 {
					t.Errorf("%s: %s: %d pools, window %d, want one pool, window %d", tt.name, kind, len(p.Pools()), w, tt.window)
				}
			default:
				if !errors.Is(err, sdk.ErrDeclined) || !strings.Contains(err.Error(), tt.serves+" configurator serves it") {
					t.Errorf("%s: %s: %v, want a decline naming %s", tt.name, kind, err, tt.serves)
				}
			}
		}
	}
	// Architectures that only one plugin claims are never declined.
	gemma := sdk.ConfigureInput{Model: readConfig(t, "gemma-3-12b-it"), Host: sdk.HostFacts{ContextLength: 256}.WithDefaults()}
	if _, err := (SWA{}).Plan(gemma); err != nil {
		t.Errorf("gemma-3 at a 256-token context: %v", err)
	}
}
