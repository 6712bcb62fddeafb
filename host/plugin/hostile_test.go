package plugin

import (
	"context"
	"encoding/json"
	"errors"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvhost/kvhost/sdk"
)

// shortRT has a short deadline for the infinite-loop plugin.
var (
	shortOnce sync.Once
	shortRT   *Runtime
)

func shortRuntime(t *testing.T) *Runtime {
	shortOnce.Do(func() {
		var err error
		// Fuel for ~2 s of looping: the deadline, not the fuel (the
		// default runs out in ~0.2 s on a quiet machine), is what these
		// tests stop.
		shortRT, err = NewRuntime(context.Background(), Config{CallTimeout: 300 * time.Millisecond, CallFuel: 2 << 30})
		if err != nil {
			t.Fatal(err)
		}
	})
	return shortRT
}

// goodCall proves the host still works: the mha plugin configures Llama-3-8B.
func goodCall(t *testing.T) {
	t.Helper()
	l := configure(t, "mha", "llama-3-8b", sdk.HostFacts{})
	u, err := l.Size(context.Background(), 55923118899, 0, 0)
	if err != nil || u["kv"] != 426659 {
		t.Fatalf("good plugin after hostile one: %v %v", u, err)
	}
}

func idle(p *Plugin) int {
	p.m.mu.Lock()
	defer p.m.mu.Unlock()
	return len(p.m.idle)
}

func llamaInput(t *testing.T) sdk.ConfigureInput {
	return sdk.ConfigureInput{Model: modelConfig(t, "llama-3-8b")}
}

func TestHostileHandshake(t *testing.T) {
	t.Parallel()
	_, err := testRT.Load(context.Background(), "hostile-badabi", readWasm(t, "hostile-badabi"))
	var abi *ABIError
	if !errors.As(err, &abi) || abi.Want != sdk.ABIVersion || abi.Found != 99 || abi.Plugin != "hostile-badabi" {
		t.Fatalf("badabi: %v", err)
	}
	// A configurator built against ABI 1 (its declare_pool and
	// declare_buffer have ABI 1's signatures) is refused by version, with
	// the message that says what to do.
	_, err = testRT.Load(context.Background(), "hostile-abi1", readWasm(t, "hostile-abi1"))
	const want = "plugin: hostile-abi1: refused at imports: built against ABI 1, this host needs 2: rebuild with the current sdk"
	if !errors.As(err, &abi) || abi.Found != 1 || err.Error() != want {
		t.Fatalf("abi1: %v, want %q", err, want)
	}
	_, err = testRT.Load(context.Background(), "hostile-noexport", readWasm(t, "hostile-noexport"))
	var missing *MissingExportError
	if !errors.As(err, &missing) || missing.Export != sdk.ExportDescribe || missing.Plugin != "hostile-noexport" {
		t.Fatalf("noexport: %v", err)
	}
	_, err = testRT.Load(context.Background(), "garbage", []byte("\x00asm\x01\x00\x00\x00garbage"))
	if err == nil || !strings.Contains(err.Error(), "garbage: refused at instrument") {
		t.Fatalf("garbage: %v", err)
	}
	goodCall(t)
}

// TestHostileLoopStoppedByDeadline: the watchdog ends a call at its
// deadline although the guest still has fuel. Not parallel, and with the
// collector off for the call: a collection waits for the looping guest and
// stops the watchdog with it, which leaves the call to its fuel (the
// documented limit in watchdog.go, and why fuel is the first line of
// defence) — that is not what this test is about.
func TestHostileLoopStoppedByDeadline(t *testing.T) {
	rt := shortRuntime(t)
	p, err := rt.Load(context.Background(), "hostile-loop", readWasm(t, "hostile-loop"))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(context.Background())
	in := llamaInput(t)
	runtime.GC()
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	start := time.Now()
	_, err = p.Configure(context.Background(), in)
	el := time.Since(start)
	debug.SetGCPercent(100)
	var dl *DeadlineError
	if !errors.As(err, &dl) || !errors.Is(err, context.DeadlineExceeded) || dl.Plugin != "hostile-loop" {
		t.Fatalf("loop: %v after %v", err, el)
	}
	if el > 1500*time.Millisecond {
		t.Fatalf("loop stopped after %v, deadline 300ms", el)
	}
	if n := idle(p); n != 0 {
		t.Fatalf("timed-out instance returned to the pool (%d idle)", n)
	}
	goodCall(t)
}

func TestHostileTraps(t *testing.T) {
	t.Parallel()
	// The memory bomb runs under a 128-page (8 MiB) cap: the same path as
	// the default 512 pages, but filling 4× less memory keeps it well
	// inside its deadline under -race on a loaded machine (at 512 pages it
	// overran the 20 s deadline there, before this change as after).
	rt, err := NewRuntime(context.Background(), Config{MemoryLimitPages: 128, CallTimeout: 60 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close(context.Background())
	for _, tt := range []struct{ name, reason string }{
		{"hostile-panic", "panic: hostile: deliberate panic in configure"},
		{"hostile-membomb", "out of memory"},
	} {
		p, err := rt.Load(context.Background(), tt.name, readWasm(t, tt.name))
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close(context.Background())
		for range 2 { // the second call runs on a fresh instance
			_, err := p.Configure(context.Background(), llamaInput(t))
			var trap *TrapError
			if !errors.As(err, &trap) || !strings.Contains(trap.Reason, tt.reason) || trap.Plugin != tt.name {
				t.Fatalf("%s: %v", tt.name, err)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("%s: multi-line error %q", tt.name, err)
			}
			if n := idle(p); n != 0 {
				t.Fatalf("%s: trapped instance returned to the pool", tt.name)
			}
		}
		goodCall(t)
	}
}

func TestHostileLiar(t *testing.T) {
	t.Parallel()
	p := load(t, "hostile-liar")
	in := func(mode string) sdk.ConfigureInput {
		m, _ := json.Marshal(map[string]string{"hostile_mode": mode})
		return sdk.ConfigureInput{Model: m}
	}
	_, err := p.Configure(context.Background(), in("buffers"))
	var ce *ContractError
	if !errors.As(err, &ce) || ce.Plugin != "hostile-liar" || !strings.Contains(err.Error(), "buffers add up to 1024 bytes per token but the pool declares 4096") {
		t.Fatalf("buffers: %v", err)
	}
	for _, tt := range []struct {
		mode     string
		tokenCap int64
		want     string
	}{
		{"greedy", 0, "units need 1048576000 bytes (kv 1024000 × 1024 B) but only 1047552000 are available"},
		{"overcap", 5000, "pool kv got 5001 tokens, over the cap of 5000"},
		{"undeclared", 0, `pool "ghost" was not declared`},
		{"missing", 0, "pool kv got no units"},
	} {
		l, err := p.Configure(context.Background(), in(tt.mode))
		if err != nil {
			t.Fatalf("%s: configure: %v", tt.mode, err)
		}
		_, err = l.Size(context.Background(), 1023000*1024, tt.tokenCap, 0)
		if !errors.As(err, &ce) || !strings.Contains(err.Error(), tt.want) {
			t.Fatalf("%s: %v, want %q", tt.mode, err, tt.want)
		}
	}
	// The honest mode passes: the checks are not refusing everything.
	l, err := p.Configure(context.Background(), in(""))
	if err != nil {
		t.Fatal(err)
	}
	if u, err := l.Size(context.Background(), 1<<20, 0, 0); err != nil || u["kv"] != 1024 {
		t.Fatalf("honest liar: %v %v", u, err)
	}
	goodCall(t)
}

func TestGuestErrorKeepsInstance(t *testing.T) {
	t.Parallel()
	rt, err := NewRuntime(context.Background(), Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close(context.Background())
	p, err := rt.Load(context.Background(), "mha", readWasm(t, "mha"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = p.Configure(context.Background(), sdk.ConfigureInput{Model: json.RawMessage(`{"num_attention_heads": 8}`)})
	var ge *GuestError
	if !errors.As(err, &ge) || !strings.Contains(ge.Msg, "lacks num_hidden_layers") {
		t.Fatalf("err = %v", err)
	}
	if n := idle(p); n != 1 {
		t.Fatalf("%d idle instances after a guest-reported error, want 1 (reused)", n)
	}
	_, err = p.Configure(context.Background(), sdk.ConfigureInput{Model: modelConfig(t, "llama-3-8b"), Host: sdk.HostFacts{KVDType: "fp4"}})
	if !errors.As(err, &ge) || !strings.Contains(ge.Msg, `kv_dtype "nvfp4" not supported`) {
		t.Fatalf("fp4 on mha: %v", err)
	}
}

// TestConcurrentCallers runs configure+size from many goroutines on one
// plugin: each gets its own instance, Size re-runs configure on fresh
// instances, and every result is identical.
func TestConcurrentCallers(t *testing.T) {
	t.Parallel()
	p := load(t, "swa")
	l, err := p.Configure(context.Background(), sdk.ConfigureInput{Model: modelConfig(t, "gpt-oss-20b")})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 6)
	for range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 3 {
				u, err := l.Size(context.Background(), 53687091200, 0, 0)
				if err == nil && (u["full"] != 1213629 || u["swa"] != 970903) {
					err = errors.New("wrong units")
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}
