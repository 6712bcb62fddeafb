package plugin

import (
	"context"
	"errors"
	"reflect"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/kvhost/kvhost/sdk"
)

// TestInterpretedConfigurators: under Config.InterpretConfigurators a
// configurator runs on the interpreter — nothing compiled — with the same
// answers as compiled, and keeps the sandbox: the watchdog's deadline
// stops a looping guest, fuel stops it when the deadline is far, a panic
// and a memory bomb (under the page cap) trap, each failed instance
// discarded.
func TestInterpretedConfigurators(t *testing.T) {
	ctx := context.Background()
	newRT := func(cfg Config) *Runtime {
		t.Helper()
		cfg.InterpretConfigurators, cfg.NoCache = true, true
		rt, err := NewRuntime(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = rt.Close(ctx) })
		return rt
	}

	rt := newRT(Config{CallTimeout: 10 * time.Minute, MemoryLimitPages: 128}) // slow under -race on a loaded machine
	p, err := rt.Load(ctx, "mha", readWasm(t, "mha"))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(ctx)
	l, err := p.Configure(ctx, llamaInput(t))
	if err != nil {
		t.Fatal(err)
	}
	u, err := l.Size(ctx, 55923118899, 0, 0)
	want := configure(t, "mha", "llama-3-8b", sdk.HostFacts{})
	if err != nil || u["kv"] != 426659 || !reflect.DeepEqual(l.Pools, want.Pools) {
		t.Fatalf("interpreted mha: %v %v, pools equal to compiled %v", u, err, reflect.DeepEqual(l.Pools, want.Pools))
	}
	if rt.compiles.Load() != 0 || rt.interprets.Load() != 1 {
		t.Fatalf("%d compiled, %d interpreted; want 0 and 1", rt.compiles.Load(), rt.interprets.Load())
	}

	for _, tt := range []struct{ name, reason string }{
		{"hostile-panic", "panic: hostile: deliberate panic in configure"},
		{"hostile-membomb", "out of memory"},
	} {
		q, err := rt.Load(ctx, tt.name, readWasm(t, tt.name))
		if err != nil {
			t.Fatal(err)
		}
		_, err = q.Configure(ctx, llamaInput(t))
		var trap *TrapError
		if !errors.As(err, &trap) || !strings.Contains(trap.Reason, tt.reason) || idle(q) != 0 {
			t.Fatalf("%s: %v (idle %d)", tt.name, err, idle(q))
		}
		_ = q.Close(ctx)
	}

	// Fuel: a loop with a small budget and a far deadline.
	fuelRT := newRT(Config{CallTimeout: 60 * time.Second, CallFuel: 1 << 22})
	loop, err := fuelRT.Load(ctx, "hostile-loop", readWasm(t, "hostile-loop"))
	if err != nil {
		t.Fatal(err)
	}
	defer loop.Close(ctx)
	start := time.Now()
	if _, err := loop.Configure(ctx, llamaInput(t)); !errors.Is(err, ErrOutOfFuel) {
		t.Fatalf("loop under a small budget: %v after %v", err, time.Since(start))
	}

	// The deadline: a loop with fuel for far longer than its 5 s (which
	// the handshake's calls must meet too: an interpreted Go guest's
	// start-up under -race on a loaded machine took over 300 ms).
	const deadline = 5 * time.Second
	dlRT := newRT(Config{CallTimeout: deadline, CallFuel: 1 << 40})
	spin, err := dlRT.Load(ctx, "hostile-loop", readWasm(t, "hostile-loop"))
	if err != nil {
		t.Fatal(err)
	}
	defer spin.Close(ctx)
	runtime.GC()
	gc := debug.SetGCPercent(-1)
	start = time.Now()
	_, err = spin.Configure(ctx, llamaInput(t))
	el := time.Since(start)
	debug.SetGCPercent(gc)
	var dl *DeadlineError
	if !errors.As(err, &dl) || !errors.Is(err, context.DeadlineExceeded) || el < deadline || el > deadline+5*time.Second || idle(spin) != 0 {
		t.Fatalf("loop past its deadline: %v after %v", err, el)
	}
	t.Logf("interpreted loop stopped after %v (deadline %v)", el, deadline)
}
