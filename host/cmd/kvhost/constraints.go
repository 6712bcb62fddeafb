package main

import (
	"context"
	"io/fs"
	"log/slog"

	"github.com/kvhost/kvhost/host/constraint"
	cbuiltin "github.com/kvhost/kvhost/host/constraint/builtin"
	"github.com/kvhost/kvhost/host/plugin"
	"github.com/kvhost/kvhost/sdk/constraint/grammar"
)

// constraintRunner returns boot's factory of the output-constraint runner,
// on the server's one plugin runtime (reg's):
//
//   - the first constraint plugin, in name order, of the --plugins folder:
//     a drop-in replacement of the built-in, under the allow-list (one that
//     is refused or fails to load is logged and the built-in serves);
//   - else the built-in constraint-grammar plugin;
//   - in a binary built without plugins (no Go wasm build), the same
//     grammar engine linked natively, with a warning.
//
// reg nil (tests) runs the built-in on a runtime of its own.
func constraintRunner(ctx context.Context, reg *plugin.Registry, log *slog.Logger) func(constraint.Tokens, int) (constraint.Runner, error) {
	return func(tok constraint.Tokens, vocab int) (constraint.Runner, error) {
		if reg != nil {
			if name, wasm := folderConstraint(reg, log); wasm != nil {
				r, err := constraint.NewPlugin(ctx, reg.Runtime(), name, wasm, tok, vocab)
				if err == nil {
					log.Info("output constraints run the plugins folder's constraint plugin", "plugin", r.Name())
					return r, nil
				}
				log.Error("constraint plugin refused; the built-in serves output constraints", "plugin", name, "err", err)
			}
		}
		wasm, err := fs.ReadFile(cbuiltin.FS(), "grammar.wasm")
		if err != nil {
			log.Warn("the constraint-grammar plugin is not built in (make plugins); structured output runs the grammar engine linked natively")
			return constraint.NewNativeFor(tok, vocab, grammar.Options{})
		}
		if reg != nil {
			return constraint.NewPlugin(ctx, reg.Runtime(), "grammar", wasm, tok, vocab)
		}
		return constraint.NewPluginRuntime(ctx, plugin.Config{Logger: log}, "grammar", wasm, tok, vocab)
	}
}

// folderConstraint is the first plugin of reg's folder (not a built-in)
// whose exports make it a constraint plugin and that the allow-list
// admits; nil when there is none.
func folderConstraint(reg *plugin.Registry, log *slog.Logger) (string, []byte) {
	for _, name := range reg.Names() {
		src, ok := reg.Source(name)
		if !ok || src.Builtin() {
			continue
		}
		if kind, err := reg.Kind(name); err != nil || kind != plugin.KindConstraint {
			continue
		}
		wasm, err := src.Wasm()
		if err == nil {
			err = reg.Allowed(name, wasm)
		}
		if err != nil {
			log.Error("constraint plugin refused by the allow-list; the built-in serves output constraints", "plugin", name, "file", src.Origin, "err", err)
			continue
		}
		return name, wasm
	}
	return "", nil
}
