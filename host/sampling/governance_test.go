package sampling

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvhost/kvhost/host/plugin"
	"github.com/kvhost/kvhost/host/plugin/allowlist"
	"github.com/kvhost/kvhost/host/plugin/wasmtest"
	"github.com/kvhost/kvhost/host/sampling/samplertest"
)

// syncBuffer is a log sink safe for concurrent writers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func hostile(t testing.TB, name string) []byte {
	t.Helper()
	b, err := wasmtest.HostileC(name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func infoOf(t testing.TB, r *Registry, name string) Info {
	t.Helper()
	list := r.List()
	i := slicesIndex(list, name)
	if i < 0 {
		t.Fatalf("%s not listed", name)
	}
	return list[i]
}

func TestAllowList(t *testing.T) {
	ctx := context.Background()
	base, _ := wasmtest.Builtin("standard")
	listed, _ := samplertest.Variant(base, "8.0.0")
	unlisted, _ := samplertest.Variant(base, "9.0.0")
	fail := hostile(t, "failstep")
	r := newRegistry(t, Options{AllowSHA256: []string{allowlist.Sum(listed) + "  standard", strings.ToUpper(allowlist.Sum(fail))}})
	// The built-ins loaded although none is listed: they are trusted.
	if n := len(r.List()); n != len(builtins) {
		t.Fatalf("%d built-ins loaded under an allow-list", n)
	}
	before := infoOf(t, r, "standard").Version
	tests := []struct {
		name    string
		wasm    []byte
		pinned  string
		allowed bool
	}{
		{"standard", unlisted, "", false},
		{"standard", []byte("not wasm"), "", false}, // refused before decoding
		{"greedy", listed, "standard", false},
		{"failstep", fail, "", true},
		{"standard", listed, "", true},
		{"standard", base, "", true}, // built-in bytes, whatever the source
	}
	for i, tc := range tests {
		err := r.Swap(ctx, tc.name, tc.wasm, SourceUpload)
		if tc.allowed {
			if err != nil {
				t.Fatalf("case %d: %v", i, err)
			}
			continue
		}
		var na *allowlist.NotAllowedError
		if !errors.As(err, &na) || na.Plugin != tc.name || na.SHA256 != allowlist.Sum(tc.wasm) || na.PinnedTo != tc.pinned {
			t.Fatalf("case %d: %v, want a *allowlist.NotAllowedError", i, err)
		}
		if info := infoOf(t, r, "standard"); i < 3 && info.Version != before {
			t.Fatalf("case %d: refused upload changed standard to %s", i, info.Version)
		}
	}
	// A folder file is checked the same way: unlisted files never load.
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "standard.wasm"), unlisted, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "failstep.wasm"), fail, 0o644); err != nil {
		t.Fatal(err)
	}
	stop := r.Watch(ctx, dir, time.Hour)
	defer stop()
	if info := infoOf(t, r, "standard"); info.Source != SourceUpload || info.SHA256 != allowlist.Sum(base) {
		t.Fatalf("unlisted folder file replaced standard: %+v", info)
	}
	if info := infoOf(t, r, "failstep"); info.Source != SourceFolder {
		t.Fatalf("listed folder file not loaded: %+v", info)
	}
	if _, err := NewRegistry(ctx, Options{NoBuiltins: true, AllowSHA256: []string{"xyz"}}); err == nil || !strings.Contains(err.Error(), "AllowSHA256") {
		t.Fatalf("bad allow-list entry: %v", err)
	}
	// With a plugin registry given, its allow-list is the one: a second
	// list in these options is refused, not silently ignored.
	if _, err := NewRegistry(ctx, Options{Plugins: r.plugins, AllowSHA256: []string{allowlist.Sum(base)}}); err == nil || !strings.Contains(err.Error(), "plugin.NewRegistryWith") {
		t.Fatalf("AllowSHA256 beside Plugins: %v", err)
	}
}

// TestMemoryCap: a sampler that grows its memory without bound is held at
// the configured cap and its step fails with an error naming the cap (and
// with no default to fall back to, the host sampler is asked for); one
// whose static data alone exceeds the cap is refused before it is
// compiled, and loads once the cap is raised (so the cap, nothing else,
// refused it).
func TestMemoryCap(t *testing.T) {
	ctx := context.Background()
	r := newRegistry(t, Options{NoBuiltins: true, Runtime: plugin.Config{SamplerMemoryLimitPages: 64, StepDeadline: time.Minute}})
	if err := r.Swap(ctx, "membomb", hostile(t, "membomb"), SourceUpload); err != nil {
		t.Fatal(err)
	}
	rows := batchOf(2, 50, 9)
	out := make([]Choice, 2)
	bomb := []SeqState{{Params: mustValidate(t, r, "membomb", map[string]any{"bomb": 1})}, {}}
	err := r.SampleBatch(ctx, "membomb", rows, bomb, out)
	var te *plugin.TrapError
	if !errors.As(err, &te) || !errors.Is(err, ErrHostFallback) || !strings.Contains(err.Error(), "memory at the cap of 64 pages") {
		t.Fatalf("memory bomb: %v", err)
	}
	if err := r.SampleBatch(ctx, "membomb", rows, make([]SeqState, 2), out); err != nil {
		t.Fatalf("membomb's next calm step: %v", err)
	}
	big := hostile(t, "bigmem")
	err = r.Swap(ctx, "bigmem", big, SourceUpload)
	var re *plugin.RefusedError
	if !errors.As(err, &re) || re.Stage != "limits" || !strings.Contains(err.Error(), "is over the limit of 64") {
		t.Fatalf("bigmem under a 64-page cap: %v", err)
	}
	roomy := newRegistry(t, Options{NoBuiltins: true, Runtime: plugin.Config{SamplerMemoryLimitPages: 2048, StepDeadline: time.Minute}})
	if err := roomy.Swap(ctx, "bigmem", big, SourceUpload); err != nil {
		t.Fatalf("bigmem under a 2048-page cap: %v", err)
	}
}

// TestImportsRefused: uploads and folder files may import nothing beyond
// the ABI's (wasi_snapshot_preview1 functions).
func TestImportsRefused(t *testing.T) {
	r := newRegistry(t, Options{NoBuiltins: true})
	err := r.Swap(context.Background(), "importer", hostile(t, "importer"), SourceUpload)
	var re *plugin.RefusedError
	if !errors.As(err, &re) || re.Stage != "imports" || !strings.Contains(err.Error(), "env.peek") {
		t.Fatalf("importer: %v", err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "importer.wasm"), hostile(t, "importer"), 0o644); err != nil {
		t.Fatal(err)
	}
	stop := r.Watch(context.Background(), dir, time.Hour)
	stop()
	if len(r.List()) != 0 {
		t.Fatalf("importer loaded from the folder: %+v", r.List())
	}
}

// TestDisableAfterFailures: a policy that traps on every real step fails
// that step only: each failed step is logged and its rows are served at
// once by the default policy, with the tokens the default gives directly.
// DisableAfter consecutive failures disable it (logged, shown in Info);
// its later steps go straight to the default; a swap re-enables it.
func TestDisableAfterFailures(t *testing.T) {
	ctx := context.Background()
	var logs syncBuffer
	r := newRegistry(t, Options{Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
	fail := hostile(t, "failstep")
	if err := r.Swap(ctx, "failstep", fail, SourceUpload); err != nil {
		t.Fatal(err)
	}
	const n = 5
	rows := batchOf(n, 200, 4)
	seqsFor := func(policy string, p map[string]any) []SeqState {
		c := mustValidate(t, r, policy, p)
		s := make([]SeqState, n)
		for i := range s {
			s[i] = SeqState{Params: c, Seed: uint64(100 + i), Step: 7}
		}
		return s
	}
	out := make([]Choice, n)
	failing := seqsFor("failstep", map[string]any{"fail": 1, "temperature": 0.7})
	calm := seqsFor("failstep", map[string]any{"temperature": 0.7})
	want := make([]Choice, n)
	if err := r.SampleBatch(ctx, "standard", rows, seqsFor("standard", map[string]any{"temperature": 0.7}), want); err != nil {
		t.Fatal(err)
	}
	served := func(step string) {
		t.Helper()
		for i := range n {
			if out[i].Policy != "standard" || out[i] != want[i] {
				t.Fatalf("%s, row %d: %+v, want the default's %+v", step, i, out[i], want[i])
			}
		}
	}

	// A success in between resets the run: 2 failures, 1 success, 2
	// failures. No step fails its rows: the default serves them.
	for i, s := range [][]SeqState{failing, failing, calm, failing, failing} {
		if err := r.SampleBatch(ctx, "failstep", rows, s, out); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if i == 2 {
			if out[0].Policy != "failstep" {
				t.Fatalf("calm step served by %s", out[0].Policy)
			}
		} else {
			served(fmt.Sprintf("failing step %d", i))
		}
	}
	if info := infoOf(t, r, "failstep"); info.Disabled || info.ConsecutiveFailures != 2 || info.Failures != 4 || info.Fallbacks != 4*n {
		t.Fatalf("after a broken run: %+v", info)
	}
	if log := logs.String(); strings.Count(log, `"msg":"sampler step failed; its rows fall back"`) != 4 || !strings.Contains(log, `"fallback":"standard"`) {
		t.Fatalf("failed steps not logged with their fallback:\n%s", log)
	}
	// The third consecutive failure disables it.
	if err := r.SampleBatch(ctx, "failstep", rows, failing, out); err != nil {
		t.Fatalf("third failure: %v", err)
	}
	served("third failure")
	info := infoOf(t, r, "failstep")
	if !info.Disabled || info.DisabledAt.IsZero() || info.ConsecutiveFailures != 3 || !strings.Contains(info.LastError, "trapped") || info.Fallbacks != 5*n {
		t.Fatalf("not disabled: %+v", info)
	}
	log := logs.String()
	for _, w := range []string{`"level":"WARN"`, `"msg":"sampler disabled`, `"policy":"failstep"`, `"version":"` + info.Version, `"failures":3`, `"last_error":"plugin: failstep: kvhost_sample trapped`} {
		if !strings.Contains(log, w) {
			t.Fatalf("log lacks %s:\n%s", w, log)
		}
	}
	// Its name still resolves; its steps now go to the default without
	// calling it (temperature carries over; "fail" is not the default's
	// parameter).
	if _, err := r.ValidateParams("failstep", map[string]any{"fail": 1}); err != nil {
		t.Fatalf("disabled name stopped resolving: %v", err)
	}
	for range 2 {
		if err := r.SampleBatch(ctx, "failstep", rows, failing, out); err != nil {
			t.Fatalf("step after disabling: %v", err)
		}
		served("after disabling")
	}
	info = infoOf(t, r, "failstep")
	if !info.Disabled || info.Fallbacks != 7*n || info.Calls != 6 {
		t.Fatalf("after fallbacks: %+v", info)
	}
	// A swap of the name re-enables it: it serves its own steps again.
	if err := r.Swap(ctx, "failstep", fail, SourceUpload); err != nil {
		t.Fatal(err)
	}
	if info := infoOf(t, r, "failstep"); info.Disabled || info.ConsecutiveFailures != 0 || !info.DisabledAt.IsZero() {
		t.Fatalf("after swap: %+v", info)
	}
	if err := r.SampleBatch(ctx, "failstep", rows, calm, out); err != nil || out[0].Policy != "failstep" {
		t.Fatalf("re-enabled step: %v %+v", err, out[0])
	}
	if !strings.Contains(logs.String(), "sampler re-enabled") {
		t.Fatal("re-enabling not logged")
	}
}

// TestDisabledWithoutFallback: when the default itself fails, SampleBatch
// answers ErrHostFallback (a *StepFailedError while it fails, a
// *PolicyDisabledError once disabled) and leaves out untouched (the engine
// then uses its host sampler); DisableAfter < 0 never disables.
func TestDisabledWithoutFallback(t *testing.T) {
	ctx := context.Background()
	fail := hostile(t, "failstep")
	r := newRegistry(t, Options{NoBuiltins: true, Default: "failstep", DisableAfter: 2})
	if err := r.Swap(ctx, "failstep", fail, SourceUpload); err != nil {
		t.Fatal(err)
	}
	if err := r.Swap(ctx, "loop", hostile(t, "loop"), SourceUpload); err != nil {
		t.Fatal(err)
	}
	rows := batchOf(3, 40, 5)
	failing := make([]SeqState, 3)
	for i := range failing {
		failing[i].Params = mustValidate(t, r, "", map[string]any{"fail": 1})
	}
	out := make([]Choice, 3)
	for range 2 {
		var sf *StepFailedError
		if err := r.SampleBatch(ctx, "", rows, failing, out); !errors.As(err, &sf) || !errors.Is(err, ErrHostFallback) || errors.Is(err, ErrPolicyDisabled) {
			t.Fatalf("failing step: %v", err)
		}
	}
	for i := range out {
		out[i] = Choice{Token: -7}
	}
	err := r.SampleBatch(ctx, "", rows, make([]SeqState, 3), out)
	var pd *PolicyDisabledError
	if !errors.As(err, &pd) || !errors.Is(err, ErrPolicyDisabled) || !errors.Is(err, ErrHostFallback) || pd.Policy != "failstep" || pd.Failures != 2 || pd.DisabledAt.IsZero() {
		t.Fatalf("disabled default: %v", err)
	}
	if !errors.As(err, new(*plugin.TrapError)) {
		t.Fatalf("%v does not wrap the last failure", err)
	}
	for i := range out {
		if out[i].Token != -7 {
			t.Fatalf("out[%d] written: %+v", i, out[i])
		}
	}
	// Another policy disabled while the default is too: the same answer,
	// naming the policy asked for. The loop policy fails by fuel.
	spin := []SeqState{{Params: mustValidate(t, r, "loop", map[string]any{"spin": 1})}, {}, {}}
	for range 2 {
		if err := r.SampleBatch(ctx, "loop", rows, spin, out); !errors.Is(err, plugin.ErrOutOfFuel) {
			t.Fatalf("loop: %v", err)
		}
	}
	if err := r.SampleBatch(ctx, "loop", rows, spin, out); !errors.As(err, &pd) || pd.Policy != "loop" {
		t.Fatalf("loop disabled, default disabled: %v", err)
	}
	if f := infoOf(t, r, "failstep").Fallbacks; f != 9 {
		t.Fatalf("fallbacks %d, want 9 rows (two failed steps and one disabled, of 3 rows each)", f)
	}

	never := newRegistry(t, Options{NoBuiltins: true, Default: "failstep", DisableAfter: -1})
	if err := never.Swap(ctx, "failstep", fail, SourceUpload); err != nil {
		t.Fatal(err)
	}
	for range 5 {
		if err := never.SampleBatch(ctx, "", rows, failing, out); !errors.Is(err, ErrHostFallback) || errors.Is(err, ErrPolicyDisabled) {
			t.Fatalf("DisableAfter -1: %v", err)
		}
	}
	if info := infoOf(t, never, "failstep"); info.Disabled {
		t.Fatalf("disabled with DisableAfter -1: %+v", info)
	}
}

// TestDisableConcurrent: concurrent failing steps disable the policy
// exactly once, and no step is lost: every one is served by the default.
func TestDisableConcurrent(t *testing.T) {
	ctx := context.Background()
	var logs syncBuffer
	r := newRegistry(t, Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err := r.Swap(ctx, "failstep", hostile(t, "failstep"), SourceUpload); err != nil {
		t.Fatal(err)
	}
	c := mustValidate(t, r, "failstep", map[string]any{"fail": 1})
	var wg sync.WaitGroup
	var mu sync.Mutex
	failed, served := 0, 0
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rows := batchOf(2, 64, uint64(g))
			seqs := []SeqState{{Params: c}, {Params: c}}
			out := make([]Choice, 2)
			for range 10 {
				err := r.SampleBatch(ctx, "failstep", rows, seqs, out)
				mu.Lock()
				if err != nil {
					failed++
				} else if out[0].Policy == "standard" {
					served++
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if failed != 0 || served != 40 {
		t.Fatalf("%d failed, %d served by the default", failed, served)
	}
	if n := strings.Count(logs.String(), "sampler disabled"); n != 1 {
		t.Fatalf("disabled logged %d times", n)
	}
	if info := infoOf(t, r, "failstep"); !info.Disabled || info.Fallbacks != int64(2*served) {
		t.Fatalf("%+v with %d served", info, served)
	}
}
