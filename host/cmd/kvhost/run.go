package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
)

const usage = `kvhost — an LLM inference host that knows where every byte of device memory went.

Usage:
  kvhost serve     [flags]   serve a model over an OpenAI-compatible HTTP API
  kvhost plan      [flags]   the memory ledger serve would produce (CPU or GPU), no weights loaded
  kvhost gen-model [flags]   write a deterministic demo model (GGUF)
  kvhost version

Run "kvhost COMMAND -h" for a command's flags.
`

var version = "dev"

// extraCommands are commands compiled in only with some build tags (the
// cuda build adds gpu-check); they register from init.
var extraCommands = map[string]func(ctx context.Context, args []string, stdout, stderr io.Writer) error{}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return errors.New("no command given")
	}
	switch args[0] {
	case "serve":
		return serve(ctx, args[1:], stdout, stderr)
	case "gen-model":
		return genModel(args[1:], stdout, stderr)
	case "version":
		fmt.Fprintln(stdout, "kvhost", version)
		return nil
	case "-h", "--help", "help":
		fmt.Fprint(stdout, usage)
		return nil
	}
	if cmd, ok := extraCommands[args[0]]; ok {
		return cmd(ctx, args[1:], stdout, stderr)
	}
	fmt.Fprint(stderr, usage)
	return fmt.Errorf("unknown command %q", args[0])
}

// byteSize is a flag.Value accepting "6GiB", "512MiB", "8G", "1048576".
type byteSize int64

func (b *byteSize) String() string { return strconv.FormatInt(int64(*b), 10) }

func (b *byteSize) Set(s string) error {
	n, err := parseBytes(s)
	if err != nil {
		return err
	}
	*b = byteSize(n)
	return nil
}

func parseBytes(s string) (int64, error) {
	t := strings.TrimSpace(s)
	units := []struct {
		suffix string
		mult   int64
	}{
		{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40},
		{"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12},
		{"K", 1 << 10}, {"M", 1 << 20}, {"G", 1 << 30}, {"T", 1 << 40}, {"B", 1},
	}
	mult := int64(1)
	for _, u := range units {
		if strings.HasSuffix(t, u.suffix) {
			t, mult = strings.TrimSpace(strings.TrimSuffix(t, u.suffix)), u.mult
			break
		}
	}
	f, err := strconv.ParseFloat(t, 64)
	if err != nil || f < 0 || f*float64(mult) > 1<<62 {
		return 0, fmt.Errorf("invalid size %q (examples: 6GiB, 512MiB, 1048576)", s)
	}
	return int64(f * float64(mult)), nil
}

func newFlagSet(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	return fs
}
