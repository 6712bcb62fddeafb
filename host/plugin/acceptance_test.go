package plugin

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/kvhost/kvhost/configurators/layout"
	"github.com/kvhost/kvhost/sdk"
)

func modelConfig(t testing.TB, name string) json.RawMessage {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "configurators", "testdata", name+".json"))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func configure(t testing.TB, kind, model string, h sdk.HostFacts) *Layout {
	t.Helper()
	l, err := load(t, kind).Configure(context.Background(), sdk.ConfigureInput{Model: modelConfig(t, model), Host: h})
	if err != nil {
		t.Fatalf("%s(%s): %v", kind, model, err)
	}
	return l
}

// TestSpecVectorsThroughWasm reproduces every spec §7 vector about cell
// size or KV capacity through the built plugins.
func TestSpecVectorsThroughWasm(t *testing.T) {
	t.Parallel()
	cells := []struct {
		name, kind, model string
		host              sdk.HostFacts
		cell              int64
	}{
		{"V1 llama bf16", "mha", "llama-3-8b", sdk.HostFacts{KVDType: "bf16"}, 131072},
		{"V1 llama fp8", "mha", "llama-3-8b", sdk.HostFacts{KVDType: "fp8_e4m3"}, 65536},
		{"V1 llama mxfp8", "mha", "llama-3-8b", sdk.HostFacts{KVDType: "mxfp8"}, 67584},
		{"V1 llama fp4", "fp4", "llama-3-8b", sdk.HostFacts{KVDType: "fp4"}, 38912},
		{"V1 llama tp8", "mha", "llama-3-8b", sdk.HostFacts{TPSize: 8}, 16384},
		{"V1 qwen3 bf16", "mha", "qwen3-8b", sdk.HostFacts{}, 147456},
		{"V1 deepseek bf16", "mla", "deepseek-v3", sdk.HostFacts{}, 70272},
		{"V1 deepseek fp8", "mla", "deepseek-v3", sdk.HostFacts{KVDType: "fp8_e5m2"}, 35136},
		{"V1 deepseek mtp", "mla", "deepseek-v3", sdk.HostFacts{DraftLayers: 1}, 71424},
		{"V8 qwen3-next kv", "mamba", "qwen3-next-80b-a3b", sdk.HostFacts{TPSize: 4}, 12288},
	}
	for _, c := range cells {
		if got := configure(t, c.kind, c.model, c.host).TokenBytes(); got != c.cell {
			t.Errorf("%s: cell %d, spec says %d", c.name, got, c.cell)
		}
	}
	sizes := []struct {
		name, kind, model string
		host              sdk.HostFacts
		budget            int64
		want              map[string]int64
	}{
		{"V3", "mha", "llama-3-8b", sdk.HostFacts{}, 55923118899, map[string]int64{"kv": 426659}},
		{"V3 f=0.83", "mha", "llama-3-8b", sdk.HostFacts{}, 54228892712, map[string]int64{"kv": 413733}},
		{"V3 page 64", "mha", "llama-3-8b", sdk.HostFacts{PageSize: 64}, 55923118899, map[string]int64{"kv": 426624}},
		{"V4 fp8", "mha", "llama-3-8b", sdk.HostFacts{KVDType: "fp8_e4m3"}, 55923118899, map[string]int64{"kv": 853319}},
		{"V4 fp4", "fp4", "llama-3-8b", sdk.HostFacts{KVDType: "fp4"}, 55923118899, map[string]int64{"kv": 1437168}},
		{"V5", "mha", "qwen3-8b", sdk.HostFacts{}, 55602170675, map[string]int64{"kv": 377076}},
		{"V6", "mla", "deepseek-v3", sdk.HostFacts{TPSize: 8, PageSize: 64}, 44506430603, map[string]int64{"kv": 633344}},
		{"V7 page 1", "swa", "gpt-oss-20b", sdk.HostFacts{}, 53687091200, map[string]int64{"full": 1213629, "swa": 970903}},
		{"V7 page 64", "swa", "gpt-oss-20b", sdk.HostFacts{PageSize: 64}, 53687091200, map[string]int64{"full": 1213568, "swa": 970816}},
		{"V7 no hybrid", "mha", "gpt-oss-20b", sdk.HostFacts{}, 53687091200, map[string]int64{"kv": 1092266}},
		{"V8", "mamba", "qwen3-next-80b-a3b", sdk.HostFacts{TPSize: 4}, 30 << 30, map[string]int64{"state": 789, "kv": 1381132}},
	}
	for _, s := range sizes {
		l := configure(t, s.kind, s.model, s.host)
		got, err := l.Size(context.Background(), s.budget, 0, 0)
		if err != nil {
			t.Errorf("%s: %v", s.name, err)
			continue
		}
		if !reflect.DeepEqual(got, s.want) {
			t.Errorf("%s: %v, spec says %v", s.name, got, s.want)
		}
	}
	// V8's per-request state: 19 316 736 B at TP4.
	if got := configure(t, "mamba", "qwen3-next-80b-a3b", sdk.HostFacts{TPSize: 4}).RequestBytes(); got != 19316736 {
		t.Errorf("V8 per_req %d, spec says 19316736", got)
	}
}

// TestWasmMatchesNative checks that each plugin declares exactly what its
// native layout package computes, for at least two real configs per kind,
// and sizes identically.
func TestWasmMatchesNative(t *testing.T) {
	t.Parallel()
	native := map[string]func(sdk.ConfigureInput) (*layout.Plan, error){
		"mha": layout.MHA{}.Plan, "mla": layout.MLA{}.Plan, "swa": layout.SWA{}.Plan,
		"mamba": layout.Mamba{}.Plan, "fp4": layout.FP4{}.Plan,
	}
	cases := []struct {
		kind, model string
		host        sdk.HostFacts
	}{
		{"mha", "llama-3-8b", sdk.HostFacts{KVDType: "mxfp8", DraftLayers: 1}},
		{"mha", "qwen3-8b", sdk.HostFacts{TPSize: 2}},
		{"mha", "mistral-7b-instruct-v0.2", sdk.HostFacts{KVDType: "fp16"}},
		{"swa", "mistral-7b-v0.1", sdk.HostFacts{KVDType: "fp16"}},
		{"mla", "deepseek-v3", sdk.HostFacts{PageSize: 64}},
		{"mla", "deepseek-v2-lite", sdk.HostFacts{KVDType: "fp8_e4m3"}},
		{"swa", "gpt-oss-20b", sdk.HostFacts{DraftLayers: 1, PageSize: 16}},
		{"swa", "gemma-3-12b-it", sdk.HostFacts{}},
		{"mamba", "qwen3-next-80b-a3b", sdk.HostFacts{TPSize: 2}},
		{"mamba", "nemotron-h-8b", sdk.HostFacts{PageSize: 64}},
		{"fp4", "qwen3-8b", sdk.HostFacts{KVDType: "fp4"}},
		{"fp4", "deepseek-v2-lite", sdk.HostFacts{KVDType: "fp4"}},
	}
	for _, c := range cases {
		t.Run(fmt.Sprintf("%s/%s", c.kind, c.model), func(t *testing.T) {
			l := configure(t, c.kind, c.model, c.host)
			want, err := native[c.kind](sdk.ConfigureInput{Model: modelConfig(t, c.model), Host: c.host.WithDefaults()})
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(l.Pools, want.Pools()) {
				t.Fatalf("wasm pools differ from native:\nwasm   %+v\nnative %+v", l.Pools, want.Pools())
			}
			for _, budget := range []int64{20 << 30, 77 << 30, 141 << 30} {
				got, err := l.Size(context.Background(), budget, 0, 1000)
				ref, refErr := want.Size(budget, 0, 1000)
				if (err == nil) != (refErr == nil) || !reflect.DeepEqual(got, ref) {
					t.Fatalf("size(%d): wasm %v %v, native %v %v", budget, got, err, ref, refErr)
				}
			}
		})
	}
}
