package main

import (
	"context"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvhost/kvhost/host/constraint"
	cbuiltin "github.com/kvhost/kvhost/host/constraint/builtin"
	"github.com/kvhost/kvhost/host/constraint/compile"
	"github.com/kvhost/kvhost/host/plugin"
	"github.com/kvhost/kvhost/host/plugin/builtin"
)

// byteTokens is a vocabulary of the 256 bytes plus an end token (256).
type byteTokens struct{}

func (byteTokens) TokenBytes(id int32) []byte {
	if id < 256 {
		return []byte{byte(id)}
	}
	return nil
}
func (byteTokens) EOG(id int32) bool { return id == 256 }

// TestConstraintPluginFromFolder: a constraint plugin dropped into
// --plugins replaces the built-in constraint-grammar plugin (on the
// server's one runtime) and masks as a constraint must; one the allow-list
// does not admit is refused with a log line and the built-in serves; a
// folder holding only other kinds leaves the built-in in place.
func TestConstraintPluginFromFolder(t *testing.T) {
	wasm, err := fs.ReadFile(cbuiltin.FS(), "grammar.wasm")
	if err != nil {
		t.Fatalf("the constraint-grammar plugin is not built (make plugins): %v", err)
	}
	ctx := context.Background()
	rt, err := plugin.NewRuntime(ctx, plugin.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close(ctx)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "acme-json.wasm"), wasm, 0o644); err != nil {
		t.Fatal(err)
	}
	var logs strings.Builder
	log := slog.New(slog.NewTextHandler(&logs, nil))
	for _, tc := range []struct {
		name  string
		dir   string
		allow []string
		want  string
	}{
		{"dropped in", dir, nil, "acme-json@"},
		{"not on the allow-list", dir, []string{strings.Repeat("0", 64)}, "grammar@"},
		{"no constraint in the folder", t.TempDir(), nil, "grammar@"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reg, err := plugin.NewRegistryWith(rt, builtin.FS(), tc.dir, plugin.RegistryOptions{AllowSHA256: tc.allow, Logger: log})
			if err != nil {
				t.Fatal(err)
			}
			r, err := constraintRunner(ctx, reg, log)(byteTokens{}, 257)
			if err != nil {
				t.Fatal(err)
			}
			defer r.(interface{ Close(context.Context) error }).Close(ctx)
			if !strings.HasPrefix(r.Name(), tc.want) {
				t.Fatalf("runner %s, want %s…", r.Name(), tc.want)
			}
			spec, err := constraint.NewSpec("json_object", nil, compile.JSONObject())
			if err != nil {
				t.Fatal(err)
			}
			seq, err := r.Open(ctx, spec)
			if err != nil {
				t.Fatal(err)
			}
			defer seq.Close()
			rows := []constraint.Row{{Seq: seq, Token: -1}}
			r.Step(ctx, rows)
			allowed := func(id int) bool { return rows[0].Mask[id/32]>>(id%32)&1 == 1 }
			if rows[0].Err != nil || !allowed('{') || allowed('a') || allowed(256) {
				t.Fatalf("first mask: err %v, '{' %v, 'a' %v, end %v", rows[0].Err, allowed('{'), allowed('a'), allowed(256))
			}
		})
	}
	if !strings.Contains(logs.String(), "refused by the allow-list") {
		t.Fatalf("the refused drop-in was not logged:\n%s", logs.String())
	}
}
