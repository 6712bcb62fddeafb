package layout

import (
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/kvhost/kvhost/sdk"
)

func TestConfigureErrors(t *testing.T) {
	tests := []struct {
		kind, model string
		host        sdk.HostFacts
		want        string
	}{
		{"mha", "llama-3-8b", sdk.HostFacts{KVDType: "fp4"}, `kv_dtype "nvfp4" not supported`}, // fp4 is read as nvfp4
		{"fp4", "llama-3-8b", sdk.HostFacts{KVDType: "bf16"}, `kv_dtype "bf16" not supported`},
		{"mla", "llama-3-8b", sdk.HostFacts{}, "lacks kv_lora_rank"},
		{"swa", "llama-3-8b", sdk.HostFacts{}, "no positive sliding_window"},
		{"swa", "qwen3-8b", sdk.HostFacts{}, "no positive sliding_window"},
		{"mamba", "llama-3-8b", sdk.HostFacts{}, "no layer_types, hybrid_override_pattern"},
		{"mamba", "qwen3-next-80b-a3b", sdk.HostFacts{TPSize: 64}, "not divisible by tp_size 64"},
	}
	for _, tt := range tests {
		t.Run(tt.kind+"/"+tt.model, func(t *testing.T) {
			in := sdk.ConfigureInput{Model: readConfig(t, tt.model), Host: tt.host.WithDefaults()}
			_, err := configurators[tt.kind](in)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want it to mention %q", err, tt.want)
			}
		})
	}
}

func TestSizeErrors(t *testing.T) {
	p := plan(t, "mha", "llama-3-8b", sdk.HostFacts{PageSize: 64})
	if _, err := p.Size(131072*63, 0, 0); err == nil || !strings.Contains(err.Error(), "no page of 64 tokens") {
		t.Fatalf("63 tokens of memory, page 64: err = %v", err)
	}
	if _, err := p.Size(-1, 0, 0); err == nil {
		t.Fatal("negative available accepted")
	}
	swa := plan(t, "swa", "gpt-oss-20b", sdk.HostFacts{})
	// 200 full tokens → 160 window tokens ≤ window 128 + page 1? No: 160 > 129, fine;
	// 150 → 120 ≤ 129 must fail.
	if _, err := swa.Size(int64(150*44236.8)+10, 0, 0); err == nil || !strings.Contains(err.Error(), "sliding_window 128") {
		t.Fatalf("tiny SWA budget: err = %v", err)
	}
	m := plan(t, "mamba", "qwen3-next-80b-a3b", sdk.HostFacts{TPSize: 4})
	if _, err := m.Size(19316736, 0, 0); err == nil || !strings.Contains(err.Error(), "state slot") {
		t.Fatalf("one slot of memory: err = %v", err)
	}
}

// TestSizeInvariants sizes every configurator over random budgets and caps
// and checks what the host will check: bytes within budget, caps honoured,
// token units on page boundaries.
func TestSizeInvariants(t *testing.T) {
	cases := []struct {
		kind, model string
		host        sdk.HostFacts
	}{
		{"mha", "llama-3-8b", sdk.HostFacts{PageSize: 16}},
		{"mha", "qwen3-8b", sdk.HostFacts{KVDType: "mxfp8", DraftLayers: 1}},
		{"mla", "deepseek-v3", sdk.HostFacts{PageSize: 64, DraftLayers: 1}},
		{"swa", "gpt-oss-20b", sdk.HostFacts{PageSize: 32, DraftLayers: 1}},
		{"swa", "gemma-3-12b-it", sdk.HostFacts{PageSize: 1, KVDType: "fp8_e4m3"}},
		{"mamba", "qwen3-next-80b-a3b", sdk.HostFacts{TPSize: 2, PageSize: 64}},
		{"mamba", "nemotron-h-8b", sdk.HostFacts{}},
		{"fp4", "deepseek-v3", sdk.HostFacts{KVDType: "fp4", PageSize: 64}},
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for _, c := range cases {
		p := plan(t, c.kind, c.model, c.host)
		page := c.host.WithDefaults().PageSize
		for range 300 {
			avail := rng.Int64N(200 << 30)
			tokenCap, reqCap := int64(0), int64(0)
			if rng.IntN(2) == 0 {
				tokenCap = rng.Int64N(2_000_000)
			}
			if rng.IntN(2) == 0 {
				reqCap = rng.Int64N(3000)
			}
			u, err := p.Size(avail, tokenCap, reqCap)
			if err != nil {
				if !strings.Contains(err.Error(), "not enough memory") && !strings.Contains(err.Error(), "cannot hold sliding_window") {
					t.Fatalf("%s/%s size(%d,%d,%d): %v", c.kind, c.model, avail, tokenCap, reqCap, err)
				}
				continue
			}
			var used int64
			for _, pool := range p.Pools() {
				n, ok := u[pool.Name]
				if !ok || n < 1 {
					t.Fatalf("%s/%s: pool %s got %d units (%v)", c.kind, c.model, pool.Name, n, u)
				}
				used += n * pool.BytesPerUnit
				if pool.Unit() == sdk.UnitToken && (n%page != 0 || (tokenCap > 0 && n > tokenCap)) {
					t.Fatalf("%s/%s: pool %s %d tokens, page %d cap %d", c.kind, c.model, pool.Name, n, page, tokenCap)
				}
				if pool.Unit() == sdk.UnitRequest && reqCap > 0 && n > reqCap {
					t.Fatalf("%s/%s: pool %s %d slots over cap %d", c.kind, c.model, pool.Name, n, reqCap)
				}
			}
			if used > avail {
				t.Fatalf("%s/%s size(%d,%d,%d) = %v uses %d bytes", c.kind, c.model, avail, tokenCap, reqCap, u, used)
			}
			again, _ := p.Size(avail, tokenCap, reqCap)
			for k, v := range u {
				if again[k] != v {
					t.Fatalf("size is not pure: %v then %v", u, again)
				}
			}
		}
	}
}

func TestSlidingLayerRules(t *testing.T) {
	tests := []struct {
		cfg  string
		want string // s = sliding, f = full
	}{
		{`{"architectures":["GptOssForCausalLM"]}`, "sfsfsf"},
		{`{"architectures":["Gemma3ForCausalLM"]}`, "sssssfsssssf"},
		{`{"architectures":["Gemma2ForCausalLM"]}`, "sfsf"},
		{`{"sliding_window_pattern":3}`, "ssfssf"},
		{`{"layer_types":["full_attention","sliding_attention","sliding_attention"]}`, "fss"},
		{`{"architectures":["MistralForCausalLM"]}`, "ssss"},
	}
	for _, tt := range tests {
		m, err := ParseModel([]byte(tt.cfg))
		if err != nil {
			t.Fatal(err)
		}
		got, err := SlidingLayers(m, int64(len(tt.want)))
		if err != nil {
			t.Fatal(err)
		}
		var b strings.Builder
		for _, s := range got {
			b.WriteByte("fs"[map[bool]int{false: 0, true: 1}[s]])
		}
		if b.String() != tt.want {
			t.Errorf("%s: %s, want %s", tt.cfg, b.String(), tt.want)
		}
	}
}

func TestPyFloorDiv(t *testing.T) {
	// Values CPython prints for a // b.
	tests := []struct{ a, b, want float64 }{
		{7, 2, 3}, {-7, 2, -4}, {7, -2, -4}, {1.0, 0.1, 9}, {0.5, 0.1, 4}, {6, 3, 2}, {0, 5, 0},
	}
	for _, tt := range tests {
		if got := pyFloorDiv(tt.a, tt.b); got != tt.want {
			t.Errorf("%v // %v = %v, CPython gives %v", tt.a, tt.b, got, tt.want)
		}
	}
}

func FuzzConfigure(f *testing.F) {
	for _, name := range []string{"llama-3-8b", "deepseek-v3", "gpt-oss-20b", "qwen3-next-80b-a3b", "nemotron-h-8b", "gemma-3-12b-it"} {
		f.Add([]byte(readConfig(f, name)), "bf16", int64(1), int64(1))
	}
	f.Add([]byte(`{"num_hidden_layers":1e400}`), "fp4", int64(3), int64(0))
	f.Fuzz(func(t *testing.T, model []byte, dtype string, tp, draft int64) {
		in := sdk.ConfigureInput{Model: json.RawMessage(model), Host: sdk.HostFacts{KVDType: dtype, TPSize: tp, DraftLayers: draft}.WithDefaults()}
		if in.Host.Validate() != nil {
			return
		}
		for kind, c := range configurators {
			p, err := c(in)
			if err != nil {
				continue
			}
			for _, pool := range p.Pools() {
				if err := pool.Check(); err != nil {
					t.Fatalf("%s: %v", kind, err)
				}
			}
			if _, err := p.Size(80<<30, 0, 0); err != nil && !strings.Contains(err.Error(), "memory") && !strings.Contains(err.Error(), "sliding_window") {
				t.Fatalf("%s: size: %v", kind, err)
			}
		}
	})
}
