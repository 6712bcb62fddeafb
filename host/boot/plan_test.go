package boot

import (
	"bytes"
	"context"
	"encoding/binary"
	"github.com/kvhost/kvhost/internal/testmodels"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvhost/kvhost/host/engine"
	"github.com/kvhost/kvhost/host/ledger"
	"github.com/kvhost/kvhost/host/model/gguf"
	"github.com/kvhost/kvhost/host/model/synth"
	"github.com/kvhost/kvhost/host/plan"
	"github.com/kvhost/kvhost/host/plugin"
	"github.com/kvhost/kvhost/host/plugin/builtin"
	"github.com/kvhost/kvhost/sdk"
)

// sharedModel is the repository's models/stories260K.gguf.
func sharedModel(t *testing.T) string { return testmodels.MustStories260K(t) }

func planFor(t *testing.T, cfg Config) plan.Report {
	t.Helper()
	name, c, ts, err := plan.LoadModel(cfg.Model)
	if err != nil {
		t.Fatal(err)
	}
	hfc, err := plan.HFConfig(cfg.Model)
	if err != nil {
		t.Fatal(err)
	}
	r, err := plan.Plan(plan.Input{Name: name, Config: c, Weights: ts, Device: "cpu", DeviceBytes: cfg.DeviceMemory, Threads: cfg.Threads,
		ChunkedPrefill: cfg.ChunkedPrefill, MaxRunning: cfg.MaxRunning, PageSize: cfg.PageSize, MaxTotalTokens: cfg.MaxTotalTokens,
		MemFractionStatic: cfg.MemFractionStatic, SGLangCompat: cfg.SGLangCompat, GraphMaxBS: cfg.GraphMaxBS, LogprobChunk: cfg.LogprobChunk,
		KVDType: cfg.KVCacheDType, HFConfig: hfc, Configurators: cfg.Configurators})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestPlanMatchesServe: every phase, allocator and pool figure plan
// predicts equals what serve measures, and both ledgers balance to the byte
// with nothing outside.
func TestPlanMatchesServe(t *testing.T) {
	tiny, small := writeModel(t, "tiny"), writeModel(t, "small")
	tinyQ4 := quantizeModel(t, tiny)
	cases := []struct {
		name string
		cfg  func(t *testing.T) Config
	}{
		{"tiny kvhost", func(t *testing.T) Config { return baseConfig(tiny, 192<<20) }},
		{"tiny kvhost cap", func(t *testing.T) Config { c := baseConfig(tiny, 192<<20); c.MaxTotalTokens = 5000; return c }},
		{"tiny kvhost f", func(t *testing.T) Config { c := baseConfig(tiny, 192<<20); c.MemFractionStatic = 0.9; return c }},
		{"tiny kvhost graphs", func(t *testing.T) Config { c := baseConfig(tiny, 192<<20); c.GraphMaxBS = -1; return c }},
		{"tiny compat graphs", func(t *testing.T) Config {
			c := baseConfig(tiny, 192<<20)
			c.SGLangCompat, c.MemFractionStatic, c.GraphMaxBS = true, 0.7, 4
			return c
		}},
		{"tiny compat", func(t *testing.T) Config {
			c := baseConfig(tiny, 192<<20)
			c.SGLangCompat, c.MemFractionStatic = true, 0.7
			return c
		}},
		{"small kvhost", func(t *testing.T) Config {
			c := baseConfig(small, 320<<20)
			c.MaxRunning, c.ChunkedPrefill, c.PageSize = 4, 100, 1
			return c
		}},
		{"tiny q4_0 expanded", func(t *testing.T) Config { return baseConfig(tinyQ4, 192<<20) }},
		{"tiny two pools", func(t *testing.T) Config {
			c := baseConfig(tiny, 192<<20)
			c.Configurators = splitRegistry(t)
			return c
		}},
		{"stories260K", func(t *testing.T) Config { c := baseConfig(sharedModel(t), 64<<20); c.GraphMaxBS = -1; return c }},
		// A gguf-split model, opened from its last shard: every tensor is
		// served from its own shard file.
		{"tiny q4_0 split", func(t *testing.T) Config { return baseConfig(splitModel(t, tinyQ4, false), 192<<20) }},
		{"stories260K split", func(t *testing.T) Config {
			c := baseConfig(splitModel(t, sharedModel(t), true), 64<<20)
			c.GraphMaxBS = -1
			return c
		}},
	}
	// The expert and latent-attention architectures (gen-model's tiny
	// presets): routed experts, the mla configurator's latent pool, decode
	// graphs of both.
	for _, arch := range []string{"qwen3moe", "deepseek2", "deepseek3"} {
		spec, err := synth.ArchPreset(arch, "tiny", "f32")
		if err != nil {
			t.Fatal(err)
		}
		path := writeSpec(t, spec)
		cases = append(cases, struct {
			name string
			cfg  func(t *testing.T) Config
		}{arch + " kvhost graphs", func(t *testing.T) Config { c := baseConfig(path, 192<<20); c.GraphMaxBS = -1; return c }}, struct {
			name string
			cfg  func(t *testing.T) Config
		}{arch + " compat", func(t *testing.T) Config {
			c := baseConfig(path, 192<<20)
			c.SGLangCompat, c.MemFractionStatic = true, 0.7
			return c
		}})
	}
	// SGLang's default f on an MLA model takes the flat 1536 MiB prefill
	// graph term on serve's side as on plan's (8 GiB: f 0.357, not the dense
	// rule's 0.516; the pool capped so that it stays small).
	{
		spec, err := synth.ArchPreset("deepseek2", "tiny", "f32")
		if err != nil {
			t.Fatal(err)
		}
		path := writeSpec(t, spec)
		cases = append(cases, struct {
			name string
			cfg  func(t *testing.T) Config
		}{"deepseek2 compat default f", func(t *testing.T) Config {
			c := baseConfig(path, 8<<30)
			c.SGLangCompat, c.MaxTotalTokens = true, 4096
			return c
		}})
	}
	// Every KV encoding: the configurator declares the pool in it, serve
	// allocates and profiles it, plan predicts it (mxfp8 needs head dims
	// that are multiples of 32: a model of head dim 32).
	hd32 := writeSpec(t, synth.Spec{Name: "hd32", Hidden: 128, Layers: 2, Heads: 4, KVHeads: 2, Intermediate: 384, Vocab: 32000, ContextLen: 512, DType: "f32", Seed: 7})
	for _, dt := range []string{"fp16", "bf16", "fp8_e4m3", "fp8_e5m2", "mxfp8", "nvfp4"} {
		model := tiny
		if dt == "mxfp8" {
			model = hd32
		}
		cases = append(cases, struct {
			name string
			cfg  func(t *testing.T) Config
		}{"kv " + dt, func(t *testing.T) Config {
			c := baseConfig(model, 192<<20)
			c.KVCacheDType, c.GraphMaxBS = dt, 4
			return c
		}}, struct {
			name string
			cfg  func(t *testing.T) Config
		}{"kv " + dt + " compat", func(t *testing.T) Config {
			c := baseConfig(model, 192<<20)
			c.KVCacheDType, c.SGLangCompat, c.MemFractionStatic = dt, true, 0.7
			return c
		}})
	}
	// The sliding-window family: a full and a window pool (Mistral: the
	// window pool alone), plan's peaks from the same forward.
	for _, arch := range []string{"mistral", "gemma2", "gemma3", "gpt-oss"} {
		spec, err := synth.ArchPreset(arch, "tiny", "f32")
		if err != nil {
			t.Fatal(err)
		}
		model := writeSpec(t, spec)
		cases = append(cases, struct {
			name string
			cfg  func(t *testing.T) Config
		}{arch + " graphs", func(t *testing.T) Config { c := baseConfig(model, 256<<20); c.GraphMaxBS = 4; return c }}, struct {
			name string
			cfg  func(t *testing.T) Config
		}{arch + " compat", func(t *testing.T) Config { // swa_full_tokens_ratio's split
			c := baseConfig(model, 256<<20)
			c.SGLangCompat, c.MemFractionStatic = true, 0.7
			return c
		}})
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.cfg(t)
			s, err := Build(cfg, nil, os.Stdout)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close(context.Background())
			if cfg.Configurators != nil && len(s.Pools.TokenPools()) != 2 {
				t.Fatalf("%d token pools, want the example's two", len(s.Pools.TokenPools()))
			}
			got := s.Ledger.Snapshot()
			if err := ledger.Check(got); err != nil {
				t.Fatal(err)
			}
			if got.Outside() != 0 {
				t.Fatalf("outside = %d on the CPU device, want 0", got.Outside())
			}
			want := planFor(t, cfg)
			if err := ledger.Check(want.Ledger); err != nil {
				t.Fatalf("plan's ledger: %v", err)
			}
			if !reflect.DeepEqual(got.Phases, want.Ledger.Phases) {
				t.Errorf("phases:\nserve %+v\nplan  %+v", got.Phases, want.Ledger.Phases)
			}
			if !reflect.DeepEqual(got.Allocators, want.Ledger.Allocators) {
				t.Errorf("allocators:\nserve %+v\nplan  %+v", got.Allocators, want.Ledger.Allocators)
			}
			if !reflect.DeepEqual(got.KVPools, want.Ledger.KVPools) {
				t.Errorf("pools:\nserve %+v\nplan  %+v", got.KVPools, want.Ledger.KVPools)
			}
			if !reflect.DeepEqual(s.Budget, want.Budget) {
				t.Errorf("budget:\nserve %+v\nplan  %+v", s.Budget, want.Budget)
			}
			// Mistral (every layer slides over a window smaller than the
			// context) is the swa configurator's, on its window pool: plan
			// and serve agree on that too (the budget holds the layout),
			// not only on the bytes, which a full pool of the same cell
			// would match.
			if strings.HasPrefix(tc.name, "mistral") {
				if k := s.Budget.KVConfigurator; k.Plugin != "swa" || len(k.Layout.Pools) != 1 || k.Layout.Pools[0].Kind != sdk.SlidingWindow {
					t.Errorf("mistral served by %s on %+v, want the swa configurator's window pool", k.Plugin, k.Layout.Pools)
				}
			}
			if cfg.GraphMaxBS != 0 && (s.Graphs == nil || s.Budget.GraphPoolBytes == 0 || s.Budget.GraphPoolBytes != s.Graphs.PoolBytes()) {
				t.Errorf("graphs asked for but not captured: %+v pool %d", s.Budget.GraphBuckets, s.Budget.GraphPoolBytes)
			}
			// The pools hold what the configurator declared in the encoding
			// asked for, and the arena's KV bytes are exactly those cells.
			asked := sdk.CanonicalKVDType(cfg.KVCacheDType)
			if asked == "" {
				asked = plan.DefaultKVDType
			}
			if k := s.Budget.KVConfigurator; k.KVDType != asked || k.StoredAs() != got.KVPools[0].DType || s.Budget.KVDType != k.StoredAs() {
				t.Errorf("kv dtype %q (stored as %q, budget %q, pool %q), asked %q", k.KVDType, k.StoredAs(), s.Budget.KVDType, got.KVPools[0].DType, asked)
			}
			var cells int64
			for _, p := range got.KVPools {
				cells += p.Bytes
			}
			if cells != got.ByCategory["kv_cache"] {
				t.Errorf("pools hold %d bytes, the ledger's kv_cache category %d", cells, got.ByCategory["kv_cache"])
			}
		})
	}
}

// splitModel writes src as gguf-split shards of five tensors and returns
// the first shard's path, or the last's.
func splitModel(t *testing.T, src string, first bool) string {
	t.Helper()
	shards, err := gguf.SplitFile(src, filepath.Join(t.TempDir(), "split"), gguf.SplitLimits{MaxTensors: 5})
	if err != nil {
		t.Fatal(err)
	}
	if len(shards) < 3 {
		t.Fatalf("%d shards", len(shards))
	}
	if first {
		return shards[0]
	}
	return shards[len(shards)-1]
}

// TestSplitLedgerMatchesMerged: serving a model from gguf-split shards
// accounts exactly what serving the merged file does: every phase, category
// and allocator of the ledger, and the budget.
func TestSplitLedgerMatchesMerged(t *testing.T) {
	merged := quantizeModel(t, writeModel(t, "tiny"))
	build := func(path string) (ledger.Snapshot, plan.Report) {
		cfg := baseConfig(path, 192<<20)
		s, err := Build(cfg, nil, os.Stdout)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close(context.Background())
		return s.Ledger.Snapshot(), planFor(t, cfg)
	}
	mg, mp := build(merged)
	sg, sp := build(splitModel(t, merged, true))
	if mg.ByCategory["weights"] == 0 {
		t.Fatalf("no weights category in %v", mg.ByCategory)
	}
	if !reflect.DeepEqual(sg.Phases, mg.Phases) || !reflect.DeepEqual(sg.ByCategory, mg.ByCategory) || !reflect.DeepEqual(sg.Allocators, mg.Allocators) {
		t.Errorf("serve's ledger differs:\nsplit  %+v %+v\nmerged %+v %+v", sg.Phases, sg.ByCategory, mg.Phases, mg.ByCategory)
	}
	if !reflect.DeepEqual(sp.Budget, mp.Budget) || !reflect.DeepEqual(sp.Ledger.Phases, mp.Ledger.Phases) {
		t.Errorf("plan differs:\nsplit  %+v\nmerged %+v", sp.Budget, mp.Budget)
	}
}

// writeSpec writes a synth spec to a temp GGUF.
func writeSpec(t *testing.T, s synth.Spec) string {
	t.Helper()
	var buf bytes.Buffer
	if err := synth.Write(&buf, s, nil); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), s.Name+".gguf")
	if err := os.WriteFile(p, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// quantizeModel writes a copy of a GGUF with every matrix in Q4_0, the
// format most older GGUF files use (served as stored: plan counts its file
// bytes).
func quantizeModel(t *testing.T, src string) string {
	t.Helper()
	f, err := gguf.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var ts []gguf.TensorSpec
	for _, ti := range f.Tensors {
		_, raw, err := f.Tensor(ti.Name)
		if err != nil {
			t.Fatal(err)
		}
		spec := gguf.TensorSpec{Name: ti.Name, Dims: ti.Dims, Type: ti.Type, Data: raw}
		if len(ti.Dims) == 2 && ti.Type == gguf.TypeF32 {
			vals := make([]float32, len(raw)/4)
			for i := range vals {
				vals[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
			}
			spec.Type, spec.Data = gguf.TypeQ4_0, make([]byte, len(vals)/32*18)
			if err := gguf.Quantize(gguf.TypeQ4_0, spec.Data, vals); err != nil {
				t.Fatal(err)
			}
		}
		ts = append(ts, spec)
	}
	var buf bytes.Buffer
	if err := gguf.Write(&buf, f.KVs, ts, 0); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "q4_0.gguf")
	if err := os.WriteFile(out, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestStressWithinSlack runs a worst-case workload on a KV pool sized by the
// budget: prompts at the chunk limit, the maximum running batch, logprobs
// requested; nothing may fail and the runtime peak must stay in the slack.
func TestStressWithinSlack(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping in -short mode: a stress run against the reserved slack")
	}
	path := writeModel(t, "tiny")
	cfg := baseConfig(path, 160<<20)
	cfg.MaxRunning, cfg.ChunkedPrefill = 8, 256
	s, err := Build(cfg, nil, os.Stdout)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	b := s.Budget
	dev := b.TotalBytes
	if limit := max(dev/10, 256<<20); b.HeadroomBytes >= limit {
		t.Fatalf("slack %d is not below max(10%% of %d, 256 MiB)", b.HeadroomBytes, dev)
	}
	s.Act.ResetPeak()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ctxLen := s.Model.Config.ContextLen
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	// Every request asks for output logprobs; some also for input
	// logprobs over the whole prompt, some for n = 4 choices, and some
	// clients disconnect mid-stream.
	submit := func(i, plen, maxTok int) {
		defer wg.Done()
		prompt := make([]int32, plen)
		for j := range prompt {
			prompt[j] = int32((i*31 + j*17) % s.Model.Config.Vocab)
		}
		req := engine.Request{Prompt: prompt, MaxTokens: maxTok, IgnoreEOS: true, Logprobs: true, TopLogprobs: 5, Sampling: engine.SamplingParams{Temperature: 1}}
		switch i % 4 {
		case 1:
			req.N = 4
		case 2:
			req.PromptLogprobs, req.PromptTopLogprobs = true, 2
		}
		rctx, rcancel := context.WithCancel(ctx)
		defer rcancel()
		disconnect := i%5 == 3
		var st *engine.Stream
		for {
			var err error
			st, err = s.Engine.Submit(rctx, req)
			if err == nil {
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
		events := 0
		for ev := range st.Events {
			events++
			if disconnect && events == 2 {
				rcancel()
			}
			if ev.Err != nil && !(disconnect && events >= 2) {
				errs <- ev.Err
			}
		}
	}
	for i := range 3 * cfg.MaxRunning {
		wg.Add(1)
		plen := cfg.ChunkedPrefill
		if i%3 == 0 {
			plen = ctxLen - 8 // longest prompts: chunked at the limit
		}
		go submit(i, plen, 4)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("request failed: %v", err)
	}
	st := s.Act.Stats()
	if st.NumOOMs != 0 {
		t.Fatalf("%d OOMs", st.NumOOMs)
	}
	if st.PeakReserved > b.HeadroomBytes {
		t.Fatalf("runtime peak %d exceeds the reserved slack %d", st.PeakReserved, b.HeadroomBytes)
	}
	if err := ledger.Check(s.Ledger.Snapshot()); err != nil {
		t.Fatal(err)
	}
	reserved := 0
	if s.Graphs != nil {
		reserved = 1
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		es := s.Engine.Stats()
		if es.Running == 0 && es.KVPagesFree+es.KVPagesCached == es.KVPagesTotal-reserved {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("KV pages not all free after the stress: %+v", es)
		}
	}
	t.Logf("device %d B: KV tokens %d, slack %d B (profile %d + allowance %d), runtime peak %d B; SGLang default: f=%.3f tokens %d (%s)",
		dev, b.Tokens, b.HeadroomBytes, b.ProfilePeakBytes, b.FragmentationBytes, st.PeakReserved, b.SGLang.MemFractionStatic, b.SGLang.Tokens, b.SGLang.Error)
}

// splitRegistry is the built-in configurators plus the out-of-tree example
// (examples/configurator: layers over two pools and an extra per-token
// buffer), which claims Llama models over the built-in mha.
func splitRegistry(t *testing.T) *plugin.Registry {
	t.Helper()
	dir := t.TempDir()
	goBin := filepath.Join(os.Getenv("GOROOT"), "bin", "go")
	if _, err := os.Stat(goBin); os.Getenv("GOROOT") == "" || err != nil {
		goBin = "go"
	}
	cmd := exec.Command(goBin, "build", "-trimpath", "-buildmode=c-shared", "-o", filepath.Join(dir, "gqa-example.wasm"), ".")
	cmd.Dir = filepath.Join("..", "..", "examples", "configurator")
	cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm", "GOWORK=off", "GOFLAGS=", "GOPROXY=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building the example configurator: %v\n%s", err, out)
	}
	rt, err := plugin.NewRuntime(context.Background(), plugin.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rt.Close(context.Background()) })
	reg, err := plugin.NewRegistry(rt, builtin.FS(), dir)
	if err != nil {
		t.Fatal(err)
	}
	return reg
}
