package plan

import (
	"encoding/binary"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvhost/kvhost/host/budget"
	"github.com/kvhost/kvhost/host/ledger"
	"github.com/kvhost/kvhost/sdk"
)

// configDir holds the HF config.json files every configurator test reads
// (one copy per architecture, see its README).
const configDir = "../../configurators/testdata"

func hfConfig(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(configDir, name+".json"))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestParseHFModelParams checks the weight estimate: exact for the dense
// models whose parameter counts the spec and the model cards state, and
// within 2% of the published totals for the MoE, MLA and hybrid models.
func TestParseHFModelParams(t *testing.T) {
	for _, tt := range []struct {
		name  string
		want  int64
		exact bool
		arch  string
	}{
		{"llama-3-8b", 8030261248, true, "dense"},
		{"qwen3-8b", 8190735360, true, "dense"},
		{"mistral-7b-v0.1", 7241732096, true, "dense"},
		{"gemma-2-9b-it", 9241705984, false, "dense"},
		{"deepseek-v3", 671e9, false, "mla moe"},
		{"deepseek-v2-lite", 15.7e9, false, "mla moe"},
		{"gpt-oss-20b", 20.91e9, false, "moe"},
		{"qwen3-next-80b-a3b", 80e9, false, "gdn moe"},
		{"nemotron-h-8b", 8.1e9, false, "mamba2"},
		{"gemma-3-12b-it", 12.2e9, false, "dense vlm"},
	} {
		m, err := ParseHFModel(hfConfig(t, tt.name))
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if tt.exact && m.Params != tt.want {
			t.Errorf("%s: %d params, want exactly %d", tt.name, m.Params, tt.want)
		}
		if d := math.Abs(float64(m.Params-tt.want)) / float64(tt.want); d > 0.02 {
			t.Errorf("%s: %d params, %.1f%% from the published %d", tt.name, m.Params, 100*d, tt.want)
		}
		if strings.Contains(tt.arch, "mla") != (m.MLA != nil) || strings.Contains(tt.arch, "moe") != (m.MoE != nil) {
			t.Errorf("%s: MLA %v MoE %v, want %s", tt.name, m.MLA, m.MoE, tt.arch)
		}
	}
	// Quantized checkpoints: DeepSeek-V3's fp8 linear layers take a byte,
	// gpt-oss's mxfp4 experts 4.25 bits.
	ds, _ := ParseHFModel(hfConfig(t, "deepseek-v3"))
	oss, _ := ParseHFModel(hfConfig(t, "gpt-oss-20b"))
	if r := float64(ds.WeightBytes) / float64(ds.Params); r < 1 || r > 1.05 {
		t.Errorf("DeepSeek-V3 fp8: %.3f bytes per parameter", r)
	}
	if oss.WeightBytes > 14e9 || oss.WeightBytes < 12e9 {
		t.Errorf("gpt-oss-20b mxfp4: %d weight bytes, the checkpoint holds about 13.8 GB", oss.WeightBytes)
	}
	if _, err := ParseHFModel([]byte(`{"architectures":["LlamaForCausalLM"],"hidden_size":8,"num_attention_heads":2}`)); err == nil || !strings.Contains(err.Error(), "num_hidden_layers") {
		t.Errorf("missing layers: %v", err)
	}
}

func gpuIn(t testing.TB, name, gpu string) GPUInput {
	return GPUInput{Name: name, Config: hfConfig(t, name), GPU: gpu, GraphMaxBS: -1}
}

// checkPlan holds every GPU plan to its invariants: the ledger chains and
// balances, what is free when serving starts covers the runtime headroom,
// and the pools' mapped bytes are what the ledger's KV allocator holds.
func checkPlan(t *testing.T, name string, r GPUReport) {
	t.Helper()
	if err := ledger.Check(r.Ledger); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	b := r.Budget
	if b.Policy == "kvhost" {
		if r.Ledger.FreeBytes < b.HeadroomBytes {
			t.Fatalf("%s: %d B free when serving starts, headroom %d B", name, r.Ledger.FreeBytes, b.HeadroomBytes)
		}
		var mapped int64
		for _, p := range r.Pools {
			mapped += p.MappedBytes
		}
		if mapped != b.KVMappedBytes {
			t.Fatalf("%s: pools map %d B, budget says %d", name, mapped, b.KVMappedBytes)
		}
	}
}

// TestEveryArchitecturePlans plans every config the configurators know,
// on a GPU, with both policies: each gets its declared pools (two for the
// sliding-window and hybrid Mamba models, with a request-scoped state pool
// for the latter), although kvhost serves only the Llama family today.
func TestEveryArchitecturePlans(t *testing.T) {
	for _, tt := range []struct {
		name, plugin string
		tp           int
		pools        []string
	}{
		{"llama-3-8b", "mha", 1, []string{"kv"}},
		{"qwen3-8b", "mha", 1, []string{"kv"}},
		{"mistral-7b-v0.1", "swa", 1, []string{"swa"}}, // sliding_window 4096 < 32768: every layer slides
		{"mistral-7b-instruct-v0.2", "mha", 1, []string{"kv"}},
		{"deepseek-v3", "mla", 8, []string{"kv"}},
		{"deepseek-v2-lite", "mla", 1, []string{"kv"}},
		{"gpt-oss-20b", "swa", 1, []string{"full", "swa"}},
		{"gemma-2-9b-it", "swa", 1, []string{"full", "swa"}},
		{"gemma-3-12b-it", "swa", 1, []string{"full", "swa"}},
		{"nemotron-h-8b", "mamba", 1, []string{"state", "kv"}},
		{"qwen3-next-80b-a3b", "mamba", 4, []string{"state", "kv"}},
	} {
		for _, compat := range []bool{false, true} {
			in := gpuIn(t, tt.name, "H200")
			in.TP, in.SGLangCompat = tt.tp, compat
			r, err := PlanGPU(in)
			if err != nil {
				t.Fatalf("%s compat=%v: %v", tt.name, compat, err)
			}
			checkPlan(t, tt.name, r)
			var got []string
			for _, p := range r.Pools {
				got = append(got, p.Name)
				if p.Units < 1 || p.SGLangUnits < 1 {
					t.Errorf("%s: pool %s units %d (SGLang %d)", tt.name, p.Name, p.Units, p.SGLangUnits)
				}
				if p.Unit == sdk.UnitRequest && tt.plugin != "mamba" {
					t.Errorf("%s: request pool from %s", tt.name, tt.plugin)
				}
			}
			if strings.Join(got, ",") != strings.Join(tt.pools, ",") || r.Budget.KVConfigurator.Plugin != tt.plugin {
				t.Errorf("%s: pools %v by %s, want %v by %s", tt.name, got, r.Budget.KVConfigurator.Plugin, tt.pools, tt.plugin)
			}
		}
	}
}

// TestDecode4096HeadroomCoversSummedPeaks plans a 4096-row decode of a
// 128k-vocabulary model (Llama-3-8B, V = 128 256) and recomputes the live
// set of its sampling step from the tensor shapes: FP32 logits, the
// softmax temporary, the top-k/top-p sort's values and int64 indices and
// the cumulative sum, beside the batch's two FP32 penalty accumulators,
// each charged as the caching allocator does. The headroom must hold their
// sum — not the largest of them, not 256 rows of them.
func TestDecode4096HeadroomCoversSummedPeaks(t *testing.T) {
	in := gpuIn(t, "llama-3-8b", "H100-80GB")
	in.MaxRunning = 4096
	r, err := PlanGPU(in)
	if err != nil {
		t.Fatal(err)
	}
	checkPlan(t, "4096 rows", r)
	const rows, vocab = 4096, 128256
	n := int64(rows) * vocab
	var sum int64
	for _, bytes := range []int64{4 * n, 4 * n, 4 * n, 8 * n, 4 * n, 8 * n} { // logits, softmax, sort values, sort indices, cumsum, penalties
		blk, _, _ := budget.AllocatorBlock(bytes)
		sum += blk
	}
	b := r.Budget
	if r.Admission.Admitted != rows || b.MaxRunning != rows {
		t.Fatalf("admitted %d (budget %d), want the explicit %d", r.Admission.Admitted, b.MaxRunning, rows)
	}
	if b.HeadroomBytes < sum {
		t.Fatalf("headroom %d B does not cover the sampling step's %d B", b.HeadroomBytes, sum)
	}
	if old := int64(256) * vocab * 4; b.HeadroomBytes < 10*old {
		t.Fatalf("headroom %d B looks sized for 256 rows", b.HeadroomBytes)
	}
	// The prefill moments are covered too, and the LM head's bf16+FP32
	// pair at 4096 rows (6 B per entry) is counted whole.
	for _, m := range r.Moments {
		if (m.Kind == MomentPrefill || m.Kind == MomentDecode) && m.AllocatorBytes > b.HeadroomBytes {
			t.Errorf("moment %s needs %d B, headroom %d B", m.Name, m.AllocatorBytes, b.HeadroomBytes)
		}
		if m.Name == "decode LM head (4096 rows)" && m.Bytes != 6*n+rows*4096*2 {
			t.Errorf("%s: %d B, want %d", m.Name, m.Bytes, 6*n+rows*4096*2)
		}
	}
	// The cuBLAS workspace (Hopper: 32 MiB) is reserved.
	found := false
	for _, res := range b.Reservations {
		found = found || (res.Name == "cuBLAS workspace" && res.Bytes == 32<<20)
	}
	if !found {
		t.Errorf("no 32 MiB cuBLAS workspace in %v", b.Reservations)
	}
}

// TestAdmissionCappedToSlack: without an explicit batch the plan starts
// from SGLang's 4096 requests, admits what fits in the slack SGLang's
// default f keeps, says so, and sizes the headroom for that batch.
func TestAdmissionCappedToSlack(t *testing.T) {
	r, err := PlanGPU(gpuIn(t, "llama-3-8b", "H100-80GB"))
	if err != nil {
		t.Fatal(err)
	}
	a := r.Admission
	if a.Requested != 4096 || a.Admitted >= 4096 || a.Admitted < 1024 || a.Note == "" {
		t.Fatalf("admission %+v", a)
	}
	if a.RuntimeBytes > a.SlackBytes || r.Budget.MaxRunning != a.Admitted {
		t.Fatalf("runtime %d B over the slack %d B, or budget R %d", a.RuntimeBytes, a.SlackBytes, r.Budget.MaxRunning)
	}
	// One more row would not fit: the cap is the largest batch.
	in := gpuIn(t, "llama-3-8b", "H100-80GB")
	in.MaxRunning = a.Admitted + 1
	r2, err := PlanGPU(in)
	if err != nil {
		t.Fatal(err)
	}
	if r2.Admission.RuntimeBytes <= a.SlackBytes {
		t.Fatalf("%d rows need %d B, within the %d B slack: the cap is not the largest batch", a.Admitted+1, r2.Admission.RuntimeBytes, a.SlackBytes)
	}
	checkPlan(t, "capped", r)
}

// TestOwnPolicyPlansWhereSGLangFails: with V13's readings SGLang's default
// f leaves no KV budget; kvhost's policy does not take SGLang's error (nor
// advise a fraction it does not use): it admits the batch whose runtime
// leaves one context of KV, and says so.
func TestOwnPolicyPlansWhereSGLangFails(t *testing.T) {
	in := gpuIn(t, "llama-3-8b", "H100-80GB")
	in.FreeBeforeWeights, in.FreeAtKVSizing = []int64{78 << 30}, []int64{8 << 30}
	r, err := PlanGPU(in)
	if err != nil {
		t.Fatal(err)
	}
	checkPlan(t, "V13 readings", r)
	if r.SGLang.Error == "" || r.Budget.Policy != "kvhost" || r.Budget.Tokens < 8192 {
		t.Fatalf("SGLang error %q, policy %s, %d tokens", r.SGLang.Error, r.Budget.Policy, r.Budget.Tokens)
	}
	if a := r.Admission; a.Admitted >= a.Requested || !strings.Contains(a.Note, "the weights leave") {
		t.Fatalf("admission %+v", a)
	}
}

// TestAdviceLeadsToPlan takes inputs that do not fit, under each policy,
// and follows every fix each error names: each must plan.
func TestAdviceLeadsToPlan(t *testing.T) {
	v13 := gpuIn(t, "llama-3-8b", "H100-80GB")
	v13.SGLangCompat, v13.MemFractionStatic = true, 0.85
	v13.FreeBeforeWeights, v13.FreeAtKVSizing = []int64{78 << 30}, []int64{8 << 30}
	small := gpuIn(t, "qwen3-8b", "RTX4090")
	fraction := gpuIn(t, "llama-3-8b", "H100-80GB")
	fraction.MemFractionStatic = 0.2
	batch := gpuIn(t, "llama-3-8b", "H100-80GB")
	batch.MemFractionStatic, batch.MaxRunning = 0.95, 4096
	weights := gpuIn(t, "qwen3-next-80b-a3b", "H200")
	for _, tt := range []struct {
		name string
		in   GPUInput
		want Fix // one fix that must be among the advice
	}{
		{"sglang-compat V13", v13, Fix{"--mem-fraction-static", "0.898"}},
		{"kvhost, small GPU", small, Fix{"--tp", "2"}},
		{"kvhost, f too low", fraction, Fix{"--mem-fraction-static", "0.205"}},
		{"kvhost, batch over the slack", batch, Fix{"--max-running-requests", ""}},
		{"weights over P", weights, Fix{"--tp", "2"}},
	} {
		_, err := PlanGPU(tt.in)
		var ae *AdviceError
		var ime *budget.InsufficientMemoryError
		if !errors.As(err, &ae) || !errors.As(err, &ime) {
			t.Fatalf("%s: %v, want an *AdviceError over an *InsufficientMemoryError", tt.name, err)
		}
		seen := false
		for _, f := range ae.Fixes {
			seen = seen || (f.Flag == tt.want.Flag && (tt.want.Value == "" || f.Value == tt.want.Value))
			in, ok := f.Apply(tt.in)
			if !ok {
				t.Fatalf("%s: fix %s does not apply", tt.name, f)
			}
			r, err := PlanGPU(in)
			if err != nil {
				t.Fatalf("%s: following %q: %v", tt.name, f, err)
			}
			checkPlan(t, tt.name+" "+f.String(), r)
			if tt.in.SGLangCompat && r.Budget.Policy != "sglang-compat" {
				t.Fatalf("%s: fix changed the policy", tt.name)
			}
		}
		if !seen || !strings.Contains(err.Error(), tt.want.Flag) {
			t.Errorf("%s: fixes %v, want %s among them: %v", tt.name, ae.Fixes, tt.want, err)
		}
	}
	// SGLang's own sizing at the recommended f plans, although kvhost's
	// policy at that f does not fit one context: that is reported beside
	// the plan, never the plan's error (and never --device-memory).
	v13.MemFractionStatic = 0.898
	r, err := PlanGPU(v13)
	if err != nil {
		t.Fatal(err)
	}
	if r.KVHost != nil || r.KVHostError == "" || strings.Contains(r.KVHostError, "--device-memory") {
		t.Fatalf("kvhost beside compat: %v / %q", r.KVHost, r.KVHostError)
	}
}

// TestGPUInputValidate names the bad field.
func TestGPUInputValidate(t *testing.T) {
	ok := gpuIn(t, "llama-3-8b", "H100-80GB")
	for _, tt := range []struct {
		field string
		mod   func(*GPUInput)
	}{
		{"free_before_weights", func(in *GPUInput) { in.TP, in.FreeBeforeWeights = 4, []int64{1, 2} }},
		{"free_at_kv_sizing", func(in *GPUInput) { in.FreeAtKVSizing = []int64{-1} }},
		{"mem_fraction_static", func(in *GPUInput) { in.MemFractionStatic = 1.5 }},
		{"swa_full_tokens_ratio", func(in *GPUInput) { in.SWAFullTokensRatio = 2 }},
		{"mamba_full_memory_ratio", func(in *GPUInput) { in.MambaFullMemoryRatio = -1 }},
		{"speculative_draft_layers", func(in *GPUInput) { in.DraftLayers = 65 }},
		{"kv_cache_dtype", func(in *GPUInput) { in.KVCacheDType = "int4" }},
		{"unknown GPU", func(in *GPUInput) { in.GPU = "B300" }},
		{"--gpu-memory-total", func(in *GPUInput) { in.GPU = "" }},
		{"cuda_graph_max_bs", func(in *GPUInput) { in.GraphMaxBS = -2 }},
	} {
		in := ok
		tt.mod(&in)
		if err := in.Validate(); err == nil || !strings.Contains(err.Error(), tt.field) {
			t.Errorf("%s: %v", tt.field, err)
		}
	}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
}

// TestLoadGPUModelWeightBytes reads exact weight sizes from a safetensors
// index, else from the .safetensors files' data sections.
func TestLoadGPUModelWeightBytes(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "config.json"), hfConfig(t, "llama-3-8b"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, n, _, err := LoadGPUModel(dir); err != nil || n != 0 {
		t.Fatalf("config only: %d %v", n, err)
	}
	for i, data := range []int{1000, 24} {
		hdr := []byte(`{"w":{"dtype":"BF16","shape":[1],"data_offsets":[0,2]}}`)
		f := make([]byte, 8, 8+len(hdr)+data)
		binary.LittleEndian.PutUint64(f, uint64(len(hdr)))
		f = append(append(f, hdr...), make([]byte, data)...)
		if err := os.WriteFile(filepath.Join(dir, "model-0000"+string(rune('1'+i))+".safetensors"), f, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, n, src, err := LoadGPUModel(dir); err != nil || n != 1024 || !strings.Contains(src, "2 .safetensors") {
		t.Fatalf("files: %d %q %v", n, src, err)
	}
	if err := os.WriteFile(filepath.Join(dir, "model.safetensors.index.json"), []byte(`{"metadata":{"total_size":16060522496},"weight_map":{}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	name, raw, n, _, err := LoadGPUModel(dir)
	if err != nil || n != 16060522496 || len(raw) == 0 || name != filepath.Base(dir) {
		t.Fatalf("index: %q %d %v", name, n, err)
	}
	in := GPUInput{Name: name, Config: raw, WeightBytes: n, WeightSource: "index", GPU: "H100-80GB", GraphMaxBS: -1}
	r, err := PlanGPU(in)
	if err != nil || r.Device.WeightBytes != n || r.Device.ABytes != 68629815296 {
		t.Fatalf("plan with index weights: A %d weights %d %v", r.Device.ABytes, r.Device.WeightBytes, err)
	}
}

// FuzzParseHFModel: any bytes either parse into a model whose counts are
// consistent or fail with an error; never a panic or a runaway estimate.
func FuzzParseHFModel(f *testing.F) {
	for _, n := range []string{"llama-3-8b", "deepseek-v3", "gpt-oss-20b", "qwen3-next-80b-a3b", "nemotron-h-8b", "gemma-3-12b-it"} {
		b, err := os.ReadFile(filepath.Join(configDir, n+".json"))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(`{"architectures":["X"],"hidden_size":1,"num_hidden_layers":4096,"num_attention_heads":1,"vocab_size":1,"max_position_embeddings":1,"intermediate_size":1,"hybrid_override_pattern":"M"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := ParseHFModel(b)
		if err != nil {
			return
		}
		if m.Layers < 1 || m.Layers > maxHFLayers || m.AttentionLayers+m.GDNLayers+m.Mamba2Layers+m.MLPOnlyLayers != m.Layers || m.Params < 0 {
			t.Fatalf("inconsistent model %+v", m)
		}
	})
}

// TestGPUOwnWindowSplit: kvhost's own policy sizes a GPU plan's window pool
// for the requests it admits (the swa configurator's WindowPoolTokens with
// the admitted rows and the chunk: each holds at most (window − 1 +
// chunk)/page + 2 pages, plus one padding page), as serve does, at most
// the full pool's size, the rest of the budget to the full pool; SGLang's
// figure keeps swa_full_tokens_ratio's 0.8. Worked for gpt-oss-20b on an
// H200 (window 128, page 1): 32 requests at chunk 512 want 20 513 window
// tokens; SGLang's default R at chunk 8192 wants more than the full pool.
func TestGPUOwnWindowSplit(t *testing.T) {
	for _, tt := range []struct {
		rows, chunk int
		capped      bool
	}{{32, 512, false}, {0, 0, true}} {
		in := gpuIn(t, "gpt-oss-20b", "H200")
		in.MaxRunning, in.ChunkedPrefill = tt.rows, tt.chunk
		r, err := PlanGPU(in)
		if err != nil {
			t.Fatal(err)
		}
		checkPlan(t, "gpt-oss-20b", r)
		rows, chunk := int64(r.Admission.Admitted), int64(r.Input.ChunkedPrefill)
		want := rows*(128-1+chunk+2) + 1
		units, sglang := map[string]int64{}, map[string]int64{}
		for _, p := range r.Pools {
			units[p.Name], sglang[p.Name] = p.Units, p.SGLangUnits
		}
		if tt.rows > 0 && (rows != 32 || want != 20513) {
			t.Fatalf("%d rows at chunk %d want %d window tokens, worked figure 20 513", rows, chunk, want)
		}
		if d := sglang["swa"] - sglang["full"]*8/10; d < -1 || d > 1 {
			t.Errorf("SGLang's window pool %d tokens is not 0.8 of its full pool %d", sglang["swa"], sglang["full"])
		}
		if units["swa"] != min(want, units["full"]) || (units["swa"] == units["full"]) != tt.capped {
			t.Fatalf("own window pool %d tokens for %d rows at chunk %d, want %d (full pool %d)", units["swa"], rows, chunk, min(want, units["full"]), units["full"])
		}
		t.Logf("%d rows, chunk %d: full %d + window %d tokens (SGLang %d + %d)", rows, chunk, units["full"], units["swa"], sglang["full"], sglang["swa"])
	}
}
