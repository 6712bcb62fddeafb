package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"runtime"
	"sort"
	"strings"

	"github.com/kvhost/kvhost/host/ledger"
	"github.com/kvhost/kvhost/host/plan"
	"github.com/kvhost/kvhost/host/plugin"
	"github.com/kvhost/kvhost/host/plugin/allowlist"
	"github.com/kvhost/kvhost/host/plugin/builtin"
)

func init() { extraCommands["plan"] = planCmd }

// byteList is a flag.Value of comma-separated sizes: one reading, or one
// per rank.
type byteList []int64

func (b *byteList) String() string {
	s := make([]string, len(*b))
	for i, v := range *b {
		s[i] = fmt.Sprint(v)
	}
	return strings.Join(s, ",")
}

func (b *byteList) Set(s string) error {
	*b = nil
	for _, f := range strings.Split(s, ",") {
		n, err := parseBytes(f)
		if err != nil {
			return err
		}
		*b = append(*b, n)
	}
	return nil
}

// gpuOnlyFlags only mean something on the GPU path; the CPU plan refuses
// them rather than ignore them.
var gpuOnlyFlags = []string{"tp", "gpu-memory-total", "free-before-weights", "free-at-kv-sizing", "free-after-capture", "free-readings",
	"context-length", "post-capture", "disable-prefill-graph", "swa-full-tokens-ratio", "mamba-full-memory-ratio",
	"mamba-scheduler-strategy", "disable-radix-cache", "speculative-draft-layers"}

// planCmd is `kvhost plan`: the ledger serve would produce, with no weights
// loaded, on the CPU device or on a GPU described by a preset and/or the
// free-memory figures of a real server's log.
func planCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("plan", stderr)
	var (
		in                                plan.Input
		g                                 plan.GPUInput
		mem                               byteSize = 8 << 30
		total                             byteSize
		modelP, devKind, strategy, kvType string
		asJSON                            bool
	)
	fs.StringVar(&modelP, "model", "", "config.json, a Hugging Face directory or a GGUF file (header only) (required)")
	fs.StringVar(&devKind, "device", "cpu", "device kind when no GPU is described: cpu")
	fs.Var(&mem, "device-memory", "CPU device memory capacity, e.g. 6GiB")
	fs.IntVar(&in.Threads, "threads", runtime.NumCPU(), "CPU kernel threads (sizes attention scratch)")
	fs.StringVar(&g.GPU, "gpu", "", "a described GPU (presets below)")
	fs.Var(&total, "gpu-memory-total", "GPU memory.total as nvidia-smi prints it (e.g. 81559MiB); overrides the preset's")
	fs.Var((*byteList)(&g.FreeBeforeWeights), "free-before-weights", "measured free memory before weight load, P (log: \"Load weight begin. avail mem=X GB\", X in GiB: write XGiB); one value or one per rank")
	fs.Var((*byteList)(&g.FreeAtKVSizing), "free-at-kv-sizing", "measured free memory when the KV cache is sized, A (log: \"Load weight end … avail mem=X GB\"); one value or one per rank")
	fs.Var((*byteList)(&g.FreeAfterCapture), "free-after-capture", "measured free memory after graph capture, for --post-capture (log: \"Post-capture KV sizing: … free memory=…\")")
	fs.Var((*byteList)(&g.FreeReadings), "free-readings", "free memory at every phase boundary F0,…,F_end: prints the phase deltas (spec §1 ledger)")
	fs.IntVar(&g.TP, "tp", 1, "tensor parallel size (GPU): KV heads and weights split; P and A are world minima through float32")
	fs.StringVar(&kvType, "kv-cache-dtype", "auto", "KV cache dtype: auto, f32, f16, bf16, fp8_e4m3, fp8_e5m2, mxfp8, nvfp4 (also fp32, fp16, fp4); auto is serve's on the CPU and bf16 on a GPU")
	fs.IntVar(&g.ContextLen, "context-length", 0, "context length (GPU; 0: the config's)")
	fs.IntVar(&in.MaxRunning, "max-running-requests", 0, "as serve (0: 32 on the CPU; on a GPU SGLang's R, capped to what kvhost's slack holds)")
	fs.IntVar(&in.ChunkedPrefill, "chunked-prefill-size", 0, "as serve (0: serve's 512 on the CPU, SGLang's default by memory class on a GPU)")
	fs.IntVar(&in.PageSize, "page-size", 0, "as serve (0: 16 on the CPU, 1 on a GPU)")
	fs.IntVar(&in.MaxTotalTokens, "max-total-tokens", 0, "as serve")
	fs.Float64Var(&in.MemFractionStatic, "mem-fraction-static", 0, "fix the slack at P·(1−f) (0: the policy's own; with --sglang-compat SGLang's default)")
	fs.BoolVar(&in.SGLangCompat, "sglang-compat", false, "size as SGLang does (spec §2–§3) and show kvhost's figure beside it")
	fs.BoolVar(&g.PostCapture, "post-capture", false, "GPU, --sglang-compat: SGLANG_ENABLE_POST_CAPTURE_KV_SIZING=1 (spec §5)")
	fs.IntVar(&in.LogprobChunk, "logprob-chunk-size", 2048, "as serve")
	fs.IntVar(&in.GraphMaxBS, "cuda-graph-max-bs", -1, "as serve (-1: by device memory class; 0: no decode graphs)")
	fs.BoolVar(&g.DisablePrefillGraph, "disable-prefill-graph", false, "GPU: no prefill CUDA graph (drops its reserve term, spec §2)")
	fs.Float64Var(&g.SWAFullTokensRatio, "swa-full-tokens-ratio", 0, "GPU, hybrid sliding-window models: window pool tokens per full pool token (0: 0.8)")
	fs.Float64Var(&g.MambaFullMemoryRatio, "mamba-full-memory-ratio", 0, "GPU, hybrid Mamba models: state share m/(1+m) of the budget (0: 0.9)")
	fs.StringVar(&strategy, "mamba-scheduler-strategy", "no_buffer", "GPU, hybrid Mamba models: no_buffer or extra_buffer (state slots per request 3 or 5)")
	fs.BoolVar(&g.DisableRadixCache, "disable-radix-cache", false, "GPU: no prefix cache (one Mamba state slot per request)")
	fs.IntVar(&g.DraftLayers, "speculative-draft-layers", 0, "GPU: EAGLE/MTP draft layers whose KV shares the pool")
	var pluginsDir, allowFile string
	fs.StringVar(&pluginsDir, "plugins", "", "folder of .wasm configurators overriding the built-ins, as serve")
	fs.StringVar(&allowFile, "plugin-allowlist", "", "sha256 pins, as serve")
	fs.BoolVar(&asJSON, "json", false, "print the report as JSON")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: kvhost plan --model PATH [--device-memory 6GiB | --gpu NAME | --gpu-memory-total SIZE] [--free-before-weights P --free-at-kv-sizing A] [--tp N] [--json]\n\nGPU presets (memory.total, assumed CUDA context before the first reading; weights from the config, +20 MiB load overhead):\n%s\nFlags:\n", plan.PresetHelp())
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if modelP == "" {
		fs.Usage()
		return errors.New("plan: --model is required")
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	var reg *plugin.Registry
	if pluginsDir != "" || allowFile != "" {
		var allow []string
		var err error
		if allowFile != "" {
			if allow, err = allowlist.ReadFile(allowFile); err != nil {
				return err
			}
		}
		rt, err := plugin.NewRuntime(ctx, plugin.Config{})
		if err != nil {
			return err
		}
		if reg, err = plugin.NewRegistryWith(rt, builtin.FS(), pluginsDir, plugin.RegistryOptions{AllowSHA256: allow}); err != nil {
			return err
		}
	}
	gpu := g.GPU != "" || set["gpu-memory-total"] || len(g.FreeBeforeWeights) > 0 || len(g.FreeAtKVSizing) > 0
	if !gpu {
		return planCPU(in, modelP, set, devKind, int64(mem), kvType, reg, asJSON, stdout)
	}
	switch strategy {
	case "no_buffer":
	case "extra_buffer":
		g.MambaExtraBuffer = true
	default:
		return fmt.Errorf("plan: --mamba-scheduler-strategy %q: want no_buffer or extra_buffer", strategy)
	}
	if set["device-memory"] || set["threads"] || set["device"] {
		return errors.New("plan: --device, --device-memory and --threads describe the CPU device; a GPU plan takes --gpu or --gpu-memory-total")
	}
	name, raw, wb, src, err := plan.LoadGPUModel(modelP)
	if err != nil {
		return err
	}
	g.Name, g.Config, g.WeightBytes, g.WeightSource = name, raw, wb, src
	g.TotalBytes, g.KVCacheDType, g.Configurators = int64(total), kvType, reg
	g.MaxRunning, g.ChunkedPrefill, g.PageSize, g.MaxTotalTokens = in.MaxRunning, in.ChunkedPrefill, in.PageSize, in.MaxTotalTokens
	g.MemFractionStatic, g.SGLangCompat, g.LogprobChunk, g.GraphMaxBS = in.MemFractionStatic, in.SGLangCompat, in.LogprobChunk, in.GraphMaxBS
	r, err := plan.PlanGPU(g)
	if err != nil {
		return err
	}
	if _, c, ts, err := plan.LoadModel(modelP); err == nil { // an architecture kvhost serves
		d := plan.DecodeBytes(c, ts)
		r.Decode = &d
	}
	if asJSON {
		return writeJSON(stdout, r)
	}
	return writeGPUPlan(stdout, r)
}

// planCPU is the CPU device's plan; GPU-only flags are refused by name.
func planCPU(in plan.Input, modelP string, set map[string]bool, devKind string, mem int64, kvType string, reg *plugin.Registry, asJSON bool, stdout io.Writer) error {
	for _, f := range gpuOnlyFlags {
		if set[f] {
			return fmt.Errorf("plan: --%s applies to GPU plans (give --gpu or --gpu-memory-total)", f)
		}
	}
	kvd, err := (&kvDTypeValue{s: kvType}).resolve(autoCPUKVDType)
	if err != nil {
		return fmt.Errorf("plan: %w", err)
	}
	if devKind != "cpu" {
		return fmt.Errorf("plan: unknown --device %q (cpu, or describe a GPU with --gpu)", devKind)
	}
	name, c, ts, err := plan.LoadModel(modelP)
	if err != nil {
		return err
	}
	in.Name, in.Config, in.Weights, in.Configurators, in.KVDType = name, c, ts, reg, kvd
	if in.HFConfig, err = plan.HFConfig(modelP); err != nil {
		return err
	}
	in.Device, in.DeviceBytes = "cpu", mem
	r, err := plan.Plan(in)
	if err != nil {
		return err
	}
	if asJSON {
		return writeJSON(stdout, r)
	}
	return writeReport(stdout, r)
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func writeReport(w io.Writer, r plan.Report) error {
	b := r.Budget
	fmt.Fprintf(w, "model %s on %s (total %d B, GiB = 2^30 B), policy %s\n\n", r.Input.Name, r.Ledger.Device.Name, r.Ledger.TotalBytes, b.Policy)
	if err := ledger.WriteTable(w, r.Ledger); err != nil {
		return err
	}
	fmt.Fprintf(w, "\nKV tokens %d (%s, cell %d B over the token pools, page %d), headroom (slack) %d B = %.3f GiB\n", b.Tokens, b.KVDType, b.KVConfigurator.CellBytes, b.PageSize, b.HeadroomBytes, float64(b.HeadroomBytes)/ledger.GiB)
	if b.TokenCap > 0 {
		fmt.Fprintf(w, "KV pools capped at %d tokens: %s", b.TokenCap, b.TokenCapReason)
		if b.UncappedTokens > b.Tokens {
			fmt.Fprintf(w, " (the memory would hold %d)", b.UncappedTokens)
		}
		fmt.Fprintln(w)
	}
	if k := b.KVConfigurator; k != nil && k.Layout != nil {
		for i, p := range k.Layout.Pools {
			fmt.Fprintf(w, "  pool %-8s %-6s %-8s %3d layers %10d B/%-7s × %d\n", p.Name, p.Kind, p.DType, p.Layers, p.UnitBytes, p.Unit(), b.Units[i])
		}
	}
	writeBudgetTail(w, b)
	if k := r.KVHost; k != nil {
		fmt.Fprintf(w, "kvhost's own policy: %d tokens, headroom %d B\n", k.Tokens, k.HeadroomBytes)
	}
	writeDecodeRead(w, r.Decode)
	fmt.Fprintf(w, "\nruntime peaks:\n")
	for _, p := range r.Peaks {
		fmt.Fprintf(w, "  %-48s %14d B (%.3f GiB)\n", p.Name, p.Bytes, float64(p.Bytes)/ledger.GiB)
	}
	_, err := fmt.Fprintf(w, "largest: %s\n", r.Largest)
	return err
}

// writeDecodeRead prints the weight bytes one decoded token reads.
func writeDecodeRead(w io.Writer, d *plan.DecodeRead) {
	if d == nil || d.TotalBytes == 0 {
		return
	}
	experts := ""
	if d.Experts > 0 {
		experts = fmt.Sprintf("; %d of %d experts per MoE layer", d.ExpertsUsed, d.Experts)
	}
	fmt.Fprintf(w, "weights read per decoded token (batch 1): %d B of %d B loaded (%.1f%%%s)\n",
		d.Bytes, d.TotalBytes, 100*float64(d.Bytes)/float64(d.TotalBytes), experts)
}

func writeBudgetTail(w io.Writer, b plan.Budget) {
	if k := b.KVConfigurator; k != nil {
		fmt.Fprintf(w, "KV layout by configurator plugin %s %s (sha256 %.12s…): %d B/token in pool %q\n", k.Plugin, k.Version, k.SHA256, k.CellBytes, k.Pool)
	}
	for _, res := range b.Reservations {
		where := "host"
		if res.Device {
			where = "device"
		}
		fmt.Fprintf(w, "  reserve %-56s %14d B (%s)\n", res.Name, res.Bytes, where)
	}
	if sg := b.SGLang; sg != nil {
		if sg.Error != "" {
			fmt.Fprintf(w, "SGLang's arithmetic: %s\n", sg.Error)
		} else {
			fmt.Fprintf(w, "SGLang: f=%.3f slack %.4f GiB budget %d B → %d tokens (R %d, req_to_token %d B, padding %d B unbudgeted)\n",
				sg.MemFractionStatic, sg.SlackGiB, sg.BudgetBytes, sg.Tokens, sg.MaxRunning, sg.ReqToTokenBytes, sg.PaddingBytes)
		}
	}
}

// writeGPUPlan prints a GPU plan: device figures and their sources, the
// pools, the chosen budget, SGLang's figures, the admitted batch and the
// runtime moments.
func writeGPUPlan(w io.Writer, r plan.GPUReport) error {
	d, b := r.Device, r.Budget
	fmt.Fprintf(w, "model %s (%s) on %s, tp %d, KV %s, policy %s (GiB = 2^30 B)\n", r.Input.Name, r.Input.Model.Architecture, d.Name, r.Input.TP, r.Input.KVCacheDType, b.Policy)
	fmt.Fprintf(w, "  total %d B (gpu_mem %.0f MiB); P %d B: %s; A %d B: %s\n  weights %d B per rank: %s\n\n",
		d.TotalBytes, d.GPUMemMiB, d.PBytes, d.PSource, d.ABytes, d.ASource, d.WeightBytes, d.WeightSource)
	if err := ledger.WriteTable(w, r.Ledger); err != nil {
		return err
	}
	fmt.Fprintf(w, "\npools (configurator %s):\n", b.KVConfigurator.Plugin)
	for _, p := range r.Pools {
		fmt.Fprintf(w, "  %-6s %-7s cell %9d B, %4d buffers: SGLang %10d units (%d B), %s %10d units (%d B)\n",
			p.Name, p.Unit, p.CellBytes, p.Buffers, p.SGLangUnits, p.SGLangBytes, b.Policy, p.Units, p.MappedBytes)
	}
	fmt.Fprintf(w, "\nKV tokens %d (main pool), headroom %d B = %.3f GiB, running requests %d\n", b.Tokens, b.HeadroomBytes, float64(b.HeadroomBytes)/ledger.GiB, b.MaxRunning)
	writeBudgetTail(w, b)
	if sg := r.SGLang; sg != nil && sg.Error == "" {
		fmt.Fprintf(w, "SGLang: reserve %.0f MiB, world %d: P %.10g GiB, A %.10g GiB, rest %.10g GiB; pools %d B (allocator %d B)\n",
			sg.ReserveMiB, sg.WorldSize, sg.PGiB, sg.AGiB, sg.RestGiB, sg.PoolBytes, sg.AllocatorBytes)
		if pc := sg.PostCapture; pc != nil {
			fmt.Fprintf(w, "SGLang post-capture: T_ub %d, free %.8g GiB, budget %d B → %d tokens, mapped %d B (over-commit %d B)\n",
				pc.UpperBoundTokens, pc.FreeGiB, pc.BudgetBytes, pc.Tokens, pc.MappedBytes, pc.OverCommitBytes)
		}
	}
	if k := r.KVHost; k != nil {
		fmt.Fprintf(w, "kvhost's own policy: %d tokens, headroom %d B, %d running requests\n", k.Tokens, k.HeadroomBytes, k.MaxRunning)
	} else if r.KVHostError != "" {
		fmt.Fprintf(w, "kvhost's own policy does not fit: %s\n", r.KVHostError)
	}
	a := r.Admission
	fmt.Fprintf(w, "admission: %d running requests sized for (requested %d); runtime %d B of the %d B slack\n", a.Admitted, a.Requested, a.RuntimeBytes, a.SlackBytes)
	if a.Note != "" {
		fmt.Fprintf(w, "  %s\n", a.Note)
	}
	writeDecodeRead(w, r.Decode)
	fmt.Fprintf(w, "\nruntime moments (tensors live together):\n")
	ms := append([]plan.Moment(nil), r.Moments...)
	sort.SliceStable(ms, func(i, j int) bool { return ms[i].AllocatorBytes > ms[j].AllocatorBytes })
	for _, m := range ms {
		fmt.Fprintf(w, "  %-8s %-56s %14d B (%.3f GiB)\n", m.Kind, m.Name, m.AllocatorBytes, float64(m.AllocatorBytes)/ledger.GiB)
	}
	if m := r.Measured; m != nil {
		fmt.Fprintf(w, "\nmeasured phase deltas: %v, sum %d B; F0 − F_end = %d B %s\n", m.Deltas, m.Sum, m.Readings[0]-m.Readings[len(m.Readings)-1], m.Error)
	}
	return nil
}
