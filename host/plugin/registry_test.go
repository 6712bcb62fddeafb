package plugin

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/kvhost/kvhost/host/plugin/wasmtest"
	"github.com/kvhost/kvhost/sdk"
)

func TestRegistryOverrideAndLookup(t *testing.T) {
	t.Parallel()
	builtin := fstest.MapFS{"README.md": {Data: []byte("x")}}
	for _, k := range configuratorNames {
		builtin[k+".wasm"] = &fstest.MapFile{Data: readWasm(t, k)}
	}
	dir := t.TempDir()
	// A plugins-dir file named mla.wasm overrides the built-in mla: here it
	// is really the swa plugin, so the override is observable.
	if err := os.WriteFile(filepath.Join(dir, "mla.wasm"), readWasm(t, "swa"), 0o644); err != nil {
		t.Fatal(err)
	}
	// zz-extra.wasm (a copy of mha) sorts after every built-in by name, but
	// a plugin the user dropped in wins over a built-in claiming the same
	// architecture.
	if err := os.WriteFile(filepath.Join(dir, "zz-extra.wasm"), readWasm(t, "mha"), 0o644); err != nil {
		t.Fatal(err)
	}
	r, err := NewRegistry(testRT, builtin, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(context.Background())
	if got := strings.Join(r.Names(), ","); got != "fp4,mamba,mha,mla,swa,zz-extra" {
		t.Fatalf("names %s", got)
	}
	if src, _ := r.Source("mla"); src.Origin != filepath.Join(dir, "mla.wasm") {
		t.Fatalf("mla origin %s", src.Origin)
	}
	if src, _ := r.Source("mha"); src.Origin != "builtin" {
		t.Fatalf("mha origin %s", src.Origin)
	}
	p, err := r.Plugin(context.Background(), "mla")
	if err != nil {
		t.Fatal(err)
	}
	if p.Descriptor().Name != "swa" {
		t.Fatalf("override not applied: mla.wasm describes itself as %s", p.Descriptor().Name)
	}
	if _, err := r.Plugin(context.Background(), "nope"); err == nil || !strings.Contains(err.Error(), `no plugin named "nope"`) {
		t.Fatalf("missing plugin: %v", err)
	}
	for _, tt := range []struct{ arch, kv, want string }{
		{"LlamaForCausalLM", "bf16", "zz-extra"}, // the plugins dir's copy of mha wins over the built-in
		{"LlamaForCausalLM", "fp4", "fp4"},       // only fp4 accepts fp4 (nvfp4)
		{"GptOssForCausalLM", "bf16", "mla"},     // "mla" here is the swa plugin, from the plugins dir
		{"Qwen3NextForCausalLM", "fp8_e4m3", "mamba"},
	} {
		p, err := r.ForArchitecture(context.Background(), tt.arch, tt.kv)
		if err != nil {
			t.Fatalf("%s/%s: %v", tt.arch, tt.kv, err)
		}
		if p.Name() != tt.want {
			t.Errorf("%s/%s: got %s (%s), want %s", tt.arch, tt.kv, p.Name(), p.Descriptor().Name, tt.want)
		}
	}
	if _, err := r.ForArchitecture(context.Background(), "DeepseekV3ForCausalLM", "bf16"); err == nil {
		t.Fatal("DeepSeek found although the mla plugin was overridden by swa")
	}
}

func TestRegistryBadDir(t *testing.T) {
	if _, err := NewRegistry(testRT, nil, filepath.Join(t.TempDir(), "absent")); err == nil {
		t.Fatal("absent plugins dir accepted")
	}
}

func TestCheckFile(t *testing.T) {
	t.Parallel()
	for _, k := range configuratorNames {
		rep, err := testRT.Check(context.Background(), k, readWasm(t, k))
		if err != nil {
			t.Fatalf("%s: %v", k, err)
		}
		out := rep.String()
		version := map[string]string{"swa": "2.1.0"}[k] // swa 2.1: kvhost's own window split
		if version == "" {
			version = "2.0.0"
		}
		for _, want := range []string{"plugin " + k + " " + version + " (configurator, ABI 2)", "self-test:", "pool ", "uses "} {
			if !strings.Contains(out, want) {
				t.Errorf("%s report lacks %q:\n%s", k, want, out)
			}
		}
		if len(rep.Units) != len(rep.Pools) {
			t.Errorf("%s: %d pools, %d sized", k, len(rep.Pools), len(rep.Units))
		}
		t.Logf("\n%s", out)
	}
	// CheckFile on broken files: a one-line reason each.
	dir := t.TempDir()
	broken := map[string][]byte{
		"empty.wasm":     nil,
		"text.wasm":      []byte("not wasm at all"),
		"truncated.wasm": readWasm(t, "mha")[:4096],
		"badabi.wasm":    readWasm(t, "hostile-badabi"),
		"panic.wasm":     readWasm(t, "hostile-panic"),
	}
	for name, b := range broken {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := CheckFile(context.Background(), path)
		if err == nil || strings.ContainsAny(err.Error(), "\r\n") {
			t.Errorf("%s: want a one-line error, got %q", name, err)
		}
	}
	_, err := CheckFile(context.Background(), filepath.Join(dir, "badabi.wasm"))
	var abi *ABIError
	if !errors.As(err, &abi) {
		t.Errorf("badabi via CheckFile: %v is not an *ABIError", err)
	}
	rep, err := CheckFile(context.Background(), filepath.Join(wasmDir, "mla.wasm"))
	if err != nil || rep.Sample != "deepseek-v3.json" || rep.Path != filepath.Join(wasmDir, "mla.wasm") {
		t.Fatalf("CheckFile mla: %v %+v", err, rep)
	}
	// Samplers are checked as the server loads them: handshake, I/O
	// region, self-test (issue 13: a built-in sampler used to fail with
	// "missing export kvhost_malloc").
	for _, name := range []string{"standard", "dry"} {
		b, err := wasmtest.Builtin(name)
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, name+".wasm")
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		rep, err := CheckFile(context.Background(), path)
		if err != nil {
			t.Fatalf("CheckFile %s: %v", name, err)
		}
		out := rep.String()
		for _, want := range []string{"plugin " + name + " ", "(sampler, ABI 1)", "candidates ", "host pre-ops:", "self-test: a synthetic batch", "fuel (budget "} {
			if !strings.Contains(out, want) {
				t.Errorf("%s report lacks %q:\n%s", name, want, out)
			}
		}
		t.Logf("\n%s", out)
	}
	always := filepath.Join(dir, "evil.wasm")
	if err := os.WriteFile(always, wasmtest.Sampler("evil", wasmtest.Spin, true), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := CheckFile(context.Background(), always); !errors.Is(err, ErrOutOfFuel) || strings.ContainsAny(err.Error(), "\r\n") {
		t.Fatalf("CheckFile of a sampler that spins at its self-test: %v", err)
	}
}

func TestSamplesMatchConfiguratorTestdata(t *testing.T) {
	entries, err := samples.ReadDir("samples")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		a, _ := samples.ReadFile("samples/" + e.Name())
		b, err := os.ReadFile(filepath.Join("..", "..", "configurators", "testdata", e.Name()))
		if err != nil || !bytes.Equal(a, b) {
			t.Errorf("samples/%s differs from configurators/testdata (%v)", e.Name(), err)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	for _, c := range []Config{{MemoryLimitPages: 16}, {CallTimeout: -1}, {MaxIdle: -1}} {
		if err := c.Validate(); err == nil {
			t.Errorf("%+v accepted", c)
		}
		if _, err := NewRuntime(context.Background(), c); err == nil {
			t.Errorf("NewRuntime(%+v) accepted", c)
		}
	}
	if err := (Config{}).Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestConfigureValidatesHostFacts(t *testing.T) {
	p := load(t, "mha")
	_, err := p.Configure(context.Background(), sdk.ConfigureInput{Model: modelConfig(t, "llama-3-8b"), Host: sdk.HostFacts{PageSize: -4}})
	if err == nil || !strings.Contains(err.Error(), "page_size -4") {
		t.Fatalf("err = %v", err)
	}
	l := configure(t, "mha", "llama-3-8b", sdk.HostFacts{})
	if _, err := l.Size(context.Background(), -1, 0, 0); err == nil {
		t.Fatal("negative available accepted")
	}
}

// TestRegistryUnload: an unloaded configurator is closed (its handle
// refuses calls) and no longer listed as loaded, its record still gives
// its descriptor, and Plugin loads it again; unloading a name that is not
// loaded is a no-op.
func TestRegistryUnload(t *testing.T) {
	t.Parallel()
	r, err := NewRegistry(testRT, fstest.MapFS{"mha.wasm": {Data: readWasm(t, "mha")}}, "")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(context.Background())
	ctx := context.Background()
	p, err := r.ForArchitecture(ctx, "LlamaForCausalLM", "bf16")
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Unload(ctx, "mha"); err != nil {
		t.Fatal(err)
	}
	if _, ok := r.Loaded("mha"); ok {
		t.Fatal("mha still loaded after Unload")
	}
	if _, err := p.Configure(ctx, sdk.ConfigureInput{}); err == nil || !strings.Contains(err.Error(), "closed") {
		t.Fatalf("the unloaded handle's call: %v, want it closed", err)
	}
	if kind, _, ok := r.Recorded("mha"); !ok || kind != KindConfigurator {
		t.Fatalf("record after Unload: kind %q ok %v", kind, ok)
	}
	q, err := r.Plugin(ctx, "mha")
	if err != nil {
		t.Fatal(err)
	}
	if q == p || q.Descriptor().Name != "mha" {
		t.Fatalf("reloaded %p (%s), unloaded %p", q, q.Descriptor().Name, p)
	}
	if err := r.Unload(ctx, "mla"); err != nil {
		t.Fatalf("unloading what is not loaded: %v", err)
	}
}

// TestRegistryConfigureAsksClaimantsInTurn: mha and swa both claim
// MistralForCausalLM, and the config decides: Mistral-7B-v0.1's 4096-token
// window (in a 32 768-token context) is served by swa's window pool, v0.2's
// null window by mha's full pool, whichever is asked first. With only the
// declining plugin present nothing serves the model, and the error says
// why (the decline's text, sdk.ErrDeclined).
func TestRegistryConfigureAsksClaimantsInTurn(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	host := sdk.HostFacts{KVDType: "bf16", ContextLength: 32768}
	for _, names := range [][]string{{"mha", "swa"}, {"swa", "mha"}} {
		dir := t.TempDir()
		for i, k := range names { // the file names set the order of asking
			if err := os.WriteFile(filepath.Join(dir, string(rune('a'+i))+"-"+k+".wasm"), readWasm(t, k), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		r, err := NewRegistry(testRT, nil, dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, tt := range []struct{ model, plugin, pool string }{
			{"mistral-7b-v0.1", "swa", "swa"},
			{"mistral-7b-instruct-v0.2", "mha", "kv"},
		} {
			p, l, err := r.Configure(ctx, "MistralForCausalLM", "bf16", sdk.ConfigureInput{Model: modelConfig(t, tt.model), Host: host})
			if err != nil {
				t.Fatalf("%v: %s: %v", names, tt.model, err)
			}
			if p.Descriptor().Name != tt.plugin || len(l.Pools) != 1 || l.Pools[0].Name != tt.pool {
				t.Errorf("%v: %s: %s declared %+v, want %s's pool %s", names, tt.model, p.Descriptor().Name, l.Pools, tt.plugin, tt.pool)
			}
		}
		r.Close(ctx)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "mha.wasm"), readWasm(t, "mha"), 0o644); err != nil {
		t.Fatal(err)
	}
	r, err := NewRegistry(testRT, nil, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(ctx)
	_, _, err = r.Configure(ctx, "MistralForCausalLM", "bf16", sdk.ConfigureInput{Model: modelConfig(t, "mistral-7b-v0.1"), Host: host})
	if !errors.Is(err, sdk.ErrDeclined) || !strings.Contains(err.Error(), "no configurator serves this model") ||
		!strings.Contains(err.Error(), "the swa configurator serves it") {
		t.Fatalf("mha alone, Mistral-7B-v0.1: %v", err)
	}
}
