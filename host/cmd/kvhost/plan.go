package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"runtime"

	"github.com/kvhost/kvhost/host/ledger"
	"github.com/kvhost/kvhost/host/plan"
	"github.com/kvhost/kvhost/host/plugin"
	"github.com/kvhost/kvhost/host/plugin/allowlist"
	"github.com/kvhost/kvhost/host/plugin/builtin"
)

func init() { extraCommands["plan"] = planCmd }

// planCmd is `kvhost plan`: the ledger serve would produce, with no weights
// loaded.
func planCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("plan", stderr)
	var (
		in      plan.Input
		mem     byteSize = 8 << 30
		modelP  string
		gpu     string
		asJSON  bool
		devKind string
	)
	fs.StringVar(&modelP, "model", "", "config.json, a Hugging Face directory or a GGUF file (header only) (required)")
	fs.StringVar(&devKind, "device", "cpu", "device kind when no --gpu is given: cpu")
	fs.Var(&mem, "device-memory", "CPU device memory capacity, e.g. 6GiB")
	fs.StringVar(&gpu, "gpu", "", "a described GPU instead of the CPU device (presets below)")
	fs.IntVar(&in.TP, "tp", 1, "tensor parallel size (GPU presets)")
	fs.IntVar(&in.Threads, "threads", runtime.NumCPU(), "CPU kernel threads (sizes attention scratch)")
	fs.IntVar(&in.MaxRunning, "max-running-requests", 32, "as serve")
	fs.IntVar(&in.ChunkedPrefill, "chunked-prefill-size", 0, "as serve (0: serve's 512 on the CPU, SGLang's default by memory class on a GPU)")
	fs.IntVar(&in.PageSize, "page-size", 0, "as serve (0: 16 on the CPU, 1 on a GPU)")
	fs.IntVar(&in.MaxTotalTokens, "max-total-tokens", 0, "as serve")
	fs.Float64Var(&in.MemFractionStatic, "mem-fraction-static", 0, "fix the slack at P·(1−f) (0: the policy's own; with --sglang-compat SGLang's default)")
	fs.BoolVar(&in.SGLangCompat, "sglang-compat", false, "size as SGLang does (spec §2–§3) and show kvhost's figure beside it")
	fs.IntVar(&in.LogprobChunk, "logprob-chunk-size", 2048, "as serve")
	fs.IntVar(&in.GraphMaxBS, "cuda-graph-max-bs", -1, "as serve (-1: by device memory class; 0: no decode graphs)")
	kvDType := kvDTypeFlag(fs, "as serve")
	var pluginsDir, allowFile string
	fs.StringVar(&pluginsDir, "plugins", "", "folder of .wasm configurators overriding the built-ins, as serve")
	fs.StringVar(&allowFile, "plugin-allowlist", "", "sha256 pins, as serve")
	fs.BoolVar(&asJSON, "json", false, "print the report as JSON")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: kvhost plan --model PATH [--device cpu --device-memory 6GiB | --gpu NAME [--tp N]] [--json]\n\nGPU presets (memory.total, assumed CUDA context before the first reading; weights bf16, +20 MiB load overhead):\n%s\nFlags:\n", plan.PresetHelp())
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if modelP == "" {
		fs.Usage()
		return errors.New("plan: --model is required")
	}
	name, c, ts, err := plan.LoadModel(modelP)
	if err != nil {
		return err
	}
	in.Name, in.Config, in.Weights = name, c, ts
	if in.HFConfig, err = plan.HFConfig(modelP); err != nil {
		return err
	}
	auto := autoCPUKVDType
	if gpu != "" {
		auto = "" // the GPU plan's own default, bf16
	}
	if in.KVDType, err = kvDType.resolve(auto); err != nil {
		return err
	}
	if pluginsDir != "" || allowFile != "" {
		var allow []string
		if allowFile != "" {
			if allow, err = allowlist.ReadFile(allowFile); err != nil {
				return err
			}
		}
		rt, err := plugin.NewRuntime(ctx, plugin.Config{})
		if err != nil {
			return err
		}
		if in.Configurators, err = plugin.NewRegistryWith(rt, builtin.FS(), pluginsDir, plugin.RegistryOptions{AllowSHA256: allow}); err != nil {
			return err
		}
	}
	switch {
	case gpu != "":
		in.Device = gpu
		if in.MaxRunning == 32 {
			in.MaxRunning = 0 // SGLang's R on a GPU
		}
	case devKind == "cpu":
		in.Device, in.DeviceBytes = "cpu", int64(mem)
	default:
		return fmt.Errorf("plan: unknown --device %q (cpu, or use --gpu)", devKind)
	}
	r, err := plan.Plan(in)
	if err != nil {
		return err
	}
	if asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(r)
	}
	return writeReport(stdout, r)
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
	if k := b.KVConfigurator; k != nil {
		fmt.Fprintf(w, "KV layout by configurator plugin %s %s (sha256 %.12s…):\n", k.Plugin, k.Version, k.SHA256)
		for i, p := range k.Layout.Pools {
			fmt.Fprintf(w, "  pool %-8s %-6s %-8s %3d layers %10d B/%-7s × %d\n", p.Name, p.Kind, p.DType, p.Layers, p.UnitBytes, p.Unit(), b.Units[i])
		}
	}
	for _, res := range b.Reservations {
		where := "host"
		if res.Device {
			where = "device"
		}
		fmt.Fprintf(w, "  reserve %-52s %14d B (%s)\n", res.Name, res.Bytes, where)
	}
	if sg := b.SGLang; sg != nil {
		if sg.Error != "" {
			fmt.Fprintf(w, "SGLang's default arithmetic: %s\n", sg.Error)
		} else {
			fmt.Fprintf(w, "SGLang: f=%.3f slack %.4f GiB budget %d B → %d tokens (R %d, req_to_token %d B, padding %d B unbudgeted)\n",
				sg.MemFractionStatic, sg.SlackGiB, sg.BudgetBytes, sg.Tokens, sg.MaxRunning, sg.ReqToTokenBytes, sg.PaddingBytes)
		}
	}
	if k := r.KVHost; k != nil {
		fmt.Fprintf(w, "kvhost's own policy: %d tokens, headroom %d B\n", k.Tokens, k.HeadroomBytes)
	}
	fmt.Fprintf(w, "\nruntime peaks:\n")
	for _, p := range r.Peaks {
		fmt.Fprintf(w, "  %-48s %14d B (%.3f GiB)\n", p.Name, p.Bytes, float64(p.Bytes)/ledger.GiB)
	}
	_, err := fmt.Fprintf(w, "largest: %s\n", r.Largest)
	return err
}
