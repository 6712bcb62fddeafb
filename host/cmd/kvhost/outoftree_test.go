package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kvhost/kvhost/host/boot"
	"github.com/kvhost/kvhost/host/ledger"
	"github.com/kvhost/kvhost/host/model/synth"
	"github.com/kvhost/kvhost/host/plugin"
	"github.com/kvhost/kvhost/host/server"
	"github.com/kvhost/kvhost/internal/testmodels"
	"github.com/kvhost/kvhost/sdk"
)

// exampleDir is README's "Write a configurator" example: a module of its
// own beside the host's, importing only the sdk.
const exampleDir = "../../../examples/configurator"

// goTool runs the go command in dir with a clean module environment (no
// workspace, no network) and env added.
func goTool(t *testing.T, dir string, env []string, args ...string) string {
	t.Helper()
	goBin := filepath.Join(os.Getenv("GOROOT"), "bin", "go")
	if _, err := os.Stat(goBin); os.Getenv("GOROOT") == "" || err != nil {
		goBin = "go"
	}
	cmd := exec.Command(goBin, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), append([]string{"GOWORK=off", "GOFLAGS=", "GOPROXY=off"}, env...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go %s in %s: %v\n%s", strings.Join(args, " "), dir, err, out)
	}
	return string(out)
}

// buildExample builds the out-of-tree configurator into a fresh plugins
// folder after checking it is outside the tree (its own module) and imports
// nothing but the sdk and the standard library.
func buildExample(t *testing.T) string {
	t.Helper()
	mod := goTool(t, exampleDir, nil, "list", "-m")
	if strings.TrimSpace(mod) == "github.com/kvhost/kvhost" {
		t.Fatalf("%s is not a module of its own", exampleDir)
	}
	deps := goTool(t, exampleDir, []string{"GOOS=wasip1", "GOARCH=wasm"}, "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", ".")
	for _, d := range strings.Fields(deps) {
		if d != "example.com/gqaconfigurator" && !strings.HasPrefix(d, "github.com/kvhost/kvhost/sdk") {
			t.Fatalf("the example imports %s; a configurator may import only the sdk", d)
		}
	}
	goTool(t, exampleDir, nil, "test", "-count=1", ".") // its own native test
	dir := t.TempDir()
	goTool(t, exampleDir, []string{"GOOS=wasip1", "GOARCH=wasm"}, "build", "-trimpath", "-buildmode=c-shared", "-o", filepath.Join(dir, "gqa-example.wasm"), ".")
	return dir
}

func tinyGGUF(t *testing.T) string {
	t.Helper()
	spec, err := synth.Preset("tiny", "f32")
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := synth.Write(&b, spec, nil); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "tiny.gguf")
	if err := os.WriteFile(p, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestOutOfTreeConfigurator: a configurator built from a separate module
// against the sdk, dropped into --plugins, claims the model (over the
// built-in mha), the host sizes its two pools and extra per-token buffer
// from its declaration, and the server's greedy text equals the built-in
// mha's; the plugin reads Meta's params.json key names too.
func TestOutOfTreeConfigurator(t *testing.T) {
	plugins := buildExample(t)
	models := map[string]string{"tiny": tinyGGUF(t), "stories260K": testmodels.MustStories260K(t)}
	for name, path := range models {
		t.Run(name, func(t *testing.T) {
			want, ref := serveText(t, path, "")
			got, s := serveText(t, path, plugins)
			k := s.Budget.KVConfigurator
			if k == nil || k.Plugin != "gqa-example" || len(k.Layout.Pools) != 2 {
				t.Fatalf("configurator %+v, want gqa-example's two pools", k)
			}
			// Its cell is the built-in's plus 4 bytes of token ids, and the
			// pools hold what it declared: tokens × cells, both pools alike.
			if k.CellBytes != ref.Budget.KVConfigurator.CellBytes+4 {
				t.Fatalf("cell %d B/token, the built-in mha's is %d (+4 of token ids expected)", k.CellBytes, ref.Budget.KVConfigurator.CellBytes)
			}
			snap := s.Ledger.Snapshot()
			if err := ledger.Check(snap); err != nil {
				t.Fatal(err)
			}
			var kvBytes int64
			for _, p := range snap.KVPools {
				if p.CapacityTokens != s.Budget.Tokens || p.Bytes != int64(p.CapacityTokens)*p.CellBytes {
					t.Fatalf("pool %+v, budget tokens %d", p, s.Budget.Tokens)
				}
				kvBytes += p.Bytes
			}
			if kvBytes != int64(s.Budget.Tokens)*k.CellBytes {
				t.Fatalf("pools hold %d bytes, %d tokens × %d declared", kvBytes, s.Budget.Tokens, k.CellBytes)
			}
			for i := range want {
				if got[i] != want[i] {
					t.Fatalf("prompt %d: with gqa-example %q, with the built-in mha %q", i, got[i], want[i])
				}
			}
			t.Logf("%d tokens in pools %s/%s of %d and %d B/token; text %q", s.Budget.Tokens, snap.KVPools[0].Name, snap.KVPools[1].Name,
				snap.KVPools[0].CellBytes, snap.KVPools[1].CellBytes, want[0])
		})
	}
	// Through the wasm: a config with Meta's key names declares the same.
	rt, err := plugin.NewRuntime(context.Background(), plugin.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close(context.Background())
	wasm, err := os.ReadFile(filepath.Join(plugins, "gqa-example.wasm"))
	if err != nil {
		t.Fatal(err)
	}
	p, err := rt.Load(context.Background(), "gqa-example", wasm)
	if err != nil {
		t.Fatal(err)
	}
	var pools [2][]sdk.Pool
	for i, cfg := range []string{`{"num_hidden_layers":4,"num_attention_heads":8,"num_key_value_heads":2,"hidden_size":256}`, `{"n_layers":4,"n_heads":8,"n_kv_heads":2,"dim":256}`} {
		l, err := p.Configure(context.Background(), sdk.ConfigureInput{Model: json.RawMessage(cfg), Host: sdk.HostFacts{KVDType: "fp16", PageSize: 16}})
		if err != nil {
			t.Fatal(err)
		}
		pools[i] = l.Pools
	}
	a, _ := json.Marshal(pools[0])
	b, _ := json.Marshal(pools[1])
	if string(a) != string(b) || len(pools[1]) != 2 || pools[1][0].BytesPerUnit != 2*256+4 {
		t.Fatalf("HF names declare %s\nMeta names declare %s", a, b)
	}
}

// serveText starts a server on path (with plugins as --plugins when not
// "") and returns its greedy 64-token completions of three prompts.
func serveText(t *testing.T, path, plugins string) ([]string, *boot.Stack) {
	t.Helper()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	s, err := boot.Build(boot.Config{Model: path, Device: "cpu", DeviceMemory: 256 << 20, Threads: 2,
		MaxRunning: 4, MaxQueue: 16, ChunkedPrefill: 128, PageSize: 16, PluginsDir: plugins}, log, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(server.New(backend{s}, server.Options{Logger: log}))
	t.Cleanup(func() {
		ts.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		s.Close(ctx)
	})
	var out []string
	for _, prompt := range []string{"Once upon a time", "The cat sat", "Lily and Tom went to the park"} {
		body, _ := json.Marshal(map[string]any{"prompt": prompt, "max_tokens": 64, "temperature": 0, "ignore_eos": true})
		resp, err := http.Post(ts.URL+"/v1/completions", "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		var r struct {
			Choices []struct{ Text string }
			Usage   struct {
				CompletionTokens int `json:"completion_tokens"`
			}
		}
		err = json.NewDecoder(resp.Body).Decode(&r)
		resp.Body.Close()
		if err != nil || resp.StatusCode != 200 || len(r.Choices) != 1 {
			t.Fatalf("completion: status %d, %v %+v", resp.StatusCode, err, r)
		}
		out = append(out, r.Choices[0].Text)
	}
	return out, s
}
