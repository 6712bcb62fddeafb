// Command prefix measures the prefix cache on issue 18's chat workload
// (make bench-prefix): conversations of several turns replayed
// concurrently, every prompt a shared system prompt, the earlier turns
// (each user turn and the model's reply) and the new user turn, on a
// gen-model preset (medium by default) served by the whole stack
// (boot.Build, as `kvhost serve` builds it), with the cache on and off
// (--disable-radix-cache) in alternating rounds, so a noisy neighbour hurts
// both alike. Per round it records the prompt tokens computed (prompt
// minus cached tokens, from each request's usage), the time to first
// token (p50, p95) over every request, the whole replay's time and the
// preemptions, and prints each figure's median and range over the rounds
// and the cache-on/cache-off ratio of the medians. It is a benchmark,
// never a test (chat_test.go checks the harness on the tiny preset, not
// its timings).
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

func main() {
	if err := run(context.Background(), os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "bench-prefix:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("bench-prefix", flag.ContinueOnError)
	w := workload{}
	size := fs.String("size", "medium", "gen-model preset (f32)")
	model := fs.String("model", "", "a GGUF file instead of the preset (written once to the model benchmarks' cache otherwise)")
	rounds := fs.Int("rounds", 3, "alternating rounds (each runs the cache off and on)")
	fs.IntVar(&w.Conversations, "conversations", 8, "conversations replayed concurrently")
	fs.IntVar(&w.Turns, "turns", 6, "turns per conversation")
	fs.IntVar(&w.System, "system", 1000, "shared system prompt, tokens")
	fs.IntVar(&w.User, "user", 24, "each user turn, tokens")
	fs.IntVar(&w.Reply, "reply", 16, "each reply, tokens (greedy, end of generation ignored)")
	fs.IntVar(&w.Threads, "threads", 2, "CPU threads")
	fs.IntVar(&w.Chunk, "chunk", 512, "chunked prefill size")
	fs.Int64Var(&w.DeviceMemory, "device-memory", 3<<30, "device memory, bytes")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := w.validate(); err != nil {
		return err
	}
	if *rounds < 1 {
		return fmt.Errorf("-rounds %d, want at least 1", *rounds)
	}
	path := *model
	if path == "" {
		var err error
		if path, err = presetModel(*size); err != nil {
			return err
		}
	}
	fmt.Fprintf(stdout, "prefix cache on %s: %d conversations x %d turns, %d-token system prompt, %d-token user turns, %d-token replies, %d threads, %d rounds\n",
		filepath.Base(path), w.Conversations, w.Turns, w.System, w.User, w.Reply, w.Threads, *rounds)
	var off, on []result
	for r := range *rounds {
		// The order flips every round.
		order := []bool{false, true}
		if r%2 == 1 {
			order = []bool{true, false}
		}
		for _, cache := range order {
			res, err := w.replay(ctx, path, cache)
			if err != nil {
				return fmt.Errorf("round %d, cache %v: %w", r+1, cache, err)
			}
			fmt.Fprintf(stdout, "round %d cache %-3s %s\n", r+1, onOff(cache), res)
			if cache {
				on = append(on, res)
			} else {
				off = append(off, res)
			}
		}
	}
	fmt.Fprintln(stdout)
	printTable(stdout, off, on)
	return nil
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

// printTable prints each figure's median and range with the cache off and
// on, and on/off of the medians.
func printTable(w io.Writer, off, on []result) {
	rows := []struct {
		name string
		get  func(result) float64
		unit string
	}{
		{"prompt tokens computed", func(r result) float64 { return float64(r.Computed) }, ""},
		{"prompt tokens cached", func(r result) float64 { return float64(r.Cached) }, ""},
		{"TTFT p50", func(r result) float64 { return r.TTFTp50.Seconds() * 1000 }, "ms"},
		{"TTFT p95", func(r result) float64 { return r.TTFTp95.Seconds() * 1000 }, "ms"},
		{"total", func(r result) float64 { return r.Total.Seconds() }, "s"},
		{"preemptions", func(r result) float64 { return float64(r.Preemptions) }, ""},
	}
	fmt.Fprintln(w, "| figure | cache off (median, range) | cache on (median, range) | on / off |")
	fmt.Fprintln(w, "|---|---|---|---|")
	for _, row := range rows {
		a, b := values(off, row.get), values(on, row.get)
		ratio := "—"
		if m := median(a); m > 0 {
			ratio = fmt.Sprintf("%.3f", median(b)/m)
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s |\n", row.name, summary(a, row.unit), summary(b, row.unit), ratio)
	}
}

func values(rs []result, get func(result) float64) []float64 {
	out := make([]float64, len(rs))
	for i, r := range rs {
		out[i] = get(r)
	}
	return out
}

func summary(v []float64, unit string) string {
	lo, hi := v[0], v[0]
	for _, x := range v {
		lo, hi = min(lo, x), max(hi, x)
	}
	s := fmt.Sprintf("%s (%s–%s)", num(median(v)), num(lo), num(hi))
	if unit != "" {
		s = strings.Replace(s, " (", " "+unit+" (", 1)
	}
	return s
}

func num(x float64) string {
	switch {
	case x >= 100:
		return fmt.Sprintf("%.0f", x)
	case x >= 10:
		return fmt.Sprintf("%.1f", x)
	}
	return fmt.Sprintf("%.2f", x)
}
