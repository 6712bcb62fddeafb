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

	"github.com/kvhost/kvhost/host/device"
	"github.com/kvhost/kvhost/host/device/cpu"
	"github.com/kvhost/kvhost/host/device/cuda"
	"github.com/kvhost/kvhost/host/model/synth"
)

func init() { extraCommands["gpu-check"] = gpuCheck }

// gpuReport is what gpu-check writes to report.json; each section records
// its own error and the next section still runs.
type gpuReport struct {
	Started  time.Time           `json:"started"`
	Seconds  float64             `json:"seconds"`
	Device   *gpuDeviceSection   `json:"device,omitempty"`
	Kernels  []cuda.KernelResult `json:"kernels,omitempty"`
	Greedy   []cuda.GreedyResult `json:"greedy,omitempty"`
	Decode   []cuda.DecodeResult `json:"decode,omitempty"`
	Errors   map[string]string   `json:"errors,omitempty"`
	Sections map[string]float64  `json:"section_seconds"`
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
	benchModel := fs.String("bench-model", "", "model for decode tokens/s (default: generate the synth medium f16 model into --out)")
	steps := fs.Int("steps", 32, "greedy and decode steps")
	index := fs.Int("index", 0, "GPU index")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		return err
	}
	rep := &gpuReport{Started: time.Now(), Errors: map[string]string{}, Sections: map[string]float64{}}
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
		rep.Kernels = dev.CheckKernels(uint64(time.Now().UnixNano()))
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
			cl, err := cuda.LoadModel(cdev, path, 64)
			if err != nil {
				return fmt.Errorf("cpu load: %w", err)
			}
			defer cl.Close()
			gl, err := cuda.LoadModel(dev, path, 64)
			if err != nil {
				return fmt.Errorf("cuda load: %w", err)
			}
			defer gl.Close()
			r := cuda.CompareGreedy(dev, cl, gl, []int32{1, 2, 3}, *steps)
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
	bench := *benchModel
	if bench == "" {
		bench = filepath.Join(*out, "synth-medium-f16.gguf")
		section("generate bench model", func() error { return writeSynth(bench, "medium", "f16") })
	}
	section("decode", func() error {
		l, err := cuda.LoadModel(dev, bench, 2048)
		if err != nil {
			return err
		}
		defer l.Close()
		for _, b := range []int{1, 32} {
			r := cuda.BenchDecode(dev, l, b, *steps)
			rep.Decode = append(rep.Decode, r)
			if r.Error != "" {
				return fmt.Errorf("batch %d: %s", b, r.Error)
			}
		}
		return nil
	})
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
	var b strings.Builder
	fmt.Fprintf(&b, "# kvhost gpu-check\n\nStarted %s, took %.1f s.\n\n", rep.Started.Format(time.RFC3339), rep.Seconds)
	if d := rep.Device; d != nil {
		gib := func(n int64) string { return fmt.Sprintf("%.3f GiB", float64(n)/(1<<30)) }
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
	if len(rep.Decode) > 0 {
		fmt.Fprintf(&b, "## Decode\n\n| batch | eager tok/s | graph tok/s | graph nodes | replay = eager | max diff | error |\n|---:|---:|---:|---:|---|---:|---|\n")
		for _, r := range rep.Decode {
			fmt.Fprintf(&b, "| %d | %.1f | %.1f | %d | %v | %.3g | %s %s |\n", r.Batch, r.EagerTokS, r.GraphTokS, r.GraphNodes, r.GraphEqual, r.GraphMaxDiff, r.Error, r.GraphError)
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
