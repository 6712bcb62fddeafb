//go:build cuda

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/kvhost/kvhost/host/boot"
	"github.com/kvhost/kvhost/host/budget"
	"github.com/kvhost/kvhost/host/device"
	"github.com/kvhost/kvhost/host/device/cpu"
	"github.com/kvhost/kvhost/host/device/cuda"
	"github.com/kvhost/kvhost/host/gpucheck"
	"github.com/kvhost/kvhost/host/model"
	"github.com/kvhost/kvhost/host/model/synth"
)

func init() { extraCommands["gpu-check"] = gpuCheck }

// gpuReport is what gpu-check writes to report.json; each section records
// its own error and the next section still runs.
type gpuReport struct {
	Started  time.Time               `json:"started"`
	Seconds  float64                 `json:"seconds"`
	Device   *gpuDeviceSection       `json:"device,omitempty"`
	Kernels  []gpucheck.KernelResult `json:"kernels,omitempty"`
	Greedy   []gpucheck.GreedyResult `json:"greedy,omitempty"`
	Boot     []gpucheck.BootResult   `json:"boot,omitempty"`
	Graphs   []gpucheck.DecodeResult `json:"graph_replay,omitempty"`
	Decode   []gpucheck.DecodeResult `json:"decode_llama3_8b,omitempty"`
	Prefill  *gpucheck.PrefillResult `json:"prefill_llama3_8b,omitempty"`
	KVPlan   *gpucheck.PlanResult    `json:"kv_vs_plan,omitempty"`
	Skipped  map[string]string       `json:"skipped,omitempty"`
	Errors   map[string]string       `json:"errors,omitempty"`
	Sections map[string]float64      `json:"section_seconds"`
}

type gpuDeviceSection struct {
	Info      device.Info    `json:"info"`
	Facts     cuda.Facts     `json:"facts"`
	NVMLNow   cuda.NVMLFacts `json:"nvml_now"`
	CuFree    int64          `json:"cu_free"`
	CuTotal   int64          `json:"cu_total"`
	TotalGap  int64          `json:"nvml_total_minus_cu_total"`
	CtxMemory int64          `json:"context_bytes_nvml_used_delta"`
}

func gpuCheck(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("gpu-check", stderr)
	out := fs.String("out", "gpu-check-out", "directory for report.json and report.md")
	modelPath := fs.String("model", "../shared/models/stories260K.gguf", "model for CPU-vs-CUDA greedy equality")
	steps := fs.Int("steps", 32, "greedy steps")
	benchSteps := fs.Int("bench-steps", 16, "decode steps timed per batch size on the Llama-3-8B-shaped model")
	index := fs.Int("index", 0, "GPU index")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		return err
	}
	rep := &gpuReport{Started: time.Now(), Errors: map[string]string{}, Sections: map[string]float64{}, Skipped: map[string]string{}}
	section := func(name string, f func() error) {
		t0 := time.Now()
		fmt.Fprintf(stdout, "gpu-check: %s ...\n", name)
		func() {
			defer func() {
				if p := recover(); p != nil {
					rep.Errors[name] = fmt.Sprintf("panic: %v", p)
				}
			}()
			if err := f(); err != nil {
				rep.Errors[name] = err.Error()
			}
		}()
		rep.Sections[name] = time.Since(t0).Seconds()
		if e, ok := rep.Errors[name]; ok {
			fmt.Fprintf(stdout, "gpu-check: %s failed: %s\n", name, e)
		}
		// Rewrite the report after every section, so a run stopped by the
		// script's time limit still leaves what it measured.
		rep.Seconds = time.Since(rep.Started).Seconds()
		_ = writeGPUReport(*out, rep)
	}
	var dev *cuda.Device
	section("open", func() error {
		var err error
		dev, err = cuda.Open(device.Options{Index: *index})
		return err
	})
	if dev == nil {
		return writeGPUReport(*out, rep)
	}
	defer dev.Close()
	section("device", func() error {
		s := &gpuDeviceSection{Info: dev.Info(), Facts: dev.Facts()}
		s.CuFree, s.CuTotal = dev.MemGetInfo()
		rep.Device = s
		now, err := dev.NVML()
		s.NVMLNow = now
		s.TotalGap = now.Total - s.CuTotal
		s.CtxMemory = s.Facts.AfterContext.Used - s.Facts.Baseline.Used
		return err
	})
	section("kernels", func() error {
		rep.Kernels = gpucheck.CheckKernels(dev, uint64(time.Now().UnixNano()))
		var bad []string
		for _, k := range rep.Kernels {
			if !k.OK {
				bad = append(bad, k.Name)
			}
		}
		if len(bad) > 0 {
			return fmt.Errorf("%d kernels disagree with the CPU: %s", len(bad), strings.Join(bad, ", "))
		}
		return nil
	})
	greedy := func(name, path string) {
		section("greedy "+name, func() error {
			cdev, err := cpu.New(device.Options{})
			if err != nil {
				return err
			}
			defer cdev.Close()
			cl, err := gpucheck.LoadModel(cdev, path, 64)
			if err != nil {
				return fmt.Errorf("cpu load: %w", err)
			}
			defer cl.Close()
			gl, err := gpucheck.LoadModel(dev, path, 64)
			if err != nil {
				return fmt.Errorf("cuda load: %w", err)
			}
			defer gl.Close()
			r := gpucheck.CompareGreedy(dev, cl, gl, []int32{1, 2, 3}, *steps)
			r.Model = path
			rep.Greedy = append(rep.Greedy, r)
			if r.Error != "" {
				return fmt.Errorf("%s", r.Error)
			}
			if !r.Equal {
				return fmt.Errorf("greedy tokens differ")
			}
			return nil
		})
	}
	greedy("stories260K", *modelPath)
	genPath := filepath.Join(*out, "synth-small-f32.gguf")
	section("generate small model", func() error { return writeSynth(genPath, "small", "f32") })
	greedy("generated small f32", genPath)
	section("boot ledger stories260K", func() error {
		cfg := boot.Config{Model: *modelPath, Device: "cuda", MaxRunning: 8, MaxQueue: 64, ChunkedPrefill: 256, PageSize: 16, GraphMaxBS: 8}
		r := gpucheck.Boot(dev, cfg)
		rep.Boot = append(rep.Boot, r)
		if r.Error != "" {
			return fmt.Errorf("%s", r.Error)
		}
		if r.CheckError != "" {
			return fmt.Errorf("ledger invariants: %s", r.CheckError)
		}
		return nil
	})
	section("graph replay vs eager", func() error {
		l, err := gpucheck.LoadModel(dev, genPath, gpucheck.DecodePages(8, 8))
		if err != nil {
			return err
		}
		defer l.Close()
		for _, b := range []int{1, 8} {
			r := gpucheck.BenchDecode(dev, l, b, 8)
			rep.Graphs = append(rep.Graphs, r)
			if r.Error != "" || r.GraphError != "" {
				return fmt.Errorf("batch %d: %s %s", b, r.Error, r.GraphError)
			}
			if !r.GraphArgmaxSame {
				return fmt.Errorf("batch %d: replay's greedy tokens differ from the eager step's", b)
			}
		}
		return nil
	})
	llama := filepath.Join(*out, "tmp", "llama3-8b-bf16.gguf")
	defer os.RemoveAll(filepath.Dir(llama))
	const needFree = 24 << 30
	free, _ := dev.MemGetInfo()
	if free < needFree {
		why := fmt.Sprintf("device has %.1f GiB free, the Llama-3-8B-shaped bf16 model needs 24 GiB", float64(free)/(1<<30))
		for _, n := range []string{"generate llama3-8b", "decode llama3-8b", "prefill llama3-8b", "kv vs plan"} {
			rep.Skipped[n] = why
		}
	} else {
		generated := false
		section("generate llama3-8b", func() error {
			if err := os.MkdirAll(filepath.Dir(llama), 0o755); err != nil {
				return err
			}
			if err := writeSynth(llama, "llama3-8b", "bf16"); err != nil {
				return err
			}
			generated = true
			return nil
		})
		var cfg8b model.Config
		var name8b string
		if generated {
			section("decode llama3-8b", func() error {
				l, err := gpucheck.LoadModel(dev, llama, gpucheck.DecodePages(256, *benchSteps)+2048/16+1)
				if err != nil {
					return err
				}
				defer l.Close()
				cfg8b, name8b = l.M.Config, l.M.Name
				var errs []string
				for _, b := range []int{1, 32, 256} {
					r := gpucheck.BenchDecode(dev, l, b, *benchSteps)
					rep.Decode = append(rep.Decode, r)
					if r.Error != "" || r.GraphError != "" {
						errs = append(errs, fmt.Sprintf("batch %d: %s %s", b, r.Error, r.GraphError))
					}
				}
				p := gpucheck.BenchPrefill(dev, l, 2048, 2)
				rep.Prefill = &p
				if p.Error != "" {
					errs = append(errs, "prefill: "+p.Error)
				}
				if len(errs) > 0 {
					return fmt.Errorf("%s", strings.Join(errs, "; "))
				}
				return nil
			})
			section("kv vs plan", func() error {
				if name8b == "" {
					return fmt.Errorf("the model did not load")
				}
				_, total := dev.MemGetInfo()
				cfg := boot.Config{Model: llama, Device: "cuda", MaxRunning: 256, MaxQueue: 1024,
					ChunkedPrefill: budget.ChunkedPrefillSize(float64(total) / budget.MiB), PageSize: 16, GraphMaxBS: -1}
				b := gpucheck.Boot(dev, cfg)
				rep.Boot = append(rep.Boot, b)
				preset := gpucheck.PresetFor(dev.Info().Name)
				if preset == "" {
					preset = "H200"
				}
				pr := gpucheck.ComparePlan(preset, name8b, cfg8b, cfg, b)
				rep.KVPlan = &pr
				if b.Error != "" {
					return fmt.Errorf("boot: %s", b.Error)
				}
				if b.CheckError != "" {
					return fmt.Errorf("ledger invariants: %s", b.CheckError)
				}
				if pr.Error != "" {
					return fmt.Errorf("plan: %s", pr.Error)
				}
				return nil
			})
		}
		_ = os.Remove(llama)
	}
	rep.Seconds = time.Since(rep.Started).Seconds()
	return writeGPUReport(*out, rep)
}

func writeSynth(path, size, dtype string) error {
	spec, err := synth.Preset(size, dtype)
	if err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriterSize(f, 1<<20)
	err = synth.Write(w, spec, nil)
	if err == nil {
		err = w.Flush()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

func writeGPUReport(dir string, rep *gpuReport) error {
	js, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "report.json"), js, 0o644); err != nil {
		return err
	}
	gib := func(n int64) string { return fmt.Sprintf("%.3f GiB", float64(n)/(1<<30)) }
	var b strings.Builder
	fmt.Fprintf(&b, "# kvhost gpu-check\n\nStarted %s, took %.1f s.\n\n", rep.Started.Format(time.RFC3339), rep.Seconds)
	if d := rep.Device; d != nil {
		f := d.Facts
		fmt.Fprintf(&b, "## Device\n\n- %s, compute %d.%d, driver %s (CUDA %d), module image %s\n", d.Info.Name, f.ComputeMajor, f.ComputeMinor, d.NVMLNow.Driver, f.DriverVersion, f.ModuleImage)
		fmt.Fprintf(&b, "- NVML total %s, reserved %s, used now %s; baseline used %s, after context %s (context ≈ %s)\n",
			gib(d.NVMLNow.Total), gib(d.NVMLNow.Reserved), gib(d.NVMLNow.Used), gib(f.Baseline.Used), gib(f.AfterContext.Used), gib(d.CtxMemory))
		fmt.Fprintf(&b, "- cuMemGetInfo total %s, free %s; NVML total − cu total = %s\n", gib(d.CuTotal), gib(d.CuFree), gib(d.TotalGap))
		fmt.Fprintf(&b, "- VMM %v, granularity %d; cuBLAS %q (%s, version %d) %s; workspace %d bytes\n\n", f.VMM, f.Granularity, f.CublasPath, f.CublasWhy, f.CublasVersion, f.CublasError, f.WorkspaceBytes)
	}
	if len(rep.Kernels) > 0 {
		fmt.Fprintf(&b, "## Kernels vs CPU\n\n| kernel | max abs diff | max abs ref | tol | ok | note |\n|---|---:|---:|---:|---|---|\n")
		for _, k := range rep.Kernels {
			fmt.Fprintf(&b, "| %s | %.3g | %.3g | %.0e | %v | %s%s |\n", k.Name, k.MaxAbs, k.MaxRef, k.Tol, k.OK, k.Details, k.Error)
		}
		b.WriteString("\n")
	}
	for _, g := range rep.Greedy {
		fmt.Fprintf(&b, "## Greedy %s\n\nequal %v over %d steps, first-step logits max diff %.3g %s\n\n- cpu:  %v\n- cuda: %v\n\n", g.Model, g.Equal, g.Steps, g.FirstMaxDiff, g.Error, g.CPU, g.CUDA)
	}
	for _, r := range rep.Boot {
		fmt.Fprintf(&b, "## Startup ledger: %s\n\n%s\n\n| phase | free before | free after | delta |\n|---|---:|---:|---:|\n", r.Model, r.Error)
		for _, p := range r.Phases {
			fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", p.Name, gib(p.FreeBefore), gib(p.FreeAfter), gib(p.Delta))
		}
		fmt.Fprintf(&b, "\n- ledger.Check: %s\n- ledger total − free %s (allocators %s + outside %s); NVML used %s of %s %s\n- policy %s, KV tokens %d (%d B/token), graphs %v (pool %s), headroom %s, profile peak %s\n\n",
			orOK(r.CheckError), gib(r.LedgerUsed), gib(r.AllocatorBytes), gib(r.OutsideBytes), gib(r.NVMLUsed), gib(r.NVMLTotal), r.NVMLError,
			r.Policy, r.KVTokens, r.KVCellBytes, r.GraphBuckets, gib(r.GraphPoolBytes), gib(r.HeadroomBytes), gib(r.ProfilePeakBytes))
	}
	decodeTable := func(title string, rs []gpucheck.DecodeResult) {
		if len(rs) == 0 {
			return
		}
		fmt.Fprintf(&b, "## %s\n\n| batch | steps | eager tok/s | graph tok/s | ops | nodes | bitwise | argmax same | max diff | error |\n|---:|---:|---:|---:|---:|---:|---|---|---:|---|\n", title)
		for _, r := range rs {
			fmt.Fprintf(&b, "| %d | %d | %.1f | %.1f | %d | %d | %v | %v | %.3g | %s %s |\n", r.Batch, r.Steps, r.EagerTokS, r.GraphTokS, r.GraphLaunches, r.GraphNodes, r.GraphBitwise, r.GraphArgmaxSame, r.GraphMaxDiff, r.Error, r.GraphError)
		}
		b.WriteString("\n")
	}
	decodeTable("Graph replay vs eager (generated small f32)", rep.Graphs)
	decodeTable("Decode, Llama-3-8B-shaped bf16", rep.Decode)
	if p := rep.Prefill; p != nil {
		fmt.Fprintf(&b, "## Prefill, Llama-3-8B-shaped bf16\n\n%d-token prompt × %d: %.1f tok/s %s\n\n", p.Tokens, p.Runs, p.TokS, p.Error)
	}
	if k := rep.KVPlan; k != nil {
		fmt.Fprintf(&b, "## KV tokens vs plan\n\n- measured (boot.Build on this GPU): %d tokens at %d B/token\n- plan preset %s: %d tokens at %d B/token (policy %s)\n- %s\n%s\n\n",
			k.MeasuredTokens, k.MeasuredCell, k.Preset, k.PlanTokens, k.PlanCellBytes, k.PlanPolicy, k.Assumptions, k.Error)
	}
	if len(rep.Skipped) > 0 {
		b.WriteString("## Skipped\n\n")
		for k, v := range rep.Skipped {
			fmt.Fprintf(&b, "- %s: %s\n", k, v)
		}
		b.WriteString("\n")
	}
	if len(rep.Errors) > 0 {
		b.WriteString("## Errors\n\n")
		for k, v := range rep.Errors {
			fmt.Fprintf(&b, "- %s: %s\n", k, v)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "report.md"), []byte(b.String()), 0o644); err != nil {
		return err
	}
	if len(rep.Errors) > 0 {
		return fmt.Errorf("gpu-check: %d sections failed (see %s)", len(rep.Errors), filepath.Join(dir, "report.md"))
	}
	return nil
}

func orOK(s string) string {
	if s == "" {
		return "ok"
	}
	return s
}
