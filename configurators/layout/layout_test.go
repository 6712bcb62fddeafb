package layout

import (
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvhost/kvhost/sdk"
)

var update = flag.Bool("update", false, "rewrite testdata/golden files")

// configurators maps plugin names to implementations with a concrete Plan.
var configurators = map[string]func(sdk.ConfigureInput) (*Plan, error){
	"mha":   MHA{}.Plan,
	"mla":   MLA{}.Plan,
	"swa":   SWA{}.Plan,
	"mamba": Mamba{}.Plan,
	"fp4":   FP4{}.Plan,
}

func readConfig(t testing.TB, name string) json.RawMessage {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "testdata", name+".json"))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func plan(t testing.TB, kind, model string, h sdk.HostFacts) *Plan {
	t.Helper()
	in := sdk.ConfigureInput{Model: readConfig(t, model), Host: h.WithDefaults()}
	if err := in.Host.Validate(); err != nil {
		t.Fatal(err)
	}
	p, err := configurators[kind](in)
	if err != nil {
		t.Fatalf("%s(%s): %v", kind, model, err)
	}
	for _, pool := range p.Pools() {
		if err := pool.Check(); err != nil {
			t.Fatalf("%s(%s): %v", kind, model, err)
		}
	}
	return p
}

func tokenCell(p *Plan) int64 {
	var c int64
	for _, q := range p.Pools() {
		if q.Unit() == sdk.UnitToken {
			c += q.BytesPerUnit
		}
	}
	return c
}

// refMHACell is spec §3's MHA/GQA formula written out independently:
// n·(hd+vd)·L·e.
func refMHACell(kv, tp, hd, vd, layers, e int64) int64 {
	return max(1, kv/tp) * (hd + vd) * layers * e
}

func TestV1CellSizes(t *testing.T) {
	tests := []struct {
		kind, model string
		host        sdk.HostFacts
		want        int64
	}{
		{"mha", "llama-3-8b", sdk.HostFacts{KVDType: "bf16"}, 131072},
		{"mha", "llama-3-8b", sdk.HostFacts{KVDType: "fp16"}, 131072},
		{"mha", "llama-3-8b", sdk.HostFacts{KVDType: "fp8_e4m3"}, 65536},
		{"mha", "llama-3-8b", sdk.HostFacts{KVDType: "fp8_e5m2"}, 65536},
		{"mha", "llama-3-8b", sdk.HostFacts{KVDType: "mxfp8"}, 67584},
		{"fp4", "llama-3-8b", sdk.HostFacts{KVDType: "fp4"}, 38912},
		{"fp4", "llama-3-8b", sdk.HostFacts{KVDType: "nvfp4"}, 38912},
		{"mha", "llama-3-8b", sdk.HostFacts{KVDType: "bf16", TPSize: 8}, 16384},
		{"mha", "qwen3-8b", sdk.HostFacts{KVDType: "bf16"}, 147456},
		{"mla", "deepseek-v3", sdk.HostFacts{KVDType: "bf16"}, 70272},
		{"mla", "deepseek-v3", sdk.HostFacts{KVDType: "bf16", TPSize: 8}, 70272},
		{"mla", "deepseek-v3", sdk.HostFacts{KVDType: "fp8_e4m3"}, 35136},
		{"mla", "deepseek-v3", sdk.HostFacts{KVDType: "bf16", DraftLayers: 1}, 71424},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s/%s/%s/tp%d/d%d", tt.kind, tt.model, tt.host.KVDType, tt.host.TPSize, tt.host.DraftLayers), func(t *testing.T) {
			if got := tokenCell(plan(t, tt.kind, tt.model, tt.host)); got != tt.want {
				t.Fatalf("cell = %d, spec V1 says %d", got, tt.want)
			}
		})
	}
}

func TestV1FP4Components(t *testing.T) {
	p := plan(t, "fp4", "llama-3-8b", sdk.HostFacts{KVDType: "fp4"})
	by := map[string]int64{}
	for _, b := range p.Pools()[0].Buffers {
		n, _ := b.Bytes()
		by[strings.Split(b.Name, "_")[0]+"/"+kindOf(b.Name)] += n
	}
	packed, scales, deq := by["k/packed"]+by["v/packed"], by["k/scale"]+by["v/scale"], by["k/dequant"]+by["v/dequant"]
	if packed != 32768 || scales != 4096 || deq != 2048 {
		t.Fatalf("packed %d scales %d dequant %d, spec V1 says 32768 + 4096 + 2048", packed, scales, deq)
	}
	// Independent spec §3 formula: n·(hd+vd)·L/2 + n·hd·L·2/16 + n·hd·2.
	n, hd, l := int64(8), int64(128), int64(32)
	if want := n*2*hd*l/2 + n*hd*l*2/16 + n*hd*2; packed+scales+deq != want {
		t.Fatalf("total %d, formula %d", packed+scales+deq, want)
	}
}

func kindOf(name string) string {
	switch {
	case strings.HasSuffix(name, "_scale"):
		return "scale"
	case strings.HasSuffix(name, "_dequant"):
		return "dequant"
	}
	return "packed"
}

func TestTokenVectors(t *testing.T) {
	tests := []struct {
		name        string
		kind, model string
		host        sdk.HostFacts
		budget      int64
		want        int64
	}{
		{"V3", "mha", "llama-3-8b", sdk.HostFacts{}, 55923118899, 426659},
		{"V3 f=0.83", "mha", "llama-3-8b", sdk.HostFacts{}, 54228892712, 413733},
		{"V3 page 64", "mha", "llama-3-8b", sdk.HostFacts{PageSize: 64}, 55923118899, 426624},
		{"V4 fp8", "mha", "llama-3-8b", sdk.HostFacts{KVDType: "fp8_e4m3"}, 55923118899, 853319},
		{"V4 fp4", "fp4", "llama-3-8b", sdk.HostFacts{KVDType: "fp4"}, 55923118899, 1437168},
		{"V5", "mha", "qwen3-8b", sdk.HostFacts{}, 55602170675, 377076},
		{"V6", "mla", "deepseek-v3", sdk.HostFacts{TPSize: 8, PageSize: 64}, 44506430603, 633344},
		{"V7 no hybrid pool", "mha", "gpt-oss-20b", sdk.HostFacts{}, 53687091200, 1092266},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := plan(t, tt.kind, tt.model, tt.host)
			u, err := p.Size(tt.budget, 0, 0)
			if err != nil {
				t.Fatal(err)
			}
			if u[PoolKV] != tt.want {
				t.Fatalf("T = %d, spec says %d", u[PoolKV], tt.want)
			}
			// Independent check of the rule: floor(budget/cell) page-floored.
			page := tt.host.WithDefaults().PageSize
			if ref := tt.budget / tokenCell(p) / page * page; ref != u[PoolKV] {
				t.Fatalf("T = %d, reference floor rule gives %d", u[PoolKV], ref)
			}
		})
	}
}

func TestV7SWA(t *testing.T) {
	for _, tt := range []struct {
		page, full, swa int64
	}{{1, 1213629, 970903}, {64, 1213568, 970816}} {
		p := plan(t, "swa", "gpt-oss-20b", sdk.HostFacts{PageSize: tt.page})
		full, _ := p.Pool(PoolFull)
		swa, _ := p.Pool(PoolSWA)
		if full.BytesPerUnit != 12*2048 || swa.BytesPerUnit != 12*2048 {
			t.Fatalf("F·nf = %d, S·ns = %d, want 12·2048 each", full.BytesPerUnit, swa.BytesPerUnit)
		}
		u, err := p.Size(53687091200, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		if u[PoolFull] != tt.full || u[PoolSWA] != tt.swa {
			t.Fatalf("page %d: full %d swa %d, spec V7 says %d / %d", tt.page, u[PoolFull], u[PoolSWA], tt.full, tt.swa)
		}
		if used := u[PoolFull]*full.BytesPerUnit + u[PoolSWA]*swa.BytesPerUnit; used > 53687091200 {
			t.Fatalf("uses %d bytes of 53687091200", used)
		}
	}
}

// TestSizingRatios checks that swa_full_tokens_ratio and
// mamba_full_memory_ratio from the host facts reach the sizing, against the
// spec §3 formulas written out here in float64.
func TestSizingRatios(t *testing.T) {
	const budget = 53687091200
	for _, r := range []float64{0.5, 0.25} {
		p := plan(t, "swa", "gpt-oss-20b", sdk.HostFacts{SWAFullTokensRatio: r})
		u, err := p.Size(budget, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		full := int64(math.Floor(budget / (12*2048 + r*12*2048)))
		if u[PoolFull] != full || u[PoolSWA] != int64(float64(full)*r) {
			t.Errorf("ratio %v: full %d swa %d, want %d / %d", r, u[PoolFull], u[PoolSWA], full, int64(float64(full)*r))
		}
	}
	for _, m := range []float64{1, 0.25} {
		p := plan(t, "mamba", "qwen3-next-80b-a3b", sdk.HostFacts{TPSize: 4, MambaFullMemoryRatio: m})
		u, err := p.Size(30<<30, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		const per = 19316736
		k := int64(math.Floor((30*m/(1+m)*(1<<30) - per) / per))
		rest := int64((30 - float64(k+1)*per/(1<<30)) * (1 << 30))
		if u[PoolState] != k+1 || u[PoolKV] != rest/12288 {
			t.Errorf("m %v: slots %d tokens %d, want %d / %d", m, u[PoolState], u[PoolKV], k+1, rest/12288)
		}
	}
}

func TestV8Mamba(t *testing.T) {
	p := plan(t, "mamba", "qwen3-next-80b-a3b", sdk.HostFacts{TPSize: 4})
	state, _ := p.Pool(PoolState)
	kv, _ := p.Pool(PoolKV)
	if state.Unit() != sdk.UnitRequest || state.BytesPerUnit != 19316736 {
		t.Fatalf("state pool %v %d B, spec V8 says request-scoped 19 316 736", state.Unit(), state.BytesPerUnit)
	}
	if kv.BytesPerUnit != 12288 {
		t.Fatalf("KV cell %d, spec V8 says 12 288", kv.BytesPerUnit)
	}
	for _, b := range state.Buffers {
		n, _ := b.Bytes()
		want := map[string]int64{"conv": 12288, "temporal": 524288}[b.Name]
		if n != want {
			t.Fatalf("%s layer %d shape %v = %d B, want %d", b.Name, b.Layer, b.Shape, n, want)
		}
	}
	if len(state.Buffers) != 72 {
		t.Fatalf("%d state buffers, want 36 GDN layers × 2", len(state.Buffers))
	}
	u, err := p.Size(30<<30, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if u[PoolState] != 789 || u[PoolKV] != 1381132 {
		t.Fatalf("K+1 = %d, T = %d; spec V8 says K = 788, T = 1 381 132", u[PoolState], u[PoolKV])
	}
	if tp1 := plan(t, "mamba", "qwen3-next-80b-a3b", sdk.HostFacts{}); tp1.Pools()[0].BytesPerUnit != 77266944 {
		t.Fatalf("TP1 per_req %d, spec V8 says 77 266 944", tp1.Pools()[0].BytesPerUnit)
	}
	// A request cap replaces the ratio and the freed bytes become tokens.
	u2, err := p.Size(30<<30, 0, 263)
	if err != nil {
		t.Fatal(err)
	}
	if u2[PoolState] != 263 || u2[PoolKV] <= u[PoolKV] {
		t.Fatalf("capped: %v, want 263 slots and more than %d tokens", u2, u[PoolKV])
	}
	if used := u2[PoolState]*state.BytesPerUnit + u2[PoolKV]*kv.BytesPerUnit; used > 30<<30 {
		t.Fatalf("capped sizing uses %d of %d bytes", used, int64(30<<30))
	}
}

// TestRealConfigs checks each configurator on at least two real configs
// against independent formulas, and pins every buffer in golden files.
func TestRealConfigs(t *testing.T) {
	gemmaLayer := refMHACell(8, 1, 256, 256, 1, 2) // 8192 B
	nemoState := int64(8192+2*8*128)*3*2 + 128*64*128*4
	tests := []struct {
		kind, model string
		host        sdk.HostFacts
		pools       map[string]int64
	}{
		{"mha", "llama-3-8b", sdk.HostFacts{}, map[string]int64{"kv": refMHACell(8, 1, 128, 128, 32, 2)}},
		{"mha", "qwen3-8b", sdk.HostFacts{KVDType: "fp8_e5m2", TPSize: 2}, map[string]int64{"kv": refMHACell(8, 2, 128, 128, 36, 1)}},
		{"mha", "mistral-7b-instruct-v0.2", sdk.HostFacts{TPSize: 16}, map[string]int64{"kv": refMHACell(8, 16, 128, 128, 32, 2)}},
		{"mla", "deepseek-v3", sdk.HostFacts{}, map[string]int64{"kv": (512 + 64) * 61 * 2}},
		{"mla", "deepseek-v2-lite", sdk.HostFacts{DraftLayers: 2}, map[string]int64{"kv": (512 + 64) * (27 + 2) * 2}},
		{"swa", "gpt-oss-20b", sdk.HostFacts{}, map[string]int64{"full": 12 * 2048, "swa": 12 * 2048}},
		{"swa", "gemma-3-12b-it", sdk.HostFacts{}, map[string]int64{"full": 8 * gemmaLayer, "swa": 40 * gemmaLayer}},
		{"swa", "mistral-7b-v0.1", sdk.HostFacts{}, map[string]int64{"swa": refMHACell(8, 1, 128, 128, 32, 2)}},
		{"mamba", "qwen3-next-80b-a3b", sdk.HostFacts{TPSize: 4}, map[string]int64{"state": 19316736, "kv": 12288}},
		{"mamba", "nemotron-h-8b", sdk.HostFacts{}, map[string]int64{"state": 24 * nemoState, "kv": refMHACell(8, 1, 128, 128, 4, 2)}},
		{"fp4", "llama-3-8b", sdk.HostFacts{KVDType: "fp4"}, map[string]int64{"kv": 38912}},
		{"fp4", "qwen3-8b", sdk.HostFacts{KVDType: "fp4"}, map[string]int64{"kv": 8*256*36/2 + 8*256*36/16 + 8*256}},
		{"fp4", "deepseek-v3", sdk.HostFacts{KVDType: "fp4"}, map[string]int64{"kv": 576*61/2 + 576/16*61}},
	}
	for _, tt := range tests {
		name := fmt.Sprintf("%s-%s-%s-tp%d", tt.kind, tt.model, tt.host.WithDefaults().KVDType, tt.host.WithDefaults().TPSize)
		t.Run(name, func(t *testing.T) {
			p := plan(t, tt.kind, tt.model, tt.host)
			got := map[string]int64{}
			for _, q := range p.Pools() {
				got[q.Name] = q.BytesPerUnit
			}
			if fmt.Sprint(got) != fmt.Sprint(tt.pools) {
				t.Fatalf("pools %v, want %v", got, tt.pools)
			}
			checkGolden(t, name, p.Pools())
		})
	}
}

func checkGolden(t *testing.T, name string, pools []sdk.Pool) {
	t.Helper()
	var b strings.Builder
	for _, p := range pools {
		fmt.Fprintf(&b, "pool %s kind=%s unit=%s page=%d window=%d bytes_per_unit=%d\n", p.Name, p.Kind, p.Unit(), p.PageSize, p.Window, p.BytesPerUnit)
		for _, buf := range p.Buffers {
			n, _ := buf.Bytes()
			fmt.Fprintf(&b, "  %-9s %-12s layer=%-3d shape=%v %s %d\n", buf.Name, buf.Role, buf.Layer, buf.Shape, buf.DType, n)
		}
	}
	path := filepath.Join("..", "testdata", "golden", name+".txt")
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if string(want) != b.String() {
		t.Fatalf("layout differs from %s (run with -update if intended):\n%s", path, b.String())
	}
}
