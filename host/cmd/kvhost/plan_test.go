package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/kvhost/kvhost/host/budget"
	"github.com/kvhost/kvhost/host/plan"
)

// configs are the HF config.json files of configurators/testdata (one
// copy per architecture; their README names the sources).
func config(name string) string {
	return filepath.Join("..", "..", "..", "configurators", "testdata", name+".json")
}

// planCLI runs `kvhost plan --json args…` through run, as a user would.
func planCLI(t *testing.T, args ...string) (map[string]any, error) {
	t.Helper()
	var out, stderr bytes.Buffer
	if err := run(context.Background(), append([]string{"plan", "--json"}, args...), &out, &stderr); err != nil {
		return nil, err
	}
	var v map[string]any
	if err := json.Unmarshal(out.Bytes(), &v); err != nil {
		t.Fatalf("plan %v: %v\n%s", args, err, out.String())
	}
	return v, nil
}

// lookup follows a path through decoded JSON: "a.b" keys, "0" indices and
// "{name=X}" the element of a list whose name is X.
func lookup(v any, path string) (any, error) {
	var segs []string
	depth, start := 0, 0
	for i, c := range path {
		switch {
		case c == '{':
			depth++
		case c == '}':
			depth--
		case c == '.' && depth == 0:
			segs = append(segs, path[start:i])
			start = i + 1
		}
	}
	for _, s := range append(segs, path[start:]) {
		switch x := v.(type) {
		case map[string]any:
			var ok bool
			if v, ok = x[s]; !ok {
				return nil, fmt.Errorf("no key %q", s)
			}
		case []any:
			if name, ok := strings.CutPrefix(s, "{name="); ok {
				name = strings.TrimSuffix(name, "}")
				v = nil
				for _, e := range x {
					if m, ok := e.(map[string]any); ok && m["name"] == name {
						v = m
					}
				}
				if v == nil {
					return nil, fmt.Errorf("no element named %q", name)
				}
				continue
			}
			i, err := strconv.Atoi(s)
			if err != nil || i >= len(x) {
				return nil, fmt.Errorf("bad index %q", s)
			}
			v = x[i]
		default:
			return nil, fmt.Errorf("%q: not an object or list", s)
		}
	}
	return v, nil
}

// want is one number of the report: exactly, or rounded to Places decimals
// as SGLang's logs print it.
type want struct {
	path   string
	value  float64
	places int // 0: exact
}

// TestPlanCLIReproducesSpecVectors runs every §7 vector of
// ../shared/spec/memory-budget.md through the command line and checks each
// number the spec states. The model configs are the real config.json
// files; the device is a preset, or the figures the vector gives.
func TestPlanCLIReproducesSpecVectors(t *testing.T) {
	L, Q, DS, OSS, QN := config("llama-3-8b"), config("qwen3-8b"), config("deepseek-v3"), config("gpt-oss-20b"), config("qwen3-next-80b-a3b")
	h100 := []string{"--gpu", "H100-80GB"}
	compat := func(model string, args ...string) []string {
		return slices.Concat([]string{"--model", model, "--sglang-compat"}, args)
	}
	with := func(base []string, args ...string) []string { return slices.Concat(base, args) }
	v3 := compat(L, "--gpu", "H100-80GB", "--mem-fraction-static", "0.85")
	// V7/V8 give the budget itself: f = 1 leaves no slack, so the budget
	// is A exactly.
	budget50 := []string{"--gpu", "H200", "--mem-fraction-static", "1", "--free-before-weights", "80GiB", "--free-at-kv-sizing", "50GiB"}
	rest30 := []string{"--gpu", "H200", "--tp", "4", "--mem-fraction-static", "1", "--free-before-weights", "80GiB", "--free-at-kv-sizing", "30GiB"}
	const MiB = 1 << 20
	tests := []struct {
		name  string
		args  []string
		wants []want
	}{
		// V1 cell sizes (bytes per token over all local layers).
		{"V1 Llama-3-8B bf16", compat(L, h100...), []want{{"pools.0.cell_bytes", 131072, 0}}},
		{"V1 Llama-3-8B fp8", compat(L, "--gpu", "H100-80GB", "--kv-cache-dtype", "fp8_e4m3"), []want{{"pools.0.cell_bytes", 65536, 0}}},
		{"V1 Llama-3-8B mxfp8", compat(L, "--gpu", "H100-80GB", "--kv-cache-dtype", "mxfp8"), []want{{"pools.0.cell_bytes", 67584, 0}}},
		{"V1 Llama-3-8B nvfp4", compat(L, "--gpu", "H100-80GB", "--kv-cache-dtype", "nvfp4"), []want{{"pools.0.cell_bytes", 38912, 0}}},
		{"V1 Llama-3-8B TP8", compat(L, "--gpu", "H100-80GB", "--tp", "8"), []want{{"pools.0.cell_bytes", 16384, 0}}},
		{"V1 Qwen3-8B", compat(Q, h100...), []want{{"pools.0.cell_bytes", 147456, 0}}},
		{"V1 DeepSeek-V3 MLA bf16", compat(DS, "--gpu", "H200", "--tp", "8"), []want{{"pools.0.cell_bytes", 70272, 0}}},
		{"V1 DeepSeek-V3 MLA fp8", compat(DS, "--gpu", "H200", "--tp", "8", "--kv-cache-dtype", "fp8_e4m3"), []want{{"pools.0.cell_bytes", 35136, 0}}},
		{"V1 DeepSeek-V3 + MTP", compat(DS, "--gpu", "H200", "--tp", "8", "--speculative-draft-layers", "1"), []want{{"pools.0.cell_bytes", 71424, 0}}},
		// V2 default mem_fraction_static.
		{"V2 H100 tp1", compat(L, h100...), []want{{"sglang.reserve_mib", 13904, 0}, {"sglang.mem_fraction_static", 0.830, 0}}},
		{"V2 H100 tp8", compat(L, "--gpu", "H100-80GB", "--tp", "8"), []want{{"sglang.reserve_mib", 15312, 0}, {"sglang.mem_fraction_static", 0.812, 0}}},
		{"V2 H200 tp1", compat(L, "--gpu", "H200"), []want{{"sglang.reserve_mib", 13904, 0}, {"sglang.mem_fraction_static", 0.903, 0}}},
		{"V2 H200 tp8", compat(L, "--gpu", "H200", "--tp", "8"), []want{{"sglang.reserve_mib", 15312, 0}, {"sglang.mem_fraction_static", 0.893, 0}}},
		{"V2 RTX 4090 tp1", compat(L, "--gpu", "RTX4090"), []want{{"sglang.reserve_mib", 7280, 0}, {"sglang.mem_fraction_static", 0.704, 0}}},
		{"V2 RTX 4090 tp8", compat(L, "--gpu", "RTX4090", "--tp", "8"), []want{{"sglang.reserve_mib", 8400, 0}, {"sglang.mem_fraction_static", 0.658, 0}}},
		{"V2 H200 MLA tp8", compat(DS, "--gpu", "H200", "--tp", "8"), []want{{"sglang.reserve_mib", 16384, 0}, {"sglang.mem_fraction_static", 0.886, 0}}},
		// DeepSeek-V2-Lite on an A100-80GB (host/plan's TestDeepseekV2LiteA100
		// works it by hand): the MLA rule's f, the tokens, and the weight bytes
		// a decoded token reads: one embedding row, 27 attention blocks (kv_b split
		// in f32 as loaded), the dense layer, 26 × (router + 6/64 of the experts +
		// shared experts), the LM head = 5 016 373 248 B.
		{"V2-Lite A100", compat(config("deepseek-v2-lite"), "--gpu", "A100-80GB"), []want{{"sglang.reserve_mib", 14976, 0},
			{"sglang.mem_fraction_static", 0.817, 0}, {"sglang.tokens", 1224423, 0}, {"decode_read.bytes_per_token", 5016373248, 0},
			{"decode_read.experts_used", 6, 0}, {"decode_read.experts", 64, 0}}},
		{"V2 H100 post-capture", compat(L, "--gpu", "H100-80GB", "--post-capture"), []want{{"sglang.reserve_mib", 1664, 0}, {"sglang.mem_fraction_static", 0.980, 0}}},
		{"V2 H100 no prefill graph", compat(L, "--gpu", "H100-80GB", "--disable-prefill-graph"), []want{{"sglang.reserve_mib", 13440, 0}, {"sglang.mem_fraction_static", 0.835, 0}}},
		{"V2 H200 decode graph bs 64", compat(L, "--gpu", "H200", "--cuda-graph-max-bs", "64"), []want{{"sglang.reserve_mib", 13520, 0}, {"sglang.mem_fraction_static", 0.906, 0}}},
		// V3 Llama-3-8B on an H100.
		{"V3 f=0.85", v3, []want{
			{"device.p_bytes", 84711309312, 0}, {"device.a_bytes", 68629815296, 0},
			{"sglang.p_gib", 78.8935546875, 0}, {"sglang.a_gib", 63.91649627685547, 0},
			{"sglang.slack_gib", 11.834033203125001, 0}, {"sglang.rest_gib", 52.082463073730466, 0},
			{"sglang.budget_bytes", 55923118899, 0}, {"sglang.tokens", 426659, 0}, {"sglang.max_running_requests", 4096, 0},
			{"sglang.pool_bytes", 55923179520, 0}, {"sglang.req_to_token_bytes", 134316048, 0},
			{"ledger.phases.{name=weights}.avail_gib", 63.92, 2}, {"ledger.phases.{name=weights}.usage_gib", 14.98, 2},
			{"sglang.k_size_gib", 26.04, 2}, {"sglang.v_size_gib", 26.04, 2},
			// V12: 64 buffers of 873 799 680 B each reserve 874 512 384.
			{"sglang.allocator_rounding_bytes", 45613056, 0},
		}},
		{"V3 default f", compat(L, h100...), []want{{"sglang.budget_bytes", 54228892712, 0}, {"sglang.tokens", 413733, 0}}},
		{"V3 page 64", with(v3, "--page-size", "64"), []want{{"sglang.tokens", 426624, 0}}},
		// V4 other dtypes, same inputs.
		{"V4 fp8", with(v3, "--kv-cache-dtype", "fp8_e4m3"), []want{{"sglang.tokens", 853319, 0}}},
		{"V4 FP4", with(v3, "--kv-cache-dtype", "nvfp4"), []want{{"sglang.tokens", 1437168, 0}}},
		// V5 Qwen3-8B.
		{"V5 Qwen3-8B", compat(Q, "--gpu", "H100-80GB", "--mem-fraction-static", "0.85"), []want{
			{"device.a_bytes", 68308867072, 0}, {"sglang.budget_bytes", 55602170675, 0}, {"sglang.tokens", 377076, 0},
			{"sglang.max_running_requests", 4096, 0}, {"sglang.req_to_token_bytes", 671318032, 0},
		}},
		// V6 DeepSeek-V3 MLA on 8×H200: the world minima go through float32.
		{"V6 DeepSeek-V3 TP8", compat(DS, "--gpu", "H200", "--tp", "8", "--page-size", "64", "--mem-fraction-static", "0.886",
			"--free-before-weights", "147312000000", "--free-at-kv-sizing", "61300000000"), []want{
			{"sglang.p_world_bytes", 147312001024, 0}, {"sglang.a_world_bytes", 61299998720, 0},
			{"sglang.p_gib", 137.1949920654297, 0}, {"sglang.a_gib", 57.09007263183594, 0},
			{"sglang.slack_gib", 15.640229095458983, 0}, {"sglang.rest_gib", 41.44984353637695, 0},
			{"sglang.budget_bytes", 44506430603, 0}, {"sglang.tokens", 633344, 0}, {"sglang.max_running_requests", 2048, 0},
			{"sglang.pool_bytes", 44510846976, 0},
		}},
		// V7 gpt-oss-20b hybrid SWA, budget 50 GiB.
		{"V7 gpt-oss-20b", compat(OSS, budget50...), []want{
			{"sglang.budget_bytes", 53687091200, 0}, {"sglang.units.full", 1213629, 0}, {"sglang.units.swa", 970903, 0},
			{"pools.{name=full}.cell_bytes", 24576, 0}, {"pools.{name=swa}.cell_bytes", 24576, 0},
		}},
		{"V7 page 64", compat(OSS, with(budget50, "--page-size", "64")...), []want{{"sglang.units.full", 1213568, 0}, {"sglang.units.swa", 970816, 0}}},
		// Issue 16: gpt-oss-120b (18 full + 18 sliding layers): hybrid cell
		// 18·2048 + 0.8·18·2048 = 66 355.2 B, floor(50 GiB / cell) = 809 086.
		{"gpt-oss-120b hybrid", compat(config("gpt-oss-120b"), budget50...), []want{
			{"sglang.budget_bytes", 53687091200, 0}, {"sglang.units.full", 809086, 0}, {"sglang.units.swa", 647268, 0},
			{"pools.{name=full}.cell_bytes", 36864, 0}, {"pools.{name=swa}.cell_bytes", 36864, 0},
		}},
		{"gpt-oss-120b page 64", compat(config("gpt-oss-120b"), with(budget50, "--page-size", "64")...), []want{{"sglang.units.full", 809024, 0}, {"sglang.units.swa", 647168, 0}}},
		// V8 Qwen3-Next-80B-A3B, TP4, rest 30 GiB.
		{"V8 Qwen3-Next", compat(QN, rest30...), []want{
			{"pools.{name=state}.cell_bytes", 19316736, 0}, {"pools.{name=kv}.cell_bytes", 12288, 0},
			{"sglang.mamba_slots", 788, 0}, {"sglang.units.state", 789, 0}, {"sglang.tokens", 1381132, 0},
			{"sglang.max_running_requests", 262, 0}, {"pools.{name=state}.sglang_bytes", 15240904704, 0},
		}},
		{"V8 extra buffer", compat(QN, with(rest30, "--mamba-scheduler-strategy", "extra_buffer")...), []want{{"sglang.max_running_requests", 157, 0}}},
		// V9–V12 runtime peaks of kvhost's plan (Llama-3-8B, 8192-token chunk).
		{"V9 V10 V12 peaks", []string{"--model", L, "--gpu", "H100-80GB", "--max-running-requests", "8"}, []want{
			{"moments.{name=prefill layer (8192 tokens)}.bytes", 973078528, 0},
			{"moments.{name=prefill attention (8192 tokens)}.bytes", 352 * MiB, 0},
			{"moments.{name=LM head unpruned (8192 rows; kvhost prunes)}.bytes", 6371147776, 0},
			{"moments.{name=input logprobs, one chunk (2048 rows)}.bytes", 2626682880, 0},
			{"moments.{name=input logprobs, one chunk (2048 rows)}.tensors.{name=logits bf16 [chunk,V]}.bytes", 525336576, 0},
			{"moments.{name=prefill LM head, pruned (8 rows)}.tensors.{name=logits FP32 [rows,V]}.bytes", 4104192, 0},
			{"moments.{name=prefill LM head, pruned (8 rows)}.tensors.{name=logits FP32 [rows,V]}.allocator_bytes", 4104192, 0},
			{"moments.{name=prefill LM head, pruned (8 rows)}.tensors.{name=logits bf16 [rows,V]}.bytes", 2052096, 0},
			{"moments.{name=graph-shared logits (256 rows)}.bytes", 131334144, 0},
			{"moments.{name=graph-shared logits (256 rows)}.allocator_bytes", 132120576, 0},
		}},
		{"V11 MoE cache", []string{"--model", DS, "--gpu", "H200", "--tp", "8"}, []want{
			{"moments.{name=prefill layer (8192 tokens)}.tensors.{name=fused_moe cache}.bytes", 928 * MiB, 0},
		}},
		// V14 post-capture sizing on V3's model and inputs.
		{"V14 post-capture", compat(L, "--gpu", "H100-80GB", "--post-capture", "--mem-fraction-static", "0.98",
			"--free-after-capture", "66800000000", "--max-running-requests", "256"), []want{
			{"sglang.post_capture.slack_gib", 1.5778710937500013, 0}, {"sglang.post_capture.upper_bound_tokens", 510678, 0},
			{"sglang.post_capture.boot_backing_bytes", 134217728, 0}, {"sglang.post_capture.budget_bytes", 65239991541, 0},
			{"sglang.post_capture.tokens", 497741, 0}, {"sglang.post_capture.mapped_bytes", 65364033536, 0},
			{"sglang.post_capture.over_commit_bytes", 124041995, 0}, {"sglang.post_capture.free_after_bytes", 1570184192, 0},
			{"budget.tokens", 497741, 0},
		}},
		// V15 the ledger identity over measured readings.
		{"V15 ledger", []string{"--model", L, "--gpu", "H100-80GB", "--free-readings",
			"85060000000,84711309312,68629815296,12520000000,12115249664,11650000000,11240000000"}, []want{
			{"measured_ledger.deltas.0", 348690688, 0}, {"measured_ledger.deltas.1", 16081494016, 0},
			{"measured_ledger.deltas.2", 56109815296, 0}, {"measured_ledger.deltas.3", 404750336, 0},
			{"measured_ledger.deltas.4", 465249664, 0}, {"measured_ledger.deltas.5", 410000000, 0},
			{"measured_ledger.sum_deltas", 73820000000, 0},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := planCLI(t, tt.args...)
			if err != nil {
				t.Fatalf("kvhost plan %s: %v", strings.Join(tt.args, " "), err)
			}
			for _, w := range tt.wants {
				v, err := lookup(r, w.path)
				if err != nil {
					t.Errorf("%s: %v", w.path, err)
					continue
				}
				got, ok := v.(float64)
				if !ok {
					t.Errorf("%s = %v, not a number", w.path, v)
					continue
				}
				if w.places > 0 {
					p := math.Pow(10, float64(w.places))
					got = math.Round(got*p) / p
				}
				if got != w.value {
					t.Errorf("%s = %.17g, spec says %.17g", w.path, got, w.value)
				}
			}
		})
	}
}

// TestPlanCLISizingKnobs checks the knobs beyond the spec's vectors
// against the spec's formulas written out here: the sliding-window and
// Mamba ratios (§3) and the A100-40GB preset's default f (§2: chunk 4096,
// decode graph bs 32, r = 512 + 1.5·4096 + 128 + 2·32 + 8·50).
func TestPlanCLISizingKnobs(t *testing.T) {
	const budget = 50 << 30
	r, err := planCLI(t, "--model", config("gpt-oss-20b"), "--sglang-compat", "--gpu", "H200", "--mem-fraction-static", "1",
		"--free-before-weights", "80GiB", "--free-at-kv-sizing", "50GiB", "--swa-full-tokens-ratio", "0.5")
	if err != nil {
		t.Fatal(err)
	}
	full := math.Floor(budget / (24576 + 0.5*24576))
	for path, want := range map[string]float64{"sglang.units.full": full, "sglang.units.swa": math.Trunc(full * 0.5)} {
		if v, err := lookup(r, path); err != nil || v != want {
			t.Errorf("ratio 0.5: %s = %v (%v), want %v", path, v, err, want)
		}
	}
	r, err = planCLI(t, "--model", config("qwen3-next-80b-a3b"), "--sglang-compat", "--gpu", "H200", "--tp", "4", "--mem-fraction-static", "1",
		"--free-before-weights", "80GiB", "--free-at-kv-sizing", "30GiB", "--mamba-full-memory-ratio", "1")
	if err != nil {
		t.Fatal(err)
	}
	const per = 19316736
	k := math.Floor((30.0/2*(1<<30) - per) / per)
	if v, err := lookup(r, "sglang.mamba_slots"); err != nil || v != k {
		t.Errorf("m = 1: %v slots (%v), want %v", v, err, k)
	}
	r, err = planCLI(t, "--model", config("llama-3-8b"), "--sglang-compat", "--gpu", "A100-40GB")
	if err != nil {
		t.Fatal(err)
	}
	rmib := 512 + 1.5*4096 + 128 + 2*32 + 8*50.0
	if v, _ := lookup(r, "sglang.reserve_mib"); v != rmib {
		t.Errorf("A100-40GB reserve %v, want %v", v, rmib)
	}
	if v, _ := lookup(r, "sglang.mem_fraction_static"); v != math.Round((40960-rmib)/40960*1000)/1000 {
		t.Errorf("A100-40GB f %v", v)
	}
}

// TestPlanCLIErrorAdvice: V13's error names the fraction to set, and
// following it on the command line gives a plan; likewise for kvhost's
// own policy on a GPU too small for the model.
func TestPlanCLIErrorAdvice(t *testing.T) {
	v13 := []string{"--model", config("llama-3-8b"), "--gpu", "H100-80GB", "--sglang-compat",
		"--free-before-weights", "78GiB", "--free-at-kv-sizing", "8GiB"}
	small := []string{"--model", config("qwen3-8b"), "--gpu", "RTX4090"}
	for _, tt := range []struct {
		name string
		args []string
		text string
	}{
		{"V13", slices.Concat(v13, []string{"--mem-fraction-static", "0.85"}), "set --mem-fraction-static to 0.898 (minimum 0.8974)"},
		{"kvhost on an RTX 4090", small, "each of these plans"},
	} {
		_, err := planCLI(t, tt.args...)
		var ae *plan.AdviceError
		if err == nil || !strings.Contains(err.Error(), tt.text) || !errors.As(err, &ae) || len(ae.Fixes) == 0 {
			t.Fatalf("%s: %v", tt.name, err)
		}
		for _, f := range ae.Fixes {
			args := append(append([]string(nil), tt.args...), f.Flag, f.Value)
			if _, err := planCLI(t, args...); err != nil {
				t.Errorf("%s: following %s: %v", tt.name, f, err)
			}
		}
	}
}

// TestPlanCLIRefusesGPUFlagsOnCPU: a GPU-only knob on the CPU plan is an
// error naming it, never silently dropped.
func TestPlanCLIRefusesGPUFlagsOnCPU(t *testing.T) {
	for _, args := range [][]string{
		{"--swa-full-tokens-ratio", "0.5"}, {"--tp", "2"}, {"--post-capture"},
	} {
		_, err := planCLI(t, append([]string{"--model", config("llama-3-8b")}, args...)...)
		if err == nil || !strings.Contains(err.Error(), strings.TrimPrefix(args[0], "--")) {
			t.Errorf("%v on the CPU plan: %v", args, err)
		}
	}
	if _, err := planCLI(t, "--model", config("llama-3-8b"), "--gpu", "H100-80GB", "--device-memory", "6GiB"); err == nil {
		t.Error("--device-memory accepted on a GPU plan")
	}
}

// TestPlanCLISWAPoolTooSmall: a budget whose window pool cannot hold
// sliding_window + page tokens names the bytes the configurator needs,
// short by a positive figure. gpt-oss-120b (18 full + 18 sliding layers,
// window 128, page 1): the window pool holds int(0.8·full) tokens and must
// exceed 128 + 1, so full ≥ 163 and the budget ≥ ⌈163 · 66 355.2⌉ =
// 10 815 898 bytes (spec §3's hybrid cell 18·2048 + 0.8·18·2048, bf16).
func TestPlanCLISWAPoolTooSmall(t *testing.T) {
	args := func(kv string) []string {
		return []string{"--model", config("gpt-oss-120b"), "--sglang-compat", "--gpu", "H200", "--mem-fraction-static", "1",
			"--free-before-weights", "80GiB", "--free-at-kv-sizing", kv}
	}
	const need = 10815898
	for _, have := range []int64{need - 1, 10 << 20, 5 << 20} {
		_, err := planCLI(t, args(strconv.FormatInt(have, 10))...)
		var ime *budget.InsufficientMemoryError
		if err == nil || !errors.As(err, &ime) {
			t.Fatalf("%d bytes: %v, want an InsufficientMemoryError", have, err)
		}
		short := fmt.Sprintf("needs %d bytes, has %d bytes (short by %d bytes", int64(need), have, need-have)
		if ime.NeedBytes != need || ime.HaveBytes != have || !strings.Contains(err.Error(), short) {
			t.Errorf("%d bytes: %v\nwant %q", have, err, short)
		}
	}
	r, err := planCLI(t, args(strconv.Itoa(need))...)
	if err != nil {
		t.Fatalf("%d bytes: %v", need, err)
	}
	for path, want := range map[string]float64{"sglang.units.full": 163, "sglang.units.swa": 130} {
		if v, err := lookup(r, path); err != nil || v != want {
			t.Errorf("%s = %v (%v), want %v", path, v, err, want)
		}
	}
}
