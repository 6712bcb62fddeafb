package constraint_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/kvhost/kvhost/host/constraint"
	"github.com/kvhost/kvhost/host/constraint/compile"
	"github.com/kvhost/kvhost/host/plugin"
	"github.com/kvhost/kvhost/sdk/constraint/grammar"
)

// byteTokens is a test vocabulary: 256 single bytes, some pieces that
// span characters or split UTF-8, and one EOG token (the last id).
type byteTokens [][]byte

func newByteTokens() byteTokens {
	var t byteTokens
	for b := 0; b < 256; b++ {
		t = append(t, []byte{byte(b)})
	}
	for _, s := range []string{`{"`, `":`, `", "`, `"}`, `name`, `age`, `true`, `null`, `12`, `é`, "\xe6\x97", "\xa5", `\"`} {
		t = append(t, []byte(s))
	}
	return append(t, nil)
}

func (t byteTokens) TokenBytes(id int32) []byte { return t[id] }
func (t byteTokens) EOG(id int32) bool          { return int(id) == len(t)-1 }

func wasmFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%s (built by make plugins): %v", path, err)
	}
	return b
}

func runtime(t *testing.T, cfg plugin.Config) *plugin.Runtime {
	t.Helper()
	cfg.NoCache = true
	rt, err := plugin.NewRuntime(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rt.Close(context.Background()) })
	return rt
}

func spec(t *testing.T, typ string, g *grammar.Grammar) *constraint.Spec {
	t.Helper()
	s, err := constraint.NewSpec(typ, nil, g)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestPluginMatchesNative: the constraint-grammar plugin, run in the
// sandbox, gives the same mask as the engine linked natively at every step
// of random walks through a JSON Schema and a regex, n > 1 forks
// included.
func TestPluginMatchesNative(t *testing.T) {
	toks := newByteTokens()
	rt := runtime(t, plugin.Config{})
	pl, err := constraint.NewPlugin(context.Background(), rt, "grammar", wasmFile(t, "builtin/wasm/grammar.wasm"), toks, len(toks))
	if err != nil {
		t.Fatal(err)
	}
	defer pl.Close(context.Background())
	nat, err := constraint.NewNativeFor(toks, len(toks), grammar.Options{})
	if err != nil {
		t.Fatal(err)
	}
	doc, _ := os.ReadFile("testdata/schemas/10-nested.json")
	gs, err := compile.JSONSchema(doc)
	if err != nil {
		t.Fatal(err)
	}
	gr, _ := compile.Regex(`[a-z]{2,5}(-\d+)?`)
	r := rand.New(rand.NewPCG(3, 4))
	ctx := context.Background()
	for _, sp := range []*constraint.Spec{spec(t, "json_schema", gs), spec(t, "regex", gr)} {
		for walk := range 4 {
			ps, err := pl.Open(ctx, sp)
			if err != nil {
				t.Fatal(err)
			}
			ns, err := nat.Open(ctx, sp)
			if err != nil {
				t.Fatal(err)
			}
			if walk%2 == 1 { // walk on a fork
				pf, err := ps.Fork(ctx)
				if err != nil {
					t.Fatal(err)
				}
				ps.Close()
				ps = pf
			}
			tok := int32(-1)
			for step := 0; step < 80; step++ {
				prow := []constraint.Row{{Seq: ps, Token: tok, Budget: 80 - step}}
				nrow := []constraint.Row{{Seq: ns, Token: tok, Budget: 80 - step}}
				pl.Step(ctx, prow)
				nat.Step(ctx, nrow)
				if prow[0].Err != nil || nrow[0].Err != nil {
					t.Fatalf("step %d: plugin %v, native %v", step, prow[0].Err, nrow[0].Err)
				}
				if prow[0].Accept != nrow[0].Accept || prow[0].Complete != nrow[0].Complete {
					t.Fatalf("step %d: flags differ", step)
				}
				for w := range nrow[0].Mask {
					if prow[0].Mask[w] != nrow[0].Mask[w] {
						t.Fatalf("%s walk %d step %d: mask word %d plugin %032b native %032b", sp.Type, walk, step, w, prow[0].Mask[w], nrow[0].Mask[w])
					}
				}
				if nrow[0].Complete {
					break
				}
				var allowed []int32
				for id := range int32(len(toks)) {
					if grammar.Allowed(nrow[0].Mask, id) && !toks.EOG(id) {
						allowed = append(allowed, id)
					}
				}
				if len(allowed) == 0 {
					break
				}
				tok = allowed[r.IntN(len(allowed))]
			}
			ps.Close()
			ns.Close()
		}
	}
}

// TestHostileConstraintPlugin: each misbehaviour ends its own sequence
// with a clear error, and the plugin keeps serving a well-behaved
// sequence opened before, alongside and after (on other instances).
func TestHostileConstraintPlugin(t *testing.T) {
	toks := newByteTokens()
	rt := runtime(t, plugin.Config{ConstraintStepDeadline: 300 * time.Millisecond, ConstraintMemoryLimitPages: 512})
	pl, err := constraint.NewPlugin(context.Background(), rt, "hostile-constraint", wasmFile(t, "testdata/wasm/hostile-constraint.wasm"), toks, len(toks))
	if err != nil {
		t.Fatal(err)
	}
	defer pl.Close(context.Background())
	ctx := context.Background()
	g, _ := compile.Regex(`ab+`)
	good := spec(t, "regex", g)
	check := func(what string) {
		t.Helper()
		q, err := pl.Open(ctx, good)
		if err != nil {
			t.Fatalf("after %s: open: %v", what, err)
		}
		defer q.Close()
		rows := []constraint.Row{{Seq: q, Token: -1}}
		pl.Step(ctx, rows)
		if rows[0].Err != nil || !grammar.Allowed(rows[0].Mask, 'a') || grammar.Count(rows[0].Mask) != 1 {
			t.Fatalf("after %s: the well-behaved sequence got %v", what, rows[0].Err)
		}
	}
	check("nothing")
	cases := []struct {
		mode string
		want func(error) bool
		text string
	}{
		{"loop", func(err error) bool {
			var de *plugin.DeadlineError
			return errors.As(err, &de) || errors.Is(err, plugin.ErrOutOfFuel)
		}, ""},
		// Out of memory traps; on a loaded machine the deadline may come
		// first. Either way the step ends and the instance is discarded.
		{"membomb", func(err error) bool {
			var te *plugin.TrapError
			var de *plugin.DeadlineError
			return errors.As(err, &te) || errors.As(err, &de)
		}, ""},
		{"range", func(err error) bool { var ce *plugin.ContractError; return errors.As(err, &ce) }, "outside the vocabulary"},
	}
	for _, c := range cases {
		q, err := pl.Open(ctx, spec(t, c.mode, nil))
		if err != nil {
			t.Fatalf("%s: open: %v", c.mode, err)
		}
		rows := []constraint.Row{{Seq: q, Token: -1}}
		start := time.Now()
		pl.Step(ctx, rows)
		if !c.want(rows[0].Err) || !strings.Contains(rows[0].Err.Error(), c.text) {
			t.Fatalf("%s: %v (%T)", c.mode, rows[0].Err, rows[0].Err)
		}
		t.Logf("%s: stopped after %v: %v", c.mode, time.Since(start).Round(time.Millisecond), rows[0].Err)
		q.Close()
		check(c.mode)
	}
	// A plugin that allows nothing, or only EOG before the output is
	// complete: the runner returns the mask; the engine refuses it (see
	// host/engine's hostile test).
	for _, mode := range []string{"none", "eos"} {
		q, _ := pl.Open(ctx, spec(t, mode, nil))
		rows := []constraint.Row{{Seq: q, Token: -1}}
		pl.Step(ctx, rows)
		if rows[0].Err != nil || rows[0].Accept {
			t.Fatalf("%s: %v accept=%v", mode, rows[0].Err, rows[0].Accept)
		}
		q.Close()
	}
	if _, err := pl.Open(ctx, spec(t, "panic", nil)); err == nil {
		t.Fatal("a panicking open succeeded")
	} else {
		var te *plugin.TrapError
		if !errors.As(err, &te) {
			t.Fatalf("panic at open: %v", err)
		}
	}
	check("panic")
}
