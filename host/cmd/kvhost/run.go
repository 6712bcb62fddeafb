package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
)

const usage = `kvhost — an LLM inference host that knows where every byte of device memory went.

Usage:
  kvhost serve --model MODEL [flags]   serve a model over an OpenAI-compatible HTTP API
  kvhost chat  --model MODEL | --url URL
                                       chat in the terminal, streaming
  kvhost pull  ORG/NAME[:QUANT|:FILE]  download a model from the Hugging Face Hub into its cache
  kvhost list                          list the models in the Hugging Face cache
  kvhost rm    ORG/NAME...             remove models from the cache
  kvhost plan  --model MODEL [flags]   the memory ledger serve would produce (CPU or GPU), no weights loaded
  kvhost plugin check FILE.wasm        handshake and self-test a plugin
  kvhost health [--url URL]            exit 0 when a running server's /health answers 200
  kvhost gen-model [flags]             write a deterministic demo model (GGUF)
  kvhost version                       print the version (also --version)
  kvhost help                          this text (also --help, -h)

MODEL is a GGUF file, a Hugging Face model directory, or a hub id
(hf://ORG/NAME:Q4_K_M, or ORG/NAME when no such local path exists).
Run "kvhost COMMAND -h" for a command's flags.
`

// version is stamped at build time: go build -ldflags "-X main.version=v1.2.3"
// (make release does). Unstamped builds report "dev" and the VCS revision
// the go command recorded, if any.
var version = "dev"

// versionString is what kvhost version prints.
func versionString() string {
	v := "kvhost " + version
	if bi, ok := debug.ReadBuildInfo(); ok {
		rev, dirty := "", false
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				dirty = s.Value == "true"
			}
		}
		if rev != "" {
			v += " (" + rev[:min(12, len(rev))]
			if dirty {
				v += "+dirty"
			}
			v += ")"
		}
		v += " " + bi.GoVersion
	}
	return v + " " + runtime.GOOS + "/" + runtime.GOARCH
}

// extraCommands are commands compiled in only with some build tags (the
// cuda build adds gpu-check); they register from init.
var extraCommands = map[string]func(ctx context.Context, args []string, stdout, stderr io.Writer) error{}

// run dispatches a command. A command's -h/--help prints its usage and is
// not an error.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	err := dispatch(ctx, args, stdout, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	return err
}

func dispatch(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return errors.New("no command given")
	}
	switch args[0] {
	case "serve":
		return serve(ctx, args[1:], stdout, stderr)
	case "gen-model":
		return genModel(args[1:], stdout, stderr)
	case "version", "--version", "-version", "-v":
		fmt.Fprintln(stdout, versionString())
		return nil
	case "-h", "--help", "-help", "help":
		if len(args) > 1 && args[0] == "help" {
			return dispatch(ctx, []string{args[1], "-h"}, stdout, stderr)
		}
		fmt.Fprint(stdout, usage)
		return nil
	}
	if cmd, ok := extraCommands[args[0]]; ok {
		return cmd(ctx, args[1:], stdout, stderr)
	}
	fmt.Fprint(stderr, usage)
	return fmt.Errorf("unknown command %q (kvhost --help lists them)", args[0])
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
