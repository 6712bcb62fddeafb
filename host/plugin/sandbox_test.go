package plugin

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/kvhost/kvhost/host/plugin/fuel"
	"github.com/kvhost/kvhost/host/plugin/wasmtest"
	"github.com/kvhost/kvhost/sdk"
)

// The escapes of issue 12, each as a hostile module of its shape, loaded
// as a sampler (the upload and folder path) and as a configurator (the
// folder path). Each is refused at load or stopped within its budget, and
// the version keeps serving from fresh instances afterwards.

// stepAttack runs one step of s with row 0 asking for the attack.
func stepAttack(t *testing.T, s *Sampler, attack float32) (time.Duration, error) {
	t.Helper()
	ctx := context.Background()
	si, err := s.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Release(si)
	k := s.K()
	ids, nCand := make([]int32, 4*k), make([]int32, 4)
	for b := range 4 {
		fill(&si.IO, k, b, k, ids, nCand)
		si.IO.Params[b] = attack
	}
	start := time.Now()
	err = si.Sample(ctx, 4, ids, nCand)
	return time.Since(start), err
}

// TestHostileSamplers: every attack as an uploaded sampler. The invalid
// one (the fuel refill) is refused before it is compiled; the others pass
// the upload self-test (they misbehave only on request), then each
// attacking step fails with a spent budget — the bulk operations and table
// growth charged by their length, the table capped so growth fails — in
// well under the step deadline, and the next calm step works on a fresh
// instance. An "always" variant is refused at its self-test.
func TestHostileSamplers(t *testing.T) {
	ctx := context.Background()
	for _, a := range wasmtest.Attacks {
		t.Run(string(a), func(t *testing.T) {
			wasm := wasmtest.Sampler("evil", a, false)
			s, err := samplerRT.LoadSampler(ctx, "evil", wasm)
			if !a.Valid() {
				var de *fuel.DecodeError
				var re *RefusedError
				if !errors.As(err, &de) || !errors.As(err, &re) || re.Stage != "instrument" || !strings.Contains(err.Error(), "global 0 out of range") {
					t.Fatalf("invalid module: %v, want a refusal naming the global index", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close(ctx)
			elapsed, err := stepAttack(t, s, 1)
			if !errors.Is(err, ErrOutOfFuel) {
				t.Fatalf("attack: %v, want ErrOutOfFuel", err)
			}
			t.Logf("%s contained in %v", a, elapsed)
			if elapsed > samplerRT.cfg.StepDeadline {
				t.Fatalf("attack ran %v, past the step deadline of %v", elapsed, samplerRT.cfg.StepDeadline)
			}
			if _, err := stepAttack(t, s, 0); err != nil {
				t.Fatalf("calm step after the attack: %v", err)
			}
			_, err = samplerRT.LoadSampler(ctx, "evil", wasmtest.Sampler("evil", a, true))
			var re *RefusedError
			if !errors.As(err, &re) || re.Stage != "self-test" || !errors.Is(err, ErrOutOfFuel) {
				t.Fatalf("always-attacking variant: %v, want a refusal at the self-test", err)
			}
		})
	}
}

// TestHostileConfigurators: every attack as a configurator in a plugins
// folder, named to sort before the built-ins and claiming Llama: the
// registry skips it (refused at load, or stopped at its self-test) with a
// warning, and the built-in mha claims the model.
func TestHostileConfigurators(t *testing.T) {
	ctx := context.Background()
	builtin := fstest.MapFS{"mha.wasm": {Data: readWasm(t, "mha")}}
	for _, a := range wasmtest.Attacks {
		t.Run(string(a), func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, "aaa-evil.wasm"), wasmtest.Configurator("aaa-evil", a), 0o644); err != nil {
				t.Fatal(err)
			}
			r, err := NewRegistry(testRT, builtin, dir)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close(ctx)
			start := time.Now()
			p, err := r.ForArchitecture(ctx, "LlamaForCausalLM", "bf16")
			elapsed := time.Since(start)
			if err != nil || p.Descriptor().Name != "mha" {
				t.Fatalf("claimant: %v %v", p, err)
			}
			t.Logf("%s contained in %v (mha claimed the model)", a, elapsed)
			// Loaded on its own, the attack fails its call, bounded.
			if !a.Valid() {
				return
			}
			evil, err := testRT.Load(ctx, "aaa-evil", wasmtest.Configurator("aaa-evil", a))
			if err != nil {
				t.Fatal(err)
			}
			defer evil.Close(ctx)
			_, err = evil.Configure(ctx, sdk.ConfigureInput{Model: modelConfig(t, "llama-3-8b")})
			if !errors.Is(err, ErrOutOfFuel) && !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("configure: %v, want a spent budget or deadline", err)
			}
		})
	}
}

// TestDeadlineStopsAGuest: with a fuel budget far beyond any deadline
// (2^40 units, ~20 minutes), a spinning step is stopped by the watchdog at
// its wall-clock deadline: a *DeadlineError, the instance discarded, the
// next step served; no goroutine is left inside the guest.
func TestDeadlineStopsAGuest(t *testing.T) {
	ctx := context.Background()
	// Fuel for ~4 s of spinning, so the 150 ms deadline is what stops it;
	// the collector is off for the attack: a collection waits for the
	// spinning guest and stops the watchdog with it, which would leave the
	// step to its fuel (the documented limit in watchdog.go).
	rt, err := NewRuntime(ctx, Config{MaxBatch: 16, FuelBase: 4 << 30, StepDeadline: 150 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close(ctx)
	s, err := rt.LoadSampler(ctx, "evil", wasmtest.Sampler("evil", wasmtest.Spin, false))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(ctx)
	runtime.GC()
	gc := debug.SetGCPercent(-1)
	elapsed, err := stepAttack(t, s, 1)
	debug.SetGCPercent(gc)
	var de *DeadlineError
	if !errors.As(err, &de) || !errors.Is(err, context.DeadlineExceeded) || de.Timeout != 150*time.Millisecond {
		t.Fatalf("spin under a huge budget: %v", err)
	}
	if elapsed < 150*time.Millisecond || elapsed > 5*time.Second {
		t.Fatalf("stopped after %v, deadline 150ms", elapsed)
	}
	t.Logf("spin stopped by the watchdog after %v", elapsed)
	if st := s.Stats(); st.Overruns < 1 {
		t.Fatalf("overrun not counted: %+v", st)
	}
	if _, err := stepAttack(t, s, 0); err != nil {
		t.Fatalf("next step: %v", err)
	}
}

// compiledFiles lists the compiled code in a cache directory.
func compiledFiles(t *testing.T, dir string) []string {
	t.Helper()
	m, _ := filepath.Glob(filepath.Join(dir, "wazero-*", "*"))
	return m
}

// TestLoadLimitsAndCache: 3 million empty functions (a 15 MB module) are
// refused at the load limits in well under a second, before anything is
// decoded by wazero or compiled; a module refused after compiling (at its
// self-test) leaves no compiled code in the cache, an accepted one does;
// the cache is evicted by size, least recently used first.
func TestLoadLimitsAndCache(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	rt, err := NewRuntime(ctx, Config{CacheDir: dir, MaxBatch: 16})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close(ctx)
	bomb := wasmtest.EmptyFunctions(3_000_000)
	start := time.Now()
	_, err = rt.LoadSampler(ctx, "bomb", bomb)
	elapsed := time.Since(start)
	var le *fuel.LimitError
	var re *RefusedError
	if !errors.As(err, &le) || !errors.As(err, &re) || re.Stage != "limits" || le.What != "functions" || le.Have != 3_000_000 {
		t.Fatalf("3M functions: %v", err)
	}
	t.Logf("%d-byte module of 3M functions refused in %v", len(bomb), elapsed)
	if elapsed > time.Second || rt.compiles.Load() != 0 || len(compiledFiles(t, dir)) != 0 {
		t.Fatalf("refused after %v with %d compiles, files %v", elapsed, rt.compiles.Load(), compiledFiles(t, dir))
	}
	// Refused at the self-test, after compiling: nothing stays.
	if _, err := rt.LoadSampler(ctx, "evil", wasmtest.Sampler("evil", wasmtest.Spin, true)); !errors.As(err, &re) || re.Stage != "self-test" {
		t.Fatalf("always-spinning sampler: %v", err)
	}
	if f := compiledFiles(t, dir); rt.compiles.Load() != 1 || len(f) != 0 {
		t.Fatalf("refused module: %d compiles, cache files %v", rt.compiles.Load(), f)
	}
	if _, ok := rt.disk.get(sum256(wasmtest.Sampler("evil", wasmtest.Spin, true))); ok {
		t.Fatal("a refused module has a record")
	}
	// Accepted: its compiled code and record stay.
	good, err := rt.LoadSampler(ctx, "good", wasmtest.Sampler("good", wasmtest.None, false))
	if err != nil {
		t.Fatal(err)
	}
	defer good.Close(ctx)
	f := compiledFiles(t, dir)
	if len(f) != 1 {
		t.Fatalf("accepted module: cache files %v", f)
	}
	if rec, ok := rt.disk.get(good.SHA256()); !ok || !rec.Accepted || len(rec.Files) != 1 {
		t.Fatalf("accepted module's record %+v %v", rec, ok)
	}
	// Eviction by size: with room for one module, the older goes.
	info, err := os.Stat(f[0])
	if err != nil {
		t.Fatal(err)
	}
	small, err := NewRuntime(ctx, Config{CacheDir: dir, MaxBatch: 16, MaxCacheBytes: info.Size() + info.Size()/2})
	if err != nil {
		t.Fatal(err)
	}
	defer small.Close(ctx)
	old := time.Now().Add(-time.Hour)
	_ = os.Chtimes(f[0], old, old)
	other, err := small.LoadSampler(ctx, "other", wasmtest.Sampler("other", wasmtest.None, false))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close(ctx)
	if now := compiledFiles(t, dir); len(now) != 1 || now[0] == f[0] {
		t.Fatalf("after eviction: %v (the older %s should have gone)", now, filepath.Base(f[0]))
	}
}

// TestCompileAbandoned: a caller that leaves (an admin client that
// disconnects) or outlasts Config.CompileTimeout gets its refusal at once;
// the worker finishes the compile on its own, keeps nothing of it, and
// serves the next load.
func TestCompileAbandoned(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	rt, err := NewRuntime(ctx, Config{CacheDir: dir, CompileTimeout: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close(ctx)
	many := wasmtest.EmptyFunctions(60_000) // within the limits, ~100 ms to compile
	start := time.Now()
	_, err = rt.Load(ctx, "many", many)
	var re *RefusedError
	if !errors.As(err, &re) || re.Stage != "compile" || !strings.Contains(err.Error(), "not compiled within 1ms") {
		t.Fatalf("compile past its timeout: %v", err)
	}
	if el := time.Since(start); el > 2*time.Second {
		t.Fatalf("the caller waited %v for a 1ms compile timeout", el)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := rt.LoadSampler(cctx, "good", wasmtest.Sampler("good", wasmtest.None, false)); err == nil || !errors.Is(err, context.Canceled) {
		t.Fatalf("load by a caller that left: %v", err)
	}
	// The worker finishes and frees itself; what it compiled is gone.
	rt.workers.Wait()
	if f := compiledFiles(t, dir); len(f) != 0 {
		t.Fatalf("abandoned compile left %v", f)
	}
}

// TestPluginsFolderReading: a plugins folder is read as regular files
// within the size cap only: a link to /dev/zero, a directory named x.wasm,
// a dangling link and a file over the cap are skipped, each with its
// reason, and the registry still starts with the rest.
func TestPluginsFolderReading(t *testing.T) {
	dir := t.TempDir()
	good := wasmtest.Sampler("good", wasmtest.None, false)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.WriteFile(filepath.Join(dir, "good.wasm"), good, 0o644))
	must(os.Symlink("/dev/zero", filepath.Join(dir, "zero.wasm")))
	must(os.Symlink(filepath.Join(dir, "nowhere"), filepath.Join(dir, "dangling.wasm")))
	must(os.Mkdir(filepath.Join(dir, "x.wasm"), 0o755))
	must(os.WriteFile(filepath.Join(dir, "big.wasm"), make([]byte, 4096), 0o644))
	must(os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("ignored"), 0o644))
	entries, skipped, err := ScanFolder(dir, 2048)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || entries[0].Name != "good" {
		t.Fatalf("entries %+v", entries)
	}
	var msgs []string
	for _, e := range skipped {
		msgs = append(msgs, e.Error())
	}
	all := strings.Join(msgs, "\n")
	for _, want := range []string{"zero.wasm: not a regular file", "x.wasm: not a regular file", "dangling.wasm", "big.wasm: 4096 bytes, over the 2048-byte plugin size cap"} {
		if !strings.Contains(all, want) {
			t.Errorf("skipped lacks %q:\n%s", want, all)
		}
	}
	if _, err := ReadPluginFile("/dev/zero", 1<<20); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Fatalf("reading /dev/zero: %v", err)
	}
	r, err := NewRegistry(testRT, nil, dir)
	if err != nil {
		t.Fatalf("registry over a folder with junk: %v", err)
	}
	defer r.Close(context.Background())
	if got := strings.Join(r.Names(), ","); got != "big,good" {
		t.Fatalf("names %s (big is within the default cap)", got)
	}
	if k, err := r.Kind("good"); err != nil || k != KindSampler {
		t.Fatalf("kind of good: %s %v", k, err)
	}
}

// TestOnlyTheClaimantIsCompiled: on a cold cache, deciding which
// configurator claims a Llama model interprets the configurators sorted
// before the claimant (to read their descriptors) and compiles only the
// claimant; a restart on the same cache reads their records and
// interprets nothing.
func TestOnlyTheClaimantIsCompiled(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	builtin := fstest.MapFS{}
	for _, k := range configuratorNames {
		builtin[k+".wasm"] = &fstest.MapFile{Data: readWasm(t, k)}
	}
	std, _ := wasmtest.Builtin("standard")
	builtin["standard.wasm"] = &fstest.MapFile{Data: std} // a sampler: skipped without a look
	for run, want := range []struct{ interprets, compiles int64 }{{3, 1}, {0, 1}} {
		rt, err := NewRuntime(ctx, Config{CacheDir: dir})
		if err != nil {
			t.Fatal(err)
		}
		r, err := NewRegistry(rt, builtin, "")
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		p, err := r.ForArchitecture(ctx, "LlamaForCausalLM", "bf16")
		if err != nil || p.Name() != "mha" {
			t.Fatalf("run %d: %v %v", run, p, err)
		}
		t.Logf("run %d: claimed in %v, %d interpreted, %d compiled", run, time.Since(start), rt.interprets.Load(), rt.compiles.Load())
		if rt.interprets.Load() != want.interprets || rt.compiles.Load() != want.compiles {
			t.Fatalf("run %d: %d interpreted, %d compiled; want %d and %d (fp4, mamba, mha described; mha compiled)",
				run, rt.interprets.Load(), rt.compiles.Load(), want.interprets, want.compiles)
		}
		_ = r.Close(ctx)
		_ = rt.Close(ctx)
	}
}
