package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/kvhost/kvhost/host/plugin"
)

func init() {
	extraCommands["plugin"] = pluginCmd
}

const pluginUsage = `Usage:
  kvhost plugin check FILE.wasm   load a configurator or a sampler as the server would (limits,
                                  validation, handshake, self-test) and print what it declares
`

func pluginCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "help" || args[len(args)-1] == "-h" || args[len(args)-1] == "--help") {
		fmt.Fprint(stdout, pluginUsage)
		return nil
	}
	if len(args) == 0 || args[0] != "check" {
		fmt.Fprint(stderr, pluginUsage)
		return errors.New("plugin: expected 'check FILE.wasm'")
	}
	if len(args) != 2 {
		fmt.Fprint(stderr, pluginUsage)
		return errors.New("plugin check: expected exactly one file")
	}
	rep, err := plugin.CheckFile(ctx, args[1])
	if err != nil {
		return fmt.Errorf("plugin check %s: %w", args[1], err)
	}
	fmt.Fprint(stdout, rep.String())
	return nil
}
