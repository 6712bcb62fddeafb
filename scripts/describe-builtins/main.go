// Command describe-builtins writes DIR/DESCRIBED.json (plugin.DescribedFile):
// the Describe answer of every configurator in DIR, taken once at build
// time so a first start need not interpret the configurators that do not
// claim its model. scripts/build-plugins.sh runs it over
// host/plugin/builtin/wasm after building them.
package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/kvhost/kvhost/host/plugin"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "describe-builtins:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) != 1 {
		return fmt.Errorf("usage: describe-builtins DIR")
	}
	dir := args[0]
	ctx := context.Background()
	rt, err := plugin.NewRuntime(ctx, plugin.Config{NoCache: true})
	if err != nil {
		return err
	}
	defer rt.Close(ctx)
	b, err := plugin.DescribeSet(ctx, rt, os.DirFS(dir))
	if err != nil {
		return err
	}
	out := filepath.Join(dir, plugin.DescribedFile)
	if err := os.WriteFile(out+".tmp", append(b, '\n'), 0o644); err != nil {
		return err
	}
	return os.Rename(out+".tmp", out)
}
