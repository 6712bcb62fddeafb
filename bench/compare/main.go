// Command compare measures kvhost against llama.cpp on the same generated
// GGUF files (make bench-compare): decode at batch 1 and 16, prefill at 128,
// 512 and 2048 tokens, launch → /health, and resident memory while serving.
// Each row runs both engines in alternating rounds (the order flips every
// round, so a noisy neighbour hurts both alike) and prints the medians, the
// ranges and kvhost/llama.cpp. It is a benchmark, never a test: without
// ../shared/tools/llama.cpp it says so and exits 0.
//
// kvhost's figures come from its own benchmarks (host/model BenchmarkDecode,
// BenchmarkDecodeGraphs, BenchmarkPrefill) and from `kvhost serve`;
// llama.cpp's from llama-bench, llama-batched-bench and llama-simple. The
// models are `kvhost gen-model` presets written where the benchmarks cache
// them; gen-model's quantized files are block-for-block what llama-quantize
// writes from the f32 file (host/model/synth TestMatchesLlamaQuantize).
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strings"
	"time"
)

func main() {
	if err := run(context.Background(), os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "bench-compare:", err)
		os.Exit(1)
	}
}

type options struct {
	root, tools, work, models string
	rounds, threads           int
	sizes, types              []string
	only                      *regexp.Regexp
	// llamaBin holds the llama.cpp executables (a copy with only the
	// haswell CPU variant under -avx2); kvEnv is added to kvhost's
	// environment (GODEBUG=cpu.avx512f=off under -avx2).
	llamaBin string
	kvEnv    []string
}

func run(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("bench-compare", flag.ContinueOnError)
	tools := fs.String("tools", "", "llama.cpp tools folder (default ../shared/tools/llama.cpp beside the repository)")
	rounds := fs.Int("rounds", 3, "alternating rounds per row")
	threads := fs.Int("threads", 2, "threads for both engines")
	sizes := fs.String("sizes", "small,medium", "gen-model sizes")
	types := fs.String("types", "f32,f16,q8_0,q4_k_m,q6_k,q4_0,q5_k_m", "gen-model file types")
	only := fs.String("only", "", "run only the rows whose name matches this regular expression")
	avx2 := fs.Bool("avx2", false, "run both engines on their AVX2 code (kvhost with GODEBUG=cpu.avx512f=off, llama.cpp's haswell variant), as on an AVX2-only CPU")
	if err := fs.Parse(args); err != nil {
		return err
	}
	root, err := repoRoot()
	if err != nil {
		return err
	}
	o := options{root: root, tools: *tools, rounds: max(1, *rounds), threads: max(1, *threads),
		sizes: split(*sizes), types: split(*types)}
	if len(o.sizes) == 0 || len(o.types) == 0 {
		return fmt.Errorf("-sizes and -types need at least one entry each (have %q, %q)", *sizes, *types)
	}
	if o.tools == "" {
		o.tools = filepath.Join(root, "..", "shared", "tools", "llama.cpp")
	}
	if _, err := os.Stat(filepath.Join(o.tools, "run")); err != nil {
		fmt.Fprintf(stdout, "bench-compare: %s is absent: llama.cpp's tools are the reference this benchmark compares with, so there is nothing to compare here (not an error)\n", o.tools)
		return nil
	}
	if *only != "" {
		if o.only, err = regexp.Compile(*only); err != nil {
			return fmt.Errorf("-only: %w", err)
		}
	}
	o.work, err = os.MkdirTemp("", "kvhost-bench-compare-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(o.work)
	o.llamaBin = filepath.Join(o.tools, "bin")
	if *avx2 {
		if o.llamaBin, err = haswellOnly(o.llamaBin, o.work); err != nil {
			return err
		}
		o.kvEnv = []string{"GODEBUG=" + strings.TrimPrefix(os.Getenv("GODEBUG")+",cpu.avx512f=off", ",")}
	}
	// The model benchmarks cache their files here (host/model benchModel).
	o.models = filepath.Join(os.TempDir(), "kvhost-bench-models")

	fmt.Fprintf(stdout, "# kvhost vs llama.cpp, %s\n", time.Now().UTC().Format("2006-01-02 15:04 UTC"))
	fmt.Fprintf(stdout, "# machine: %s, %d cores visible, %d threads per engine, load average %s\n", cpuName(), runtime.NumCPU(), o.threads, loadAvg())
	if *avx2 {
		fmt.Fprintln(stdout, "# AVX2 only: kvhost with GODEBUG=cpu.avx512f=off, llama.cpp restricted to its haswell variant")
	}
	if err := o.build(ctx, stdout); err != nil {
		return err
	}
	rows := o.rows()
	if len(rows) == 0 {
		return fmt.Errorf("no row matches -only %q", *only)
	}
	fmt.Fprintf(stdout, "# llama.cpp: %s\n", o.llamaBuild(ctx, o.model(o.sizes[0], o.types[0])))
	fmt.Fprintf(stdout, "# %d rows × %d rounds, the order of the two engines alternating\n\n", len(rows), o.rounds)
	for r := range o.rounds {
		for i := range rows {
			rows[i].measure(ctx, r, stdout)
		}
	}
	fmt.Fprintf(stdout, "\n# load average at the end: %s\n\n", loadAvg())
	printTable(stdout, rows)
	return nil
}

// build compiles kvhost and the model benchmarks and writes the models.
func (o *options) build(ctx context.Context, stdout io.Writer) error {
	fmt.Fprintln(stdout, "# building kvhost and the model benchmarks")
	if _, err := o.cmd(ctx, "go", "build", "-o", filepath.Join(o.work, "kvhost"), "./host/cmd/kvhost"); err != nil {
		return err
	}
	if _, err := o.cmd(ctx, "go", "test", "-c", "-o", filepath.Join(o.work, "model.test"), "./host/model"); err != nil {
		return err
	}
	if err := os.MkdirAll(o.models, 0o755); err != nil {
		return err
	}
	for _, size := range o.sizes {
		for _, t := range o.types {
			path := o.model(size, t)
			if _, err := os.Stat(path); err == nil {
				continue
			}
			fmt.Fprintf(stdout, "# generating %s\n", path)
			if _, err := o.cmd(ctx, filepath.Join(o.work, "kvhost"), "gen-model", "--size", size, "--dtype", t, "--out", path); err != nil {
				return err
			}
		}
	}
	return nil
}

func (o *options) model(size, t string) string { return filepath.Join(o.models, size+"-"+t+".gguf") }

// cmd runs a command in the repository root and returns its stdout.
func (o *options) cmd(ctx context.Context, name string, args ...string) (string, error) {
	c := exec.CommandContext(ctx, name, args...)
	c.Dir = o.root
	if strings.HasPrefix(name, o.work) {
		c.Env = append(os.Environ(), o.kvEnv...)
	}
	var out, errb strings.Builder
	c.Stdout, c.Stderr = &out, &errb
	if err := c.Run(); err != nil {
		return out.String(), fmt.Errorf("%s %s: %w\n%s", name, strings.Join(args, " "), err, tail(errb.String(), 2000))
	}
	return out.String(), nil
}

// llamaBuild names the llama.cpp build and the CPU variant it loads, from
// a one-token llama-bench run on model.
func (o *options) llamaBuild(ctx context.Context, model string) string {
	c := exec.CommandContext(ctx, o.llama("llama-bench"), "-m", model, "-p", "0", "-n", "1", "-r", "1", "-o", "json")
	out, _ := c.CombinedOutput()
	variant, build := "?", "?"
	if m := regexp.MustCompile(`libggml-cpu-(\w+)\.so`).FindSubmatch(out); m != nil {
		variant = string(m[1])
	}
	if m := regexp.MustCompile(`"build_commit":\s*"(\w+)",\s*"build_number":\s*(\d+)`).FindSubmatch(out); m != nil {
		build = fmt.Sprintf("commit %s (build %s)", m[1], m[2])
	}
	return fmt.Sprintf("%s, CPU backend variant %s", build, variant)
}

// llama is the path of a llama.cpp tool.
func (o *options) llama(tool string) string { return filepath.Join(o.llamaBin, tool) }

// haswellOnly copies llama.cpp's bin folder into work without the CPU
// variants other than haswell (AVX2), as its README says to pin one.
func haswellOnly(bin, work string) (string, error) {
	dst := filepath.Join(work, "llama-avx2")
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return "", err
	}
	ents, err := os.ReadDir(bin)
	if err != nil {
		return "", err
	}
	for _, e := range ents {
		n := e.Name()
		if strings.HasPrefix(n, "libggml-cpu-") && n != "libggml-cpu-haswell.so" {
			continue
		}
		b, err := os.ReadFile(filepath.Join(bin, n))
		if err != nil {
			return "", err
		}
		if err := os.WriteFile(filepath.Join(dst, n), b, 0o755); err != nil {
			return "", err
		}
	}
	return dst, nil
}

func split(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.mod above %s", dir)
		}
		dir = parent
	}
}

func cpuName() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return runtime.GOARCH
	}
	defer f.Close()
	name, flags := "", ""
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<16), 1<<20)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		switch strings.TrimSpace(k) {
		case "model name":
			if name == "" {
				name = strings.TrimSpace(v)
			}
		case "flags":
			if flags == "" {
				flags = v
			}
		}
	}
	isa := "no AVX2"
	switch {
	case strings.Contains(flags, " avx512_vnni"):
		isa = "AVX-512 with VNNI"
	case strings.Contains(flags, " avx512f"):
		isa = "AVX-512"
	case strings.Contains(flags, " avx2"):
		isa = "AVX2, no AVX-512"
	}
	return fmt.Sprintf("%s (%s)", name, isa)
}

func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
