package plugin

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"testing/fstest"
	"time"

	"github.com/kvhost/kvhost/host/plugin/fuel"
	"github.com/kvhost/kvhost/host/plugin/wasmtest"
	"github.com/kvhost/kvhost/sdk"
)

// TestRecalledAnswers: with Config.RecallAnswers a restart on the same
// cache claims the configurator without loading it and answers configure
// and size from what the same version answered before — the same pools and
// units, no compile, no interpreter run; a question it was never asked
// loads the module; a recorded answer that fails the checks of a fresh
// one (tampered here) is not used, the module answers instead; a closed
// deferred plugin refuses calls.
func TestRecalledAnswers(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	builtin := fstest.MapFS{"mha.wasm": &fstest.MapFile{Data: readWasm(t, "mha")}}
	open := func() (*Runtime, *Registry, *Plugin) {
		t.Helper()
		rt, err := NewRuntime(ctx, Config{CacheDir: dir, RecallAnswers: true})
		if err != nil {
			t.Fatal(err)
		}
		r, err := NewRegistry(rt, builtin, "")
		if err != nil {
			t.Fatal(err)
		}
		p, err := r.ForArchitecture(ctx, "LlamaForCausalLM", "bf16")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = r.Close(ctx); _ = rt.Close(ctx) })
		return rt, r, p
	}
	_, raw, err := sampleFor(sdk.Descriptor{Name: "mha", Architectures: []string{"LlamaForCausalLM"}})
	if err != nil {
		t.Fatal(err)
	}
	in := sdk.ConfigureInput{Model: raw, Host: sdk.HostFacts{KVDType: "bf16", PageSize: 16, ContextLength: 2048}}
	const avail = 1 << 30

	// First start: nothing recorded, the module runs and its answers are
	// recorded.
	rt1, _, p1 := open()
	l1, err := p1.Configure(ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	u1, err := l1.Size(ctx, avail, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if l1.Recalled || rt1.compiles.Load() != 1 {
		t.Fatalf("first start: recalled %v, %d compiles", l1.Recalled, rt1.compiles.Load())
	}

	// Restart: claimed from the record, answered from the recorded
	// answers, nothing loaded.
	rt2, _, p2 := open()
	l2, err := p2.Configure(ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	u2, err := l2.Size(ctx, avail, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if !l2.Recalled || !reflect.DeepEqual(l1.Pools, l2.Pools) || !reflect.DeepEqual(u1, u2) {
		t.Fatalf("recalled %v: pools %+v vs %+v, units %v vs %v", l2.Recalled, l2.Pools, l1.Pools, u2, u1)
	}
	if n, m := rt2.compiles.Load(), rt2.interprets.Load(); n != 0 || m != 0 || p2.m != nil {
		t.Fatalf("restart: %d compiles, %d interpreted, module loaded %v; want none", n, m, p2.m != nil)
	}
	if calls, _, _ := p2.CallStats(); calls != 0 {
		t.Fatalf("restart: %d guest calls", calls)
	}
	// A question never asked loads the module, which answers.
	u3, err := l2.Size(ctx, avail/2, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if p2.m == nil || rt2.compiles.Load() != 1 || reflect.DeepEqual(u3, u2) {
		t.Fatalf("new question: module loaded %v, %d compiles, units %v (for twice the bytes %v)", p2.m != nil, rt2.compiles.Load(), u3, u2)
	}

	// A tampered answer (more tokens than the bytes hold) fails the checks
	// a fresh answer passes, so the module answers instead.
	files, _ := filepath.Glob(filepath.Join(dir, metaDir, answersDir, "*.json"))
	if len(files) != 5 {
		t.Fatalf("%d answers recorded, want 5 (the self-test's configure and size, configure, two sizes): %v", len(files), files)
	}
	key := answerKey(p1.SHA256(), sdk.ExportSize, []byte(l1.input+"\x00"+"1073741824 0 0"))
	var bad map[string]int64
	if !p1.disk.recall(key, &bad) {
		t.Fatalf("no answer under %s", key)
	}
	for k := range bad {
		bad[k] *= 1024
	}
	p1.disk.record(key, bad)
	rt4, _, p4 := open()
	l4, err := p4.Configure(ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	u4, err := l4.Size(ctx, avail, 0, 0)
	if err != nil || !reflect.DeepEqual(u4, u1) || rt4.compiles.Load() != 1 {
		t.Fatalf("after tampering: units %v (want %v), %v, %d compiles", u4, u1, err, rt4.compiles.Load())
	}

	_, _, p5 := open()
	if err := p5.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := p5.Configure(ctx, in); err == nil || !strings.Contains(err.Error(), "closed") {
		t.Fatalf("configure on a closed deferred plugin: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, metaDir, answersDir)); err != nil {
		t.Fatal(err)
	}
}

// countingFS counts the whole-file reads of its files (fs.ReadFile goes
// through ReadFile; hashing a source opens and streams it).
type countingFS struct {
	fstest.MapFS
	reads *atomic.Int64
}

func (c countingFS) ReadFile(name string) ([]byte, error) {
	c.reads.Add(1)
	return c.MapFS.ReadFile(name)
}

// TestWarmStartReadsNoBuiltinBytes: built-in sources are not held as
// bytes; once the records and answers exist, listing kinds, claiming the
// configurator and configuring it read no built-in's bytes (they are
// hashed as a stream), while the allow-list still trusts the built-ins.
func TestWarmStartReadsNoBuiltinBytes(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	var reads atomic.Int64
	fsys := countingFS{MapFS: fstest.MapFS{}, reads: &reads}
	for _, k := range configuratorNames {
		fsys.MapFS[k+".wasm"] = &fstest.MapFile{Data: readWasm(t, k)}
	}
	_, raw, err := sampleFor(sdk.Descriptor{Name: "mha", Architectures: []string{"LlamaForCausalLM"}})
	if err != nil {
		t.Fatal(err)
	}
	in := sdk.ConfigureInput{Model: raw, Host: sdk.HostFacts{KVDType: "bf16"}}
	for run := range 2 {
		rt, err := NewRuntime(ctx, Config{CacheDir: dir, RecallAnswers: true})
		if err != nil {
			t.Fatal(err)
		}
		r, err := NewRegistryWith(rt, fsys, "", RegistryOptions{AllowSHA256: []string{strings.Repeat("ab", 32)}})
		if err != nil {
			t.Fatal(err)
		}
		reads.Store(0)
		for _, name := range r.Names() {
			if k, err := r.Kind(name); err != nil || k != KindConfigurator {
				t.Fatalf("run %d: kind of %s: %q %v", run, name, k, err)
			}
		}
		p, err := r.ForArchitecture(ctx, "LlamaForCausalLM", "bf16")
		if err != nil {
			t.Fatalf("run %d: %v", run, err)
		}
		if _, err := p.Configure(ctx, in); err != nil {
			t.Fatal(err)
		}
		if run == 1 && reads.Load() != 0 {
			t.Fatalf("warm start read %d built-ins' bytes", reads.Load())
		}
		if run == 0 && reads.Load() == 0 {
			t.Fatal("cold start read no bytes: the counter does not count")
		}
		_ = r.Close(ctx)
		_ = rt.Close(ctx)
	}
}

// TestStreamedExportsMatch: a built-in's exports read as a stream (the
// sections before them skipped) are fuel.Exports of its whole bytes, for
// every test plugin (configurators, hostile ones) and sampler.
func TestStreamedExportsMatch(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join(wasmDir, "*.wasm"))
	for _, name := range []string{"standard", "greedy"} {
		if b, err := wasmtest.Builtin(name); err == nil {
			p := filepath.Join(t.TempDir(), name+".wasm")
			if err := os.WriteFile(p, b, 0o644); err != nil {
				t.Fatal(err)
			}
			files = append(files, p)
		}
	}
	if len(files) < len(configuratorNames)+2 {
		t.Fatalf("only %d test plugins", len(files))
	}
	for _, path := range files {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		want, err := fuel.Exports(b)
		if err != nil {
			t.Fatal(err)
		}
		got, err := Source{fsys: os.DirFS(filepath.Dir(path)), file: filepath.Base(path)}.exports()
		if err != nil || !reflect.DeepEqual(got, want) || len(want) == 0 {
			t.Fatalf("%s: streamed %v (%v), whole %v", path, got, err, want)
		}
	}
}

// TestAnswersEvictedLeastRecentlyUsed: recording past the bound removes
// the answers used longest ago, and a recall counts as a use.
func TestAnswersEvictedLeastRecentlyUsed(t *testing.T) {
	c, err := newDiskCache(t.TempDir(), 1<<20, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(c.dir, metaDir, answersDir)
	base := time.Now().Add(-time.Hour)
	for i := range 5 {
		key := answerKey("sha", "configure", []byte{byte(i)})
		c.record(key, map[string]int{"i": i})
		// Recorded a minute apart, oldest first.
		at := base.Add(time.Duration(i) * time.Minute)
		if err := os.Chtimes(c.answerPath(key), at, at); err != nil {
			t.Fatal(err)
		}
	}
	var v map[string]int
	if !c.recall(answerKey("sha", "configure", []byte{0}), &v) || v["i"] != 0 {
		t.Fatalf("recall of the oldest answer: %v", v)
	}
	c.evictAnswers(3)
	files, _ := filepath.Glob(filepath.Join(dir, "*.json"))
	if len(files) != 3 {
		t.Fatalf("%d answers left, want 3", len(files))
	}
	for i, want := range []bool{true, false, false, true, true} { // 0 was just used
		if got := c.recall(answerKey("sha", "configure", []byte{byte(i)}), &v); got != want {
			t.Errorf("answer %d kept %v, want %v", i, got, want)
		}
	}
}
